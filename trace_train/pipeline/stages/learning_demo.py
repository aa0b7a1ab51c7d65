"""Stage ``learning_demo`` (``pipeline = "learning-demo"``): :func:`trace_train.demo.run_demo` on one env.

SFT warm start, test-split success, seed-grouped GRPO with a test-split curve: the trainer's learning demo
(e.g. on reasoning-gym arithmetic, ``configs/arith.toml``), kept as an example of a one-stage pipeline.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import set_threads


def run(ctx: StageContext) -> dict[str, Any]:
    from trace_train.demo import run_demo

    set_threads(ctx.config.threads)
    args = dataclasses.replace(ctx.config.learning_demo, out=str(ctx.dir))
    summary = run_demo(args)
    before, after = summary["before"], summary["after"]
    return {
        "env_id": args.env_id,
        "before": before,
        "after": after,
        "summary": f"{args.env_id}: test success {before['success_rate']:.3f} -> {after['success_rate']:.3f}",
        "curve": json.loads(json.dumps(summary["curve"], default=str)),
    }
