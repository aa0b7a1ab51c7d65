"""trace_train: policies, batched rollouts, seed-grouped GRPO (step 3), SFT warm start and evaluation.

The public API is imported lazily so that ``import trace_train`` (e.g. by the ``trace`` CLI) stays cheap::

    from trace_train import GRPOArgs, train, SFTArgs, run_sft, evaluate, HFPolicy, SamplingConfig
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GRPOArgs": "trace_train.config",
    "GRPOTrainer": "trace_train.grpo.trainer",
    "train": "trace_train.grpo.trainer",
    "SFTArgs": "trace_train.config",
    "run_sft": "trace_train.sft",
    "evaluate": "trace_train.evaluate",
    "HFPolicy": "trace_train.policies.hf",
    "LoraSettings": "trace_train.config",
    "SamplingConfig": "trace_train.policies.base",
    "Policy": "trace_train.policies.base",
    "collect": "trace_train.rollout",
    "ResetSpec": "trace_train.rollout",
    "load_model": "trace_train.models",
    "build_tiny_model": "trace_train.models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trace_train' has no attribute {name!r}")
