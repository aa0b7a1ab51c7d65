"""The lean decode step (trace_train/engine/lean_decode.py) against the model's own forward: the same tokens and
log-probs over ragged multi-turn rollouts, the model's forward kept wherever the step would compute something
else (hooks, active LoRA), fused weights made again when a weight changes, and its elementwise kernels against
transformers' Llama modules."""

from __future__ import annotations

import pytest
import torch

from tests.train.positional_model import build_positional_model
from tests.train.test_engine import RaggedEnv
from trace_train.engine import decode_kernel, engine_for
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, collect

F64_TOL = 1e-9  # float64 runs torch's operations in both paths: the same arithmetic
SAMPLED = SamplingConfig(temperature=1.0, max_new_tokens=12)
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=10)


def _rollouts(policy, lean: bool, sampling=SAMPLED, seeds=range(7), generator_seed=3):
    engine = engine_for(policy)
    engine.lean_decode = lean
    session = engine.session(sampling, generator=torch.Generator().manual_seed(generator_seed))
    envs = [RaggedEnv() for _ in seeds]
    trajs = collect(policy, envs, [ResetSpec(seed=s) for s in seeds], sampling, 5, generator=session)
    steps = engine._lean.steps if engine._lean is not None else 0
    return trajs, steps


def _assert_same(a_runs, b_runs, atol):
    for a, b in zip(a_runs, b_runs, strict=True):
        assert a.token_ids == b.token_ids and a.policy_mask == b.policy_mask
        diff = (torch.tensor(a.sampler_logprobs) - torch.tensor(b.sampler_logprobs)).abs().max()
        assert diff <= atol, f"log-probs differ by {diff}"


def _positional(dtype=torch.float64) -> HFPolicy:
    model, tok = build_positional_model(dtype)
    return HFPolicy(model, tok, name="tiny-positional")


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_lean_steps_give_the_models_tokens_and_logprobs(sampling):
    """Float64 position-sensitive model: ragged turns, an early end, rows that finish at different steps, the
    shared prefix."""
    module, module_steps = _rollouts(_positional(), lean=False, sampling=sampling)
    lean, lean_steps = _rollouts(_positional(), lean=True, sampling=sampling)
    assert module_steps == 0 and lean_steps >= 10
    assert len({a for t in lean for a in t.actions}) >= 4  # replies that differ between conversations
    _assert_same(module, lean, atol=F64_TOL)


def test_lean_steps_in_float32_through_the_elementwise_kernels():
    """The position-sensitive model in float32: norms, rotations and SiLU through the lean step's kernels, whose
    sums may differ from torch's in the last bit; a wrong position or rotation changes the replies."""
    module, _ = _rollouts(_positional(torch.float32), lean=False)
    lean, lean_steps = _rollouts(_positional(torch.float32), lean=True)
    assert lean_steps >= 10
    _assert_same(module, lean, atol=2e-5)


def test_lean_steps_in_float32_through_the_decode_kernels():
    """A random model wide enough for the decode linears (fused q/k/v and gate/up) and the attention kernel."""
    runs = []
    for lean in (False, True):
        model, tok = build_tiny_model(seed=1, hidden_size=256, num_layers=2)
        policy = HFPolicy(model, tok, name="tiny-256")
        runs.append(_rollouts(policy, lean=lean, seeds=range(5)))
    (module, _), (lean, lean_steps) = runs
    assert lean_steps >= 10
    _assert_same(module, lean, atol=2e-4)


def test_a_hooked_model_keeps_its_own_forward():
    """A forward hook changes what the model computes: the lean step must step aside (the composed model's gates
    are hooks), and the cached engine still matches the simple engine, which calls the model."""
    policy = _positional()
    mlp = policy.model.model.layers[0].mlp
    handle = mlp.register_forward_hook(lambda module, args, out: out * 0.5)
    try:
        hooked, steps = _rollouts(policy, lean=True, sampling=GREEDY)
        assert steps == 0
        envs = [RaggedEnv() for _ in range(7)]
        simple = collect(policy, envs, [ResetSpec(seed=s) for s in range(7)], GREEDY, 5, engine="simple")
    finally:
        handle.remove()
    plain, _ = _rollouts(_positional(), lean=True, sampling=GREEDY)
    assert [t.token_ids for t in hooked] != [t.token_ids for t in plain]  # the hook does change the replies
    _assert_same(simple, hooked, atol=1e-4)  # the simple engine sums in other orders


def test_weights_changed_in_place_are_fused_again():
    """An optimiser step changes the weights in place; the lean step's fused q/k/v and gate/up copies follow."""
    policy = _positional()
    _rollouts(policy, lean=True)
    torch.manual_seed(0)
    with torch.no_grad():
        for layer in policy.model.model.layers:
            for linear in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.mlp.up_proj):
                linear.weight.add_(torch.randn_like(linear.weight) * 0.05)
    changed = {k: v.clone() for k, v in policy.model.state_dict().items()}
    lean, _ = _rollouts(policy, lean=True)
    fresh = _positional()
    fresh.model.load_state_dict(changed)
    module, _ = _rollouts(fresh, lean=False)
    _assert_same(module, lean, atol=F64_TOL)


def test_lora_merged_for_generation_takes_the_lean_step():
    """GRPO's policy: a PEFT model whose LoRA deltas are merged for generation (HFPolicy.merge_for_generation).
    With the deltas merged the lean step runs from the base layers; unmerged, the LoRA layers keep the model's
    forward; both decode the same model."""
    from peft import LoraConfig, get_peft_model

    runs = []
    for merge in (True, False):
        model, tok = build_positional_model(torch.float64)
        config = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0
        )
        peft_model = get_peft_model(model, config)
        torch.manual_seed(7)
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn_like(p) * 0.2)  # a delta that changes the replies
        policy = HFPolicy(peft_model, tok, name="lora", merge_for_generation=merge)
        runs.append(_rollouts(policy, lean=True))
    (merged, merged_steps), (unmerged, unmerged_steps) = runs
    assert merged_steps >= 10 and unmerged_steps == 0
    plain, _ = _rollouts(_positional(), lean=True)
    assert [t.token_ids for t in merged] != [t.token_ids for t in plain]  # the delta does change the replies
    _assert_same(unmerged, merged, atol=F64_TOL)


KERNEL = pytest.mark.skipif(decode_kernel.load() is None, reason="the CPU kernels do not build here")


@KERNEL
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_elementwise_kernels_match_the_llama_modules(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    ops = decode_kernel.load()
    g = torch.Generator().manual_seed(0)
    rows, hidden, heads, kv_heads, dim, inter = 3, 200, 5, 1, 40, 300  # widths not multiples of a vector
    x = torch.randn(rows, hidden, generator=g).to(dtype) * 3
    norm = LlamaRMSNorm(hidden, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(hidden, generator=g))
        expected = norm(x)
    got = ops.lean_rms_norm(x, norm.weight.detach(), norm.variance_epsilon)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=g).to(dtype)
    cos, sin = torch.randn(rows, dim, generator=g).to(dtype), torch.randn(rows, dim, generator=g).to(dtype)
    q = qkv[:, : heads * dim].view(rows, 1, heads, dim).transpose(1, 2)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].view(rows, 1, kv_heads, dim).transpose(1, 2)
    q_expected, k_expected = apply_rotary_pos_emb(q, k, cos[:, None], sin[:, None])
    rotated = qkv.clone()
    ops.lean_rope_(rotated, heads + kv_heads, dim, cos, sin)
    gate_up = torch.randn(rows, 2 * inter, generator=g).to(dtype) * 4
    gate_up[0, :4] = torch.tensor([-100.0, 100.0, -30.0, 0.0])  # far tails of silu
    act_expected = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    act = ops.lean_silu_mul(gate_up)

    r = rotated
    q_got = r[:, : heads * dim].view(rows, 1, heads, dim).transpose(1, 2)
    k_got = r[:, heads * dim : (heads + kv_heads) * dim].view(rows, 1, kv_heads, dim).transpose(1, 2)
    assert torch.equal(
        r[:, (heads + kv_heads) * dim :], qkv[:, (heads + kv_heads) * dim :]
    )  # values untouched
    if dtype == torch.bfloat16:  # the modules' roundings, bit for bit
        assert (
            torch.equal(got, expected) and torch.equal(q_got, q_expected) and torch.equal(k_got, k_expected)
        )
        torch.testing.assert_close(act, act_expected, atol=1e-30, rtol=0.0079)  # at most one bf16 step apart
    else:  # float32 arithmetic in the norm (as the module), another summation order and exp
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-6)
        torch.testing.assert_close(q_got, q_expected, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(k_got, k_expected, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(act, act_expected, atol=1e-5, rtol=1e-6)


@KERNEL
def test_elementwise_kernels_refuse_mis_shaped_input():
    ops = decode_kernel.load()
    x = torch.randn(2, 64)
    with pytest.raises(RuntimeError, match="weight must be a contiguous vector"):
        ops.lean_rms_norm(x, torch.randn(63), 1e-5)
    with pytest.raises(RuntimeError, match="heads x dim must fit"):
        ops.lean_rope_(x, 3, 32, torch.randn(2, 32), torch.randn(2, 32))
    with pytest.raises(RuntimeError, match="gate and up side by side"):
        ops.lean_silu_mul(torch.randn(2, 63))
