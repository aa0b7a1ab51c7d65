"""Evaluation on held-out seeds: success rate and mean reward with 95% CIs, trajectories as JSONL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_train.envs import make_env, reset_seed, tools_of
from trace_train.policies.base import Policy, SamplingConfig, as_conversation
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, stream_collect
from trace_train.stats import bootstrap_mean_interval, wilson_interval


@dataclass
class EvalResult:
    env_id: str
    split: str
    episodes: int
    success_rate: float
    success_ci: tuple[float, float]
    reward_mean: float
    reward_ci: tuple[float, float]
    trajectories: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "trajectories"}

    def line(self) -> str:
        return (
            f"{self.env_id} [{self.split}, n={self.episodes}] success {self.success_rate:.3f} "
            f"(95% CI {self.success_ci[0]:.3f}-{self.success_ci[1]:.3f}), mean reward {self.reward_mean:.3f} "
            f"(95% CI {self.reward_ci[0]:.3f}-{self.reward_ci[1]:.3f})"
        )


def _text_episodes(
    policy: Policy, envs: Sequence[Any], specs: Sequence[ResetSpec], sampling: SamplingConfig, max_turns: int
) -> list[dict[str, Any]]:
    """Text-level batched episodes for any Policy (e.g. the OpenAI-compatible HTTP policy); one env per spec."""
    convs, tools, records = [], [], []
    for env, spec in zip(envs, specs, strict=True):
        obs, info = env.reset(seed=spec.seed, options=spec.options())
        convs.append(as_conversation(obs))
        tools.append(tools_of(env, info))
        records.append(
            {"seed": spec.seed, "split": spec.split, "reward": 0.0, "turns": 0, "invalid_actions": 0}
        )
    active = list(range(len(envs)))
    for _turn in range(max_turns):
        if not active:
            break
        texts = policy.act([convs[i] for i in active], [tools[i] for i in active], sampling)
        still = []
        for i, text in zip(active, texts, strict=True):
            obs, reward, term, trunc, info = envs[i].step(text)
            rec = records[i]
            rec["reward"], rec["turns"] = float(reward), rec["turns"] + 1
            rec["invalid_actions"] += int(bool(info.get("invalid_action")))
            convs[i] = (
                [
                    *convs[i],
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": obs},
                ]
                if isinstance(obs, str)
                else as_conversation(obs)
            )
            if not (term or trunc):
                still.append(i)
        active = still
    for rec, conv in zip(records, convs, strict=True):
        rec["success"] = rec["reward"] >= 1.0
        rec["messages"] = conv
    return records


def evaluate(
    policy: Policy | HFPolicy,
    env_id: str,
    episodes: int = 50,
    split: str = "test",
    sampling: SamplingConfig | None = None,
    max_turns: int = 8,
    batch_size: int = 16,
    seed_offset: int = 0,
    difficulty: int | None = None,
    out_jsonl: str | Path | None = None,
    max_total_tokens: int = 32768,
    resume: bool = False,
) -> EvalResult:
    """Greedy by default; seeds are ``reset_seed(split, seed_offset + i)`` so test seeds never overlap training.

    ``max_total_tokens`` cuts a conversation that grows past it (the env's own turn limit normally ends it first;
    retail's system prompt alone is ~3.3k SmolLM2 tokens, so a 4k cap would end episodes early).
    ``out_jsonl`` receives each episode as it finishes (in the order of the tasks once all are done); with
    ``resume`` the episodes it already holds for these tasks are kept and only the others run (an evaluation
    interrupted after 150 of 200 episodes runs the last 50)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    for name, value, low in (
        ("episodes", episodes, 1),
        ("batch_size", batch_size, 1),
        ("max_turns", max_turns, 1),
        ("max_total_tokens", max_total_tokens, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be an integer >= {low}, got {value!r}")
    if isinstance(seed_offset, bool) or not isinstance(seed_offset, int) or seed_offset < 0:
        raise ValueError(f"--seed-offset must be an integer >= 0, got {seed_offset!r}")
    sampling = sampling or SamplingConfig(temperature=0.0, max_new_tokens=256)
    path = Path(out_jsonl) if out_jsonl is not None else None
    # one env per batch slot, made once and reset for every episode; the first also tells the seed convention
    envs = [make_env(env_id) for _ in range(max(1, min(batch_size, episodes)))]
    try:
        specs = [
            ResetSpec(
                seed=reset_seed(split, seed_offset + i, envs[0]), group=i, split=split, difficulty=difficulty
            )
            for i in range(episodes)
        ]
        done = _finished_episodes(path, specs) if resume and path is not None else {}
        todo = [spec for spec in specs if spec.seed not in done]
        sink = _EpisodeSink(path, list(done.values()))
        if isinstance(policy, HFPolicy) and todo:
            # continuous batching: up to batch_size conversations at once, a finished one's slot starts the next
            stream_collect(
                policy,
                envs,
                todo,
                sampling,
                max_turns,
                max_total_tokens,
                on_finish=lambda _i, traj, _env: sink.add(traj.to_json()),
            )
        else:
            for b in range(0, len(todo), batch_size):
                chunk = todo[b : b + batch_size]
                for rec in _text_episodes(policy, envs[: len(chunk)], chunk, sampling, max_turns):
                    sink.add(rec)
    finally:
        for env in envs:
            env.close()
    by_seed = {rec["seed"]: rec for rec in sink.records}
    records = [by_seed[spec.seed] for spec in specs]
    rewards = [r["reward"] for r in records]
    wins = sum(1 for r in rewards if r >= 1.0)
    n = len(records)
    result = EvalResult(
        env_id=env_id,
        split=split,
        episodes=n,
        success_rate=wins / n if n else 0.0,
        success_ci=wilson_interval(wins, n),
        reward_mean=sum(rewards) / n if n else 0.0,
        reward_ci=bootstrap_mean_interval(rewards),
        trajectories=records,
    )
    if path is not None:  # the same records, in task order
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in records), encoding="utf-8")
    return result


def _finished_episodes(path: Path, specs: list[ResetSpec]) -> dict[int, dict[str, Any]]:
    """The episodes ``path`` holds for these tasks, by seed (a line torn by an interruption is dropped)."""
    if not path.is_file():
        return {}
    wanted = {spec.seed for spec in specs}
    done = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("seed") in wanted:
            done[rec["seed"]] = rec
    return done


class _EpisodeSink:
    """Collects finished episodes and appends each to the JSONL file at once (flushed), so an interruption
    loses only the episodes still running."""

    def __init__(self, path: Path | None, kept: list[dict[str, Any]]):
        self.path, self.records = path, list(kept)
        if path is not None:  # rewritten with what is kept: no torn line stays in front of the new ones
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r, default=str) + "\n" for r in kept), encoding="utf-8")

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")
