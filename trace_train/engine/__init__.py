"""Rollout engines. ``cached`` (default): per-conversation KV caches across turns and a shared prefix prefilled
once (:mod:`trace_train.engine.cached`); ``simple``: one ``generate`` call per turn over whole conversations
(:meth:`trace_train.policies.hf.HFPolicy.generate_with_logprobs`)."""

from __future__ import annotations

from typing import Any

from trace_train.engine.cached import CachedEngine, EngineStats
from trace_train.engine.sampling import next_tokens, target_logprobs, warp

__all__ = ["CachedEngine", "EngineStats", "engine_for", "next_tokens", "target_logprobs", "warp"]


def engine_for(policy: Any) -> CachedEngine:
    """The policy's cached engine, made once per model (so its shared prefix outlives a rollout)."""
    engine = getattr(policy, "_cached_engine", None)
    if engine is None or engine.model is not policy.model:
        engine = CachedEngine(
            policy.model,
            policy.eos_ids,
            policy.tokenizer.pad_token_id,
            generation_context=getattr(policy, "_generation_context", None),
        )
        policy._cached_engine = engine
    return engine
