"""The tiny GRPO run on ``traintest/levels-v0`` that the tests of issue 29's mechanisms share."""

from __future__ import annotations

from typing import Any

from trace_train.grpo.trainer import GRPOArgs


def levels_args(model_dir: Any, out: Any, **overrides: Any) -> GRPOArgs:
    """One step of 2 groups x 4 one-turn rollouts of at most 4 tokens, rank-2 LoRA, no checkpoints or logs;
    ``overrides`` set what a test is about."""
    base: dict[str, Any] = dict(
        env_id="traintest/levels-v0",
        model=str(model_dir),
        out=str(out),
        steps=1,
        groups_per_step=2,
        group_size=4,
        max_new_tokens=4,
        max_turns=1,
        lora_rank=2,
        save_every=1000,
        tensorboard=False,
        progress=False,
        num_threads=1,
    )
    return GRPOArgs(**{**base, **overrides})
