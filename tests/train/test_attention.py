"""The packed grouped-query attention computes what transformers' sdpa path computes, and is switched on only
inside ``packed_gqa``."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from trace_train.engine import attention
from trace_train.models import build_tiny_model


class _Module(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _inputs(batch, q_heads, kv_heads, length, total, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (
        torch.randn(batch, length, q_heads, 16, generator=g).to(dtype).transpose(1, 2)
    )  # strided like a model's
    k = torch.randn(batch, kv_heads, total, 16, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, total, 16, generator=g).to(dtype)
    return q, k, v


def _ragged_mask(batch, length, total, seed=0):
    """Causal over the last ``length`` columns, with random holes in the earlier ones (a ragged cache)."""
    g = torch.Generator().manual_seed(seed)
    past = torch.rand(batch, total - length, generator=g) > 0.3
    past[:, 0] = True
    causal = torch.ones(length, length).tril().bool()
    mask = torch.cat([past[:, None, :].expand(batch, length, -1), causal.expand(batch, -1, -1)], dim=2)
    return mask[:, None]


# a mask-free multi-token query goes to sdpa's causal kernel itself
@pytest.mark.parametrize("length,with_mask", [(1, True), (1, False), (5, True)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_packed_equals_sdpa(length, dtype, tol, with_mask):
    module = _Module(groups=3)
    q, k, v = _inputs(2, 6, 2, length, 40, dtype)
    mask = _ragged_mask(2, length, 40) if with_mask else None
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
    got, weights = attention.packed_gqa_attention(module, q, k, v, mask, scaling=0.25)
    assert weights is None
    assert got.shape == want.shape == (2, length, 6, 16)
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def test_additive_mask_and_gradients_fall_back_to_sdpa():
    module = _Module(groups=2)
    q, k, v = _inputs(1, 4, 2, 3, 10, torch.float32)
    additive = torch.zeros(1, 1, 3, 10)
    additive[..., :4] = torch.finfo(torch.float32).min
    want, _ = sdpa_attention_forward(module, q, k, v, additive, scaling=0.25)
    got, _ = attention.packed_gqa_attention(module, q, k, v, additive, scaling=0.25)
    torch.testing.assert_close(got, want)
    q.requires_grad_(True)
    out, _ = attention.packed_gqa_attention(module, q, k, v, additive, scaling=0.25)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_context_switches_a_model_and_restores_it(monkeypatch):
    model, _ = build_tiny_model()
    model.config._attn_implementation = "sdpa"
    calls = []
    real = attention.packed_gqa_attention
    monkeypatch.setitem(
        attention.AttentionInterface._global_mapping,
        attention.NAME,
        lambda *a, **k: calls.append(1) or real(*a, **k),
    )
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=torch.tensor([[0, 1, 1, 1]])).logits
        with attention.packed_gqa(model):
            assert model.config._attn_implementation == attention.NAME
            packed = model(input_ids=ids, attention_mask=torch.tensor([[0, 1, 1, 1]])).logits
    assert model.config._attn_implementation == "sdpa"
    assert calls, "the packed attention was not used inside the block"
    torch.testing.assert_close(packed[0, 1:], plain[0, 1:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length", [1, 4])
@pytest.mark.parametrize("with_mask", [True, False])
def test_shared_prefix_attention_equals_attention_over_the_concatenation(length, with_mask):
    """Rows that hold only their own columns and attend to a prefix kept once give what attention over
    [prefix | own columns] per row gives (decode and prefill; holes in the own columns or the causal default)."""
    module = _Module(groups=3)
    module.layer_idx = 1
    q, k, v = _inputs(3, 6, 2, length, 12, torch.float32, seed=1)
    g = torch.Generator().manual_seed(2)
    prefix = [
        (torch.randn(1, 2, 7, 16, generator=g), torch.randn(1, 2, 7, 16, generator=g)) for _ in range(2)
    ]
    own_mask = _ragged_mask(3, length, 12, seed=3) if with_mask else None
    shared = attention.SharedPrefix(prefix)
    got, _ = attention.packed_gqa_attention(module, q, k, v, own_mask, scaling=0.25, shared_prefix=shared)
    assert shared.layers_used == 1

    pk, pv = prefix[1]
    full_k = torch.cat([pk.expand(3, -1, -1, -1), k], dim=2)
    full_v = torch.cat([pv.expand(3, -1, -1, -1), v], dim=2)
    if own_mask is None:
        own_mask = torch.ones(length, 12).tril(12 - length).bool()[None, None].expand(3, 1, -1, -1)
    full_mask = torch.cat([torch.ones(3, 1, length, 7, dtype=torch.bool), own_mask], dim=3)
    want, _ = sdpa_attention_forward(module, q, full_k, full_v, full_mask, scaling=0.25)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("packed", [False, True])
def test_cascade_attention_equals_one_softmax_over_prefix_and_own_keys(packed):
    # training attention with a shared prefix: two flash calls merged by log-sum-exp, and their backward
    # passes fed the merged output, must give the values and gradients of one softmax over all keys
    g = torch.Generator().manual_seed(0)
    rows, q_heads, kv_heads, length, p_len, dim = 3, 6, 2, 11, 17, 8

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(True)

    q, pk, pv = leaf(rows, q_heads, length, dim), leaf(1, kv_heads, p_len, dim), leaf(1, kv_heads, p_len, dim)
    k, v = leaf(rows, kv_heads, length, dim), leaf(rows, kv_heads, length, dim)
    allowed = torch.ones(length, length, dtype=torch.bool).tril().expand(rows, 1, length, length).clone()
    if packed:  # row 0 holds two sequences (5 + 6 tokens): the second does not see the first
        allowed[0, 0, 5:, :5] = False
    own_mask = None
    if packed:
        own_mask = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    weights = torch.randn(rows, q_heads, length, dim, generator=g, dtype=torch.float64)
    got = attention.CascadeAttention.apply(q, pk, pv, k, v, own_mask, dim**-0.5)
    got_grads = torch.autograd.grad((got * weights).sum(), (q, pk, pv, k, v))

    keys = torch.cat([pk.expand(rows, -1, -1, -1), k], 2).repeat_interleave(q_heads // kv_heads, 1)
    values = torch.cat([pv.expand(rows, -1, -1, -1), v], 2).repeat_interleave(q_heads // kv_heads, 1)
    full = torch.cat([torch.ones(rows, 1, length, p_len, dtype=torch.bool), allowed], 3)
    scores = (q @ keys.transpose(-1, -2)) * dim**-0.5
    ref = scores.masked_fill(~full, float("-inf")).softmax(-1) @ values
    ref_grads = torch.autograd.grad((ref * weights).sum(), (q, pk, pv, k, v))
    torch.testing.assert_close(got, ref)
    for name, a, b in zip(
        ("query", "prefix keys", "prefix values", "keys", "values"), got_grads, ref_grads, strict=True
    ):
        torch.testing.assert_close(a, b, msg=f"gradient of the {name}")


def test_a_prefill_query_that_sees_none_of_its_own_columns_attends_to_the_prefix_alone():
    """Inference prefill over a shared prefix merges two flash calls; a query whose own columns are all masked
    must come out as attention over the prefix alone (finite), as one softmax over [prefix | own] gives."""
    module = _Module(groups=3)
    module.layer_idx = 0
    length, own = 4, 9
    q, k, v = _inputs(2, 6, 2, length, own, torch.float32, seed=5)
    g = torch.Generator().manual_seed(6)
    prefix = [(torch.randn(1, 2, 5, 16, generator=g), torch.randn(1, 2, 5, 16, generator=g))]
    own_mask = _ragged_mask(2, length, own, seed=7).clone()
    own_mask[1, 0, 2] = False  # row 1's third query sees none of its own columns
    got, _ = attention.packed_gqa_attention(
        module, q, k, v, own_mask, scaling=0.25, shared_prefix=attention.SharedPrefix(prefix)
    )
    pk, pv = prefix[0]
    full_k = torch.cat([pk.expand(2, -1, -1, -1), k], dim=2)
    full_v = torch.cat([pv.expand(2, -1, -1, -1), v], dim=2)
    full_mask = torch.cat([torch.ones(2, 1, length, 5, dtype=torch.bool), own_mask], dim=3)
    want, _ = sdpa_attention_forward(module, q, full_k, full_v, full_mask, scaling=0.25)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
