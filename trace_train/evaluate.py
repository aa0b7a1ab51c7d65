"""Evaluation on held-out seeds: success rate and mean reward with 95% CIs, trajectories as JSONL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_gym.records import RecordWriter, read_records, write_records
from trace_gym.registration import make_env
from trace_gym.seeds import reset_seed
from trace_train.ceiling import check_caps, fill_caps
from trace_train.config import EvalSettings
from trace_train.episodes import run_episodes
from trace_train.policies.base import Policy, SamplingConfig
from trace_train.rollout import ResetSpec
from trace_train.roofline import LEDGER, account
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
    oracle_ceiling: dict[str, Any] | None = (
        None  # the caps' ceiling on train tasks (ceiling.py), when checked
    )
    roofline: dict[str, Any] | None = None  # the episodes' account against this machine (roofline.py)

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "trajectories"}

    def line(self) -> str:
        return (
            f"{self.env_id} [{self.split}, n={self.episodes}] success {self.success_rate:.3f} "
            f"(95% CI {self.success_ci[0]:.3f}-{self.success_ci[1]:.3f}), mean reward {self.reward_mean:.3f} "
            f"(95% CI {self.reward_ci[0]:.3f}-{self.reward_ci[1]:.3f})"
        )


def evaluate(
    policy: Policy,
    env_id: str,
    settings: EvalSettings | None = None,
    *,
    split: str = "test",
    difficulty: int | None = None,
    out_jsonl: str | Path | None = None,
    resume: bool = False,
    reuse: Iterable[dict[str, Any]] = (),
    progress: Callable[[int, int, int], None] | None = None,
) -> EvalResult:
    """Greedy by default; seeds are ``reset_seed(split, seed_offset + i)`` so test seeds never overlap training.

    ``settings.max_total_tokens`` cuts a conversation that grows past it (the env's own turn limit normally ends
    it first; retail's system prompt alone is ~3.3k SmolLM2 tokens, so a 4k cap would end episodes early).
    ``out_jsonl`` receives each episode as it finishes (in the order of the tasks once all are done); with
    ``resume`` the episodes it already holds for these tasks are kept and only the others run (an evaluation
    interrupted after 150 of 200 episodes runs the last 50). ``reuse``: episode records that another evaluation
    played with this very model; those of these tasks are kept as they are and not played again. ``progress``
    receives (episodes finished, episodes in all, successes) after each episode ends."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    # caps left at None are fitted to the env's oracle (ceiling.fill_caps), counted in this policy's tokens
    s = fill_caps(settings or EvalSettings(), getattr(policy, "renderer", None), env_id, difficulty)
    episodes = s.episodes
    sampling = SamplingConfig(temperature=s.temperature, max_new_tokens=s.max_new_tokens)
    path = Path(out_jsonl) if out_jsonl is not None else None
    ceiling = check_caps(
        policy,
        env_id,
        difficulty=difficulty,
        max_new_tokens=s.max_new_tokens,
        max_turns=s.max_turns,
        minimum=s.min_oracle_ceiling,
        where=f"evaluating on {env_id}",
    )
    probe = make_env(env_id)  # tells the seed convention (split-relative or disjoint ranges)
    try:
        specs = [
            ResetSpec(
                seed=reset_seed(split, s.seed_offset + i, probe), group=i, split=split, difficulty=difficulty
            )
            for i in range(episodes)
        ]
    finally:
        probe.close()
    done = _finished_episodes(path, specs) if resume and path is not None else {}
    wanted = {spec.seed for spec in specs}
    done.update((r["seed"], r) for r in reuse if r["seed"] in wanted)
    todo = [spec for spec in specs if spec.seed not in done]
    if path is not None:  # rewritten with what is kept, then each episode appended the moment it ends
        write_records(path, done.values())
    writer = RecordWriter(path) if path is not None else None
    finished = [len(specs) - len(todo), sum(r["reward"] >= 1.0 for r in done.values())]

    def on_record(record: dict[str, Any]) -> None:
        if writer is not None:
            writer.write(record)
        finished[0] += 1
        finished[1] += record["reward"] >= 1.0
        if progress is not None:
            progress(finished[0], len(specs), finished[1])

    work0, t0 = LEDGER.snapshot(), time.perf_counter()
    try:
        fresh = run_episodes(
            policy,
            env_id,
            todo,
            sampling,
            max_turns=s.max_turns,
            batch_size=s.batch_size,
            max_total_tokens=s.max_total_tokens,
            on_record=on_record,
            stop_when_decided=s.stop_when_decided,
        )
    finally:
        if writer is not None:
            writer.close()
    work = LEDGER.since(work0)
    ran_model = any(w.calls for w in work.values())
    roofline = account(work, time.perf_counter() - t0) if ran_model else None
    by_seed = {**done, **{rec["seed"]: rec for rec in fresh}}
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
        oracle_ceiling=ceiling.to_json() if ceiling is not None else None,
        roofline=roofline,
    )
    if path is not None:  # the same records, in task order
        write_records(path, records)
    return result


def _finished_episodes(path: Path, specs: list[ResetSpec]) -> dict[int, dict[str, Any]]:
    """The episodes ``path`` holds for these tasks, by seed (a line torn by an interruption is dropped)."""
    wanted = {spec.seed for spec in specs}
    kept = {}
    for record in read_records(path, repair=True):
        record.pop("_line")
        if record["seed"] in wanted:
            kept[record["seed"]] = record
    return kept
