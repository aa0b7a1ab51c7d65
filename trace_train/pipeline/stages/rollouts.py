"""Stage ``rollouts``: the base agent on the target's train split (step 1's input), via ``trace rollout``.

Calls :func:`trace_train.base_rollouts.rollout` (one JSONL line per finished episode); an interrupted stage
resumes with the seeds not yet written (``resume=True``), never writing a seed twice.
"""

from __future__ import annotations

from typing import Any

from trace_gym.seeds import train_seeds
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import set_threads


def run(ctx: StageContext) -> dict[str, Any]:
    from trace_gym.records import TRAJECTORIES, read_records
    from trace_train.base_rollouts import RolloutArgs, rollout
    from trace_train.config import EngineArgs, GenerationSettings, RolloutSettings, settings_of

    cfg, r = ctx.config, ctx.config.rollouts
    set_threads(cfg.threads)
    train_seeds("rollouts", cfg.target.env_id, r.seed_offset, r.episodes)  # refuses test seeds
    args = RolloutArgs(
        **settings_of(r, RolloutSettings),
        **settings_of(cfg.base, EngineArgs),
        **settings_of(cfg.generation, GenerationSettings),  # the local engine or a server ([generation])
        env_id=cfg.target.env_id,
        model=ctx.upstream["base"]["model"],
        out=str(ctx.dir),
        split="train",
        difficulty=cfg.target.difficulty,
        dtype=cfg.base.dtype,
        resume=ctx.resume,
        sampling_seed=cfg.seed if r.temperature > 0 else None,
    )
    with ctx.bar("base agent on the train split", r.episodes) as bar:
        already = len(read_records(ctx.dir / TRAJECTORIES, repair=True)) if ctx.resume else 0
        bar.update(already)
        rollout(args, progress=lambda done, _total: bar.update(already + done))
    records = read_records(ctx.dir / TRAJECTORIES)
    wins = sum(bool(rec["success"]) for rec in records)
    return {
        "file": TRAJECTORIES,
        "episodes": len(records),
        "passed": wins,
        "failed": len(records) - wins,
        "success_rate": wins / len(records),
        "generated_tokens": sum(int(rec.get("generated_tokens", 0)) for rec in records),
        "summary": f"{len(records)} train episodes, {wins} passed",
    }
