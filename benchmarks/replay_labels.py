"""Relabel recorded trajectories with another version of an env's labeller, by replaying their actions.

Issue 28 asks for the demo's base rollouts analysed before and after labels by cause. The labels are the env's
(``info["requirements"]``), computed when an episode ends, so "before" means the same episodes judged by the
code before the change. This script replays each record's assistant turns as actions in the env of whatever
``trace_gym`` is importable (point ``PYTHONPATH`` at a worktree of the old commit), keeps the replays that
reproduce the recorded conversation exactly (same messages, same reward), and writes them with that code's
labels, ready for ``trace analyze``. Replays that diverge (the old user says something else) are counted and
left out, so the before/after tables are on the same episodes.

    git worktree add /tmp/before 6d646da^
    PYTHONPATH=/tmp/before python benchmarks/replay_labels.py runs/demo/02-rollouts/trajectories.jsonl before.jsonl
    python benchmarks/replay_labels.py runs/demo/02-rollouts/trajectories.jsonl after.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def action_of(message: dict[str, Any]) -> dict[str, Any]:
    action: dict[str, Any] = {"content": message.get("content") or ""}
    if message.get("tool_calls"):
        action["tool_calls"] = message["tool_calls"]
    return action


def replay(env: Any, record: dict[str, Any]) -> dict[str, Any] | None:
    """The record relabelled by this code's env, or None when the replay does not reproduce it."""
    options: dict[str, Any] = {"split": record["split"]}
    if record.get("difficulty") is not None:
        options["difficulty"] = record["difficulty"]
    obs, info = env.reset(seed=record["seed"], options=options)
    terminated = truncated = False
    recorded = record["messages"]
    # the raw actions as the agent produced them (text the env parses); older records only have the messages
    actions = record.get("actions") or [
        action_of(m) for m in recorded[len(obs) :] if m["role"] == "assistant"
    ]
    reward = 0.0
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    same = [dict(m) for m in obs] == [dict(m) for m in recorded[: len(obs)]] and len(obs) == len(recorded)
    if not same or float(reward) != float(record["reward"]) or not (terminated or truncated):
        return None  # diverged, or not ended by the env (no verdict, so no labels to compare)
    relabelled = {**record, "requirements": dict(info.get("requirements", {}))}
    for key in ("first_failure", "outcome"):  # this code's diagnosis, where it has one
        relabelled.pop(key, None)
        if key in info:
            relabelled[key] = info[key]
    return relabelled


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records")
    p.add_argument("out")
    p.add_argument("--env", default=None, help="env id (default: each record's env_id)")
    ns = p.parse_args(argv)
    import gymnasium as gym

    import trace_gym  # noqa: F401 - registers the ids

    with open(ns.records, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    envs: dict[tuple[str, int | None], Any] = {}
    kept, diverged = [], 0
    for record in records:
        env_id = ns.env or record["env_id"]
        # an episode the env cut at its turn limit is replayed under the same limit (the labels are the env's
        # verdict at its end; without the limit the replay would stop mid-episode, unlabelled)
        limit = record.get("turns") if record.get("truncated") else None
        if (env_id, limit) not in envs:
            kwargs = {} if limit is None else {"max_turns": limit}
            envs[env_id, limit] = gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped
        env = envs[env_id, limit]
        relabelled = replay(env, record)
        if relabelled is None:
            diverged += 1
        else:
            kept.append(relabelled)
    with open(ns.out, "w", encoding="utf-8") as f:
        for record in kept:
            f.write(json.dumps(record) + "\n")
    print(f"{len(kept)} of {len(records)} replays reproduced the recording ({diverged} diverged) -> {ns.out}")
    sys.exit(0 if kept else 1)


if __name__ == "__main__":
    main()
