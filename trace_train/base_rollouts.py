"""``trace rollout``: base-agent trajectories on a target's train split, one JSONL line per finished episode.

Agents (``--model``, any spec of :func:`trace_train.policy_factory.make_policy`):

* a local transformers model or an alias such as ``smollm2-135m``: the trainer's batched engine, continuously
  batched (``--batch-size`` episodes at once, one generate call per turn);
* a model behind an OpenAI-compatible server (``--base-url``, key from ``$OPENAI_API_KEY``): up to
  ``--batch-size`` episodes in flight, requests of one turn sent concurrently;
* scripted agents, for checking the analysis itself: ``oracle`` and ``oracle-without:CAPABILITY``
  (:mod:`trace_train.policies.scripted`).

Every episode goes through the one episode runner (:mod:`trace_train.episodes`) and is written as a record of
:mod:`trace_gym.records` the moment it ends (flushed and fsynced), so a killed run keeps every finished episode
(a line cut by the kill is dropped on resume). ``--resume`` reads the file, checks that it was made by the same
env, model, split and settings, and runs only the seeds not yet in it: no seed is ever written twice.

Analysis never sees the test split: ``--split test`` is refused, and so is a file holding test-split lines
(:mod:`trace_gym.seeds`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_gym.records import TRAJECTORIES, RecordWriter, read_records
from trace_gym.registration import make_env, use_target_difficulty
from trace_gym.seeds import SplitRefusedError, refuse_test_records, refuse_test_split, reset_seed
from trace_train.config import TARGET_DIFFICULTY_HELP, EngineArgs, GenerationSettings, RolloutSettings, knob

# settings that must match between a run and its --resume (anything else may change, e.g. the batch size)
RESUME_KEYS = (
    "env_id",
    "split",
    "model",
    "adapter",
    "difficulty",
    "target_difficulty",
    "max_turns",
    "sampling",
    "seed_offset",
)

__all__ = ["TRAJECTORIES", "RolloutArgs", "RolloutError", "RolloutSummary", "SplitRefusedError", "rollout"]


class RolloutError(ValueError):
    """Bad arguments or a file that cannot be continued; the message says which and why."""


@dataclass
class RolloutArgs(RolloutSettings, EngineArgs, GenerationSettings):
    """Arguments of ``trace rollout`` (flags of the same names): :class:`RolloutSettings` plus the run's own."""

    env_id: str
    model: str
    out: str
    split: str = knob("train", "only train is accepted: analysis never sees test tasks")
    difficulty: int | None = knob(None, "the env's difficulty level (default: the id's)")
    target_difficulty: int | None = knob(None, TARGET_DIFFICULTY_HELP, minimum=1)
    base_url: str | None = knob(None, "OpenAI-compatible server (key from $OPENAI_API_KEY)")
    adapter: str | None = knob(None, "PEFT adapter dir (local) or served LoRA name (--base-url)")
    dtype: str = knob("float32", "weights dtype of a local model")
    resume: bool = knob(False, "continue the file in --out (same settings)")
    sampling_seed: int | None = knob(None, "per-request seed (HTTP servers)")

    def __post_init__(self) -> None:
        RolloutSettings.__post_init__(self)
        EngineArgs.__post_init__(self)
        GenerationSettings.__post_init__(self)

    def sampling(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.sampling_seed,
        }


@dataclass
class RolloutSummary:
    path: str
    written: int
    skipped: int  # seeds already in the file (resume)
    passed: int
    seconds: float


def run_header(args: RolloutArgs) -> dict[str, Any]:
    return {
        "env_id": args.env_id,
        "split": args.split,
        "model": args.model,
        "adapter": args.adapter,
        "difficulty": args.difficulty,
        "target_difficulty": args.target_difficulty,
        "max_turns": args.max_turns,
        "sampling": args.sampling(),
        "seed_offset": args.seed_offset,
    }


def _check_resumable(existing: list[dict[str, Any]], header: dict[str, Any], path: Path) -> None:
    refuse_test_records(str(path), existing)
    for record in existing:
        run = record.get("run") or {}
        diff = [k for k in RESUME_KEYS if run.get(k) != header[k]]
        if diff:
            changes = ", ".join(f"{k}: file {run.get(k)!r} vs now {header[k]!r}" for k in diff)
            raise RolloutError(
                f"--resume: {path} was written with other settings ({changes}); resume with the same "
                "settings or write to another --out"
            )


def rollout(args: RolloutArgs, progress: Callable[[int, int], None] | None = None) -> RolloutSummary:
    """Run ``args.episodes`` episodes (minus those already in the file with ``resume``); see the module doc."""
    from trace_train.ceiling import check_caps, fill_caps
    from trace_train.episodes import run_episodes
    from trace_train.policies.base import SamplingConfig
    from trace_train.policies.scripted import ScriptedAgent
    from trace_train.policy_factory import policy_from_args
    from trace_train.rollout import ResetSpec

    refuse_test_split(args.split)
    if args.episodes < 1:
        raise RolloutError(f"--episodes must be >= 1, got {args.episodes}")
    if (args.max_turns is not None and args.max_turns < 1) or args.batch_size < 1:
        raise RolloutError("--max-turns and --batch-size must be >= 1")
    out = Path(args.out)
    path = out / TRAJECTORIES  # OUT is made once the run is checked: a refused run leaves no empty folder
    header = run_header(args)
    existing = read_records(path, repair=args.resume)
    if existing and not args.resume:
        raise RolloutError(
            f"{path} already holds {len(existing)} trajectories; pass --resume to continue it, "
            "or choose another --out"
        )
    _check_resumable(existing, header, path)
    done = {int(r["seed"]) for r in existing}

    use_target_difficulty(args.env_id, args.target_difficulty)
    probe = make_env(args.env_id)
    try:
        seeds = [reset_seed(args.split, args.seed_offset + i, probe) for i in range(args.episodes)]
        todo = [s for s in seeds if s not in done]
        policy = None
        if todo:
            try:
                policy = policy_from_args(args)
                if isinstance(policy, ScriptedAgent):
                    policy.check(probe)
                # caps left out are fitted to the env's oracle; the header keeps what was asked (resume
                # compares that), the records and rollout.json also say what ran
                args = fill_caps(args, getattr(policy, "renderer", None), args.env_id, args.difficulty)
                header = {
                    **header,
                    "caps": {"max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens},
                }
                # failures under caps that cut the oracle itself would read as missing capabilities in step 1
                check_caps(
                    policy,
                    args.env_id,
                    difficulty=args.difficulty,
                    max_new_tokens=args.max_new_tokens,
                    max_turns=args.max_turns,
                    minimum=args.min_oracle_ceiling,
                    where=f"rolling out on {args.env_id}",
                    first_task=args.seed_offset,
                )
            except ValueError as err:
                raise RolloutError(str(err)) from err
    finally:
        probe.close()
    out.mkdir(parents=True, exist_ok=True)
    summary = RolloutSummary(str(path), 0, len(seeds) - len(todo), 0, 0.0)
    start = time.perf_counter()
    if todo:
        sampling = SamplingConfig(
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.sampling_seed,
        )
        # group: the task's index in the whole run, so a resumed run writes the records an uninterrupted one does
        specs = [
            ResetSpec(seed=s, group=i, split=args.split, difficulty=args.difficulty)
            for i, s in enumerate(seeds)
            if s not in done
        ]

        with RecordWriter(path) as writer:

            def write(record: dict[str, Any]) -> None:
                writer.write(record)
                summary.written += 1
                summary.passed += int(record["success"])
                if progress:
                    progress(summary.written, len(todo))

            run_episodes(
                policy,
                args.env_id,
                specs,
                sampling,
                max_turns=args.max_turns,
                batch_size=args.batch_size,
                max_total_tokens=args.max_total_tokens,
                env_turn_limit=True,
                on_record=write,
                fields={"model": args.model, "difficulty": args.difficulty, "run": header},
            )
    if policy is not None:
        from trace_train.policy_factory import release

        release(policy)  # a hot-loaded adapter leaves the server
    summary.seconds = time.perf_counter() - start
    (out / "rollout.json").write_text(json.dumps({**header, "episodes": args.episodes}, indent=2) + "\n")
    return summary
