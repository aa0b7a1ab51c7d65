"""The composed model through the cached engine's lean decode step: each layer's gate routes the step's tokens
(its pre-hook, called by the step) and the routed LoRA linears add each token's own adapter's update to the
fused projections; the same tokens and log-probs as the model's own forward."""

from __future__ import annotations

import pytest
import torch

import trace_train.compose.model as compose_model
from tests.compose.helpers import randomise_gates
from tests.train.test_engine import RaggedEnv
from trace_train.engine import engine_for
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, collect

SAMPLED = SamplingConfig(temperature=1.0, max_new_tokens=12)


def _rollouts(composition, lean: bool):
    policy = HFPolicy(composition.model, composition.tokenizer, name="composed")
    engine = engine_for(policy)
    engine.lean_decode = lean
    session = engine.session(SAMPLED, generator=torch.Generator().manual_seed(4))
    envs = [RaggedEnv() for _ in range(6)]
    with composition.recording() as logs:
        trajs = collect(policy, envs, [ResetSpec(seed=s) for s in range(6)], SAMPLED, 4, generator=session)
    slots = {s for layer_logs in logs for step in layer_logs for s in step.argmax(-1).tolist()}
    return trajs, (engine._lean.steps if engine._lean is not None else 0), slots


@pytest.mark.parametrize("per_token_max", [0, 64], ids=["grouped", "per-token"])
def test_composed_decode_through_the_lean_step_equals_the_models_forward(
    composition, monkeypatch, per_token_max
):
    monkeypatch.setattr(
        compose_model, "PER_TOKEN_MAX", per_token_max
    )  # both update paths of the routed linears
    randomise_gates(composition, seed=3)
    module, module_steps, _ = _rollouts(composition, lean=False)
    lean, lean_steps, slots = _rollouts(composition, lean=True)
    assert module_steps == 0 and lean_steps >= 10
    assert len(slots) >= 3  # the gates mix the base and several adapters
    with composition.forced(0):  # the base alone decodes otherwise: the updates matter here
        base, _, _ = _rollouts(composition, lean=True)
    assert [t.sampler_logprobs for t in base] != [t.sampler_logprobs for t in lean]
    for a, b in zip(module, lean, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.sampler_logprobs), torch.tensor(b.sampler_logprobs), atol=2e-5, rtol=0
        )
