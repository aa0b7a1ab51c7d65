"""How much of an evaluation runs after its outcome is decided: replay recorded retail episodes in the env and
find the first agent turn after which no continuation can change the reward (the first of the verifier's
violations, ``trace/retail-v2``'s ``decided()``: a broken policy rule, a wrong write, a wrong or uninformed answer,
sprayed amounts). Everything after that turn is what ``stop_when_decided`` saves.

    python benchmarks/decided_replay.py runs/demo/02-rollouts/trajectories.jsonl --difficulty 1 \
        --out benchmarks/results/decided/rollouts.json

Per episode: the recorded reward, the replayed one (they must agree: the replay is exact), the decided turn and
the turns and generated tokens after it. Summary: the share of agent turns and of generated tokens that came after
the decision, and the check the stop rests on: every decided episode scored 0.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trace_gym.registration import make_env


def agent_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any] | str]:
    """The actions of a recorded episode, in order: its assistant messages (a raw string where the env could not
    read the turn)."""
    actions: list[dict[str, Any] | str] = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        if m.get("tool_calls"):
            actions.append({"content": m.get("content"), "tool_calls": m["tool_calls"]})
        else:
            actions.append(m.get("content") or "")
    return actions


def replay(record: dict[str, Any], env_id: str, difficulty: int | None, tokenizer) -> dict[str, Any]:
    env = make_env(env_id, max_turns=10**6)
    options: dict[str, Any] = {"split": record.get("split", "train")}
    if difficulty is not None:
        options["difficulty"] = difficulty
    env.reset(seed=record["seed"], options=options)
    actions = agent_turns(record["messages"])
    decided_turn, violation, reward = None, None, 0.0
    for turn, action in enumerate(actions, 1):
        _, reward, terminated, truncated, _ = env.step(action)
        if decided_turn is None:
            decided = env.unwrapped.decided()
            if decided is not None:
                decided_turn, violation = turn, decided["violation"]
        if terminated or truncated:
            break
    else:  # the runner cut the episode (its turn cap): the env's score at that point
        reward = float(env.unwrapped._evaluate().reward)
    lengths = [
        len(tokenizer.encode(a if isinstance(a, str) else json.dumps(a), add_special_tokens=False))
        for a in actions
    ]
    after = lengths[decided_turn:] if decided_turn is not None else []
    return {
        "seed": record["seed"],
        "recorded_reward": record["reward"],
        "replayed_reward": reward,
        "turns": len(actions),
        "decided_turn": decided_turn,
        "violation": violation,
        "turns_after": len(after),
        "tokens": sum(lengths),
        "tokens_after": sum(after),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trajectories", nargs="+", help="trajectory jsonl files of one retail env")
    parser.add_argument("--env-id", default="trace/retail-v2")
    parser.add_argument("--difficulty", type=int, default=None)
    parser.add_argument(
        "--tokenizer", default="smollm2-135m", help="model alias whose tokenizer counts tokens"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from trace_train.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.tokenizer))
    rows = []
    for path in args.trajectories:
        for line in Path(path).read_text().splitlines():
            rows.append(replay(json.loads(line), args.env_id, args.difficulty, tokenizer))
    decided = [r for r in rows if r["decided_turn"] is not None]
    summary = {
        "episodes": len(rows),
        "replay_exact": sum(r["recorded_reward"] == r["replayed_reward"] for r in rows),
        "successes": sum(r["recorded_reward"] >= 1.0 for r in rows),
        "decided": len(decided),
        "decided_and_scored_0": sum(r["recorded_reward"] == 0.0 for r in decided),
        "turns": sum(r["turns"] for r in rows),
        "turns_after_decided": sum(r["turns_after"] for r in rows),
        "tokens": sum(r["tokens"] for r in rows),
        "tokens_after_decided": sum(r["tokens_after"] for r in rows),
        "violations": {},
    }
    for r in decided:
        summary["violations"][r["violation"]] = summary["violations"].get(r["violation"], 0) + 1
    summary["turn_share_saved"] = round(summary["turns_after_decided"] / max(summary["turns"], 1), 3)
    summary["token_share_saved"] = round(summary["tokens_after_decided"] / max(summary["tokens"], 1), 3)
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "episodes": rows}, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
