"""The stages of ``trace run``, in order. Each module has ``run(ctx) -> result``; see docs/pipeline.md."""

from __future__ import annotations

from trace_train.pipeline.runner import Stage
from trace_train.pipeline.stages import (
    adapters,
    analysis,
    base,
    calibration,
    evaluation,
    gates,
    learning_demo,
    report,
    rollouts,
    synthesis,
)

STAGES: tuple[Stage, ...] = (
    Stage("base", base.run, sections=("target", "base"), doc="base agent (+ optional SFT warm start)"),
    Stage(
        "rollouts",
        rollouts.run,
        ("target", "base", "rollouts"),
        ("base",),
        doc="base agent on the train split",
    ),
    Stage(
        "analysis", analysis.run, ("analysis",), ("rollouts",), doc="step 1: which capabilities are missing"
    ),
    Stage(
        "synthesis",
        synthesis.run,
        ("target", "synthesis"),
        ("analysis",),
        doc="step 2: one env per capability",
    ),
    Stage(
        "calibration",
        calibration.run,
        ("base", "calibration"),
        ("base", "synthesis"),
        doc="step 2: difficulty in band",
    ),
    Stage(
        "adapters",
        adapters.run,
        ("base", "adapters"),
        ("base", "calibration"),
        doc="step 3: GRPO adapter per capability",
    ),
    Stage("gates", gates.run, ("base", "gates"), ("base", "adapters"), doc="step 4: token-level gates"),
    Stage(
        "evaluation",
        evaluation.run,
        ("target", "base", "adapters", "evaluation"),
        ("base", "adapters", "gates"),
        doc="test split: base, adapters, router, MoE, direct GRPO",
    ),
    Stage(
        "report",
        report.run,
        ("target", "base", "report"),
        ("base", "rollouts", "analysis", "synthesis", "calibration", "adapters", "gates", "evaluation"),
        doc="report.md + report.html",
    ),
)

LEARNING_DEMO_STAGES: tuple[Stage, ...] = (
    Stage("learning_demo", learning_demo.run, ("learning_demo",), doc="SFT + GRPO + test curve on one env"),
)


def stages_for(pipeline: str) -> tuple[Stage, ...]:
    return LEARNING_DEMO_STAGES if pipeline == "learning-demo" else STAGES
