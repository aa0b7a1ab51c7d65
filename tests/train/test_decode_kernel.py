"""The decode-attention kernel (trace_train/engine/decode_kernel.py): it equals exact attention, the attention
functions take it at decode steps and give what the matmul path gives, the engine's greedy tokens do not change,
and a kernel that cannot be built leaves the matmul path in place."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from trace_train.engine import CachedEngine, attention, decode_kernel
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig

# skipped only where nothing can compile it; with a compiler a failed build fails every test here
pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler to build the kernel"
)


@pytest.fixture(autouse=True)
def _built():
    assert decode_kernel.load() is not None, f"the kernel did not build: {decode_kernel.error}"


def _case(rows, kv_heads, groups, dim, prefix, own, dtype, seed=0, holes=0.3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, kv_heads, groups, dim, generator=g).to(dtype)
    pk = torch.randn(kv_heads, prefix, dim, generator=g).to(dtype)
    pv = torch.randn(kv_heads, prefix, dim, generator=g).to(dtype)
    # a cache buffer wider than what is used: the kernel reads a strided view of it
    k = torch.randn(rows, kv_heads, own + 9, dim, generator=g).to(dtype)[:, :, :own]
    v = torch.randn(rows, kv_heads, own + 9, dim, generator=g).to(dtype)[:, :, :own]
    mask = torch.rand(rows, own, generator=g) >= holes
    return q, pk, pv, k, v, mask


def _exact(q, pk, pv, k, v, mask, scale):
    rows, prefix = q.shape[0], pk.shape[1]
    keys = torch.cat([pk.double().expand(rows, -1, -1, -1), k.double()], dim=2)
    values = torch.cat([pv.double().expand(rows, -1, -1, -1), v.double()], dim=2)
    allowed = torch.cat([torch.ones(rows, prefix, dtype=torch.bool), mask], dim=1)[:, None, None]
    scores = torch.einsum("bhgd,bhtd->bhgt", q.double(), keys) * scale
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("bhgt,bhtd->bhgd", probs, values)


SHAPES = [  # rows, K/V heads, query heads per K/V head, head dim, prefix, own columns
    (5, 3, 3, 64, 300, 200),  # SmolLM2's heads: the compile-time kernel
    (2, 2, 2, 16, 0, 77),  # no prefix (a decode step without a shared prefix)
    (1, 3, 3, 64, 1000, 5),  # one row: its columns split across threads
    (3, 1, 5, 32, 40, 300),  # a head shape only the run-time kernel takes
    # the prefix read once for all rows (run_prefix): several prefix splits, a partial last block, an odd
    # number of queries (rows x groups), a head dim of 32
    (8, 3, 3, 64, 2100, 40),
    (3, 1, 5, 32, 700, 10),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("splits", [1, 3])
def test_kernel_equals_exact_attention(dtype, shape, splits):
    q, pk, pv, k, v, mask = _case(*shape, dtype)
    scale = shape[3] ** -0.5
    out = decode_kernel.load().decode_attention(q, pk, pv, k, v, mask, scale, splits)
    assert out.dtype == dtype and out.shape == q.shape
    # float32 throughout the kernel: one rounding to bf16 at the end
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.double(), _exact(q, pk, pv, k, v, mask, scale), atol=tol, rtol=0)


def test_a_row_with_no_allowed_column_gets_zeros_and_others_are_unaffected():
    q, pk, pv, k, v, mask = _case(3, 2, 2, 16, 0, 50, torch.float32, holes=0.0)
    mask[1] = False
    out = decode_kernel.load().decode_attention(q, pk, pv, k, v, mask, 0.25, 2)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    keep = torch.tensor([0, 2])
    torch.testing.assert_close(
        out[keep].double(), _exact(q[keep], pk, pv, k[keep], v[keep], mask[keep], 0.25), atol=2e-6, rtol=0
    )


def test_bad_input_is_refused_with_its_reason():
    q, pk, pv, k, v, mask = _case(2, 2, 2, 16, 4, 10, torch.float32)
    module = decode_kernel.load()
    with pytest.raises(RuntimeError, match="mask shape"):
        module.decode_attention(q, pk, pv, k, v, mask[:, :5].contiguous(), 0.25, 1)
    with pytest.raises(RuntimeError, match="one dtype"):
        module.decode_attention(q, pk, pv, k.double(), v, mask, 0.25, 1)


class _Layer(torch.nn.Module):
    layer_idx = 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("prefix", [0, 23])
def test_attention_functions_take_the_kernel_at_decode_and_agree_with_the_matmul_path(dtype, prefix):
    rows, kv_heads, groups, dim, own = 4, 2, 3, 16, 40
    q, pk, pv, k, v, mask = _case(rows, kv_heads, groups, dim, prefix, own, dtype, seed=4)
    query = q.reshape(rows, kv_heads * groups, 1, dim)
    shared = attention.SharedPrefix([(pk[None], pv[None])]) if prefix else None
    mask_4d = mask[:, None, None, :]

    def run(kernel: bool) -> torch.Tensor:
        attention.use_decode_kernel = kernel
        try:
            before = decode_kernel.calls
            out, _ = attention.packed_gqa_attention(
                _Layer(), query, k, v, mask_4d, scaling=dim**-0.5, shared_prefix=shared
            )
            assert (decode_kernel.calls > before) == kernel
            return out
        finally:
            attention.use_decode_kernel = True

    with_kernel, with_matmuls = run(True), run(False)
    assert with_kernel.shape == with_matmuls.shape == (rows, 1, kv_heads * groups, dim)
    want = _exact(q, pk, pv, k, v, mask, dim**-0.5).reshape(rows, 1, kv_heads * groups, dim)
    # the matmul path rounds scores and probabilities to bf16, the kernel does not: the kernel is the closer
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(with_kernel.double(), want, atol=tol, rtol=0)
    torch.testing.assert_close(with_matmuls.double(), want, atol=tol * 4, rtol=0)


def test_the_engine_decodes_the_same_tokens_with_the_kernel():
    """Greedy decoding through the cached engine over a shared prefix, float32, kernel on and off: the same tokens,
    log-probs within float32 noise, and the kernel was used."""
    model, tok = build_tiny_model(seed=5, hidden_size=64)  # head dim 16: a shape the kernel takes
    engine = CachedEngine(model, {tok.eos_token_id}, tok.pad_token_id)
    prefix = tok.encode("You are a careful agent. " * 12)
    prompts = [prefix + tok.encode(f"task {i}: " + "go " * i) for i in range(5)]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=12)

    def generate(kernel: bool):
        attention.use_decode_kernel = kernel
        engine.clear()
        try:
            before = decode_kernel.calls
            session = engine.session(greedy)
            tokens, logprobs = session(prompts, list(range(len(prompts))), 0)
            return tokens, logprobs, decode_kernel.calls - before, session.cache.prefix
        finally:
            attention.use_decode_kernel = True

    (tokens_on, lps_on, used, shared), (tokens_off, lps_off, unused, _) = generate(True), generate(False)
    assert shared is not None and shared.length >= len(prefix) - 1 and used > 0 and unused == 0
    assert tokens_on == tokens_off
    for a, b in zip(lps_on, lps_off, strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)


needs_prefill = pytest.mark.skipif(
    decode_kernel.load() is None or not decode_kernel.load().prefill_available(),
    reason="the bf16 prefill kernel needs AVX-512 bf16 (this CPU keeps torch's flash attention)",
)


def _prefill_exact(q, k, v, allowed, scale):
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1).nan_to_num(0.0) @ v.double(), torch.logsumexp(scores, -1)


@needs_prefill
@pytest.mark.parametrize(
    "rows, heads, queries, keys, lines, masked",
    [(1, 3, 90, 300, 30, False), (2, 3, 37, 45, 37, True), (4, 2, 24, 600, 8, True), (3, 1, 6, 1, 6, True)],
)
def test_prefill_kernel_equals_exact_attention(rows, heads, queries, keys, lines, masked):
    """Every query of every (row, head) against packed keys, the mask line m % L of its row, a strided cache view
    as keys; a query with no allowed key gets zeros and a log-sum-exp of -inf."""
    g = torch.Generator().manual_seed(rows * 7 + keys)
    q = torch.randn(rows * heads, queries, 64, generator=g).bfloat16()
    k = torch.randn(rows, heads, keys + 5, 64, generator=g).bfloat16()[:, :, :keys]
    v = torch.randn(rows, heads, keys + 5, 64, generator=g).bfloat16()[:, :, :keys]
    mask = torch.rand(rows, lines, keys, generator=g) > 0.3 if masked else None
    if masked:
        mask[0, 0] = False
    kp, vp = decode_kernel.pack(k, v)
    out, lse = decode_kernel.prefill(q, kp, vp, keys, heads, mask, lines, 0.125)
    line = torch.arange(queries) % lines
    if mask is None:
        allowed = torch.ones(rows * heads, queries, keys, dtype=torch.bool)
    else:
        allowed = mask.repeat_interleave(heads, 0)[:, line]
    want, want_lse = _prefill_exact(q, k.reshape(-1, keys, 64), v.reshape(-1, keys, 64), allowed, 0.125)
    # scores in float32 from bf16 products, probabilities rounded to bf16 for the values, output rounded once
    torch.testing.assert_close(out.double(), want, atol=8e-3, rtol=0)
    assert torch.equal(lse == float("-inf"), want_lse == float("-inf"))
    finite = want_lse > float("-inf")
    torch.testing.assert_close(lse.double()[finite], want_lse[finite], atol=1e-4, rtol=0)
    if masked:
        assert torch.equal(out[0, 0], torch.zeros(64, dtype=torch.bfloat16))


@needs_prefill
def test_prefill_kernel_refuses_packed_keys_of_another_shape():
    q = torch.randn(3, 4, 64).bfloat16()
    k = torch.randn(1, 3, 40, 64).bfloat16()
    kp, vp = decode_kernel.pack(k, k)
    with pytest.raises(RuntimeError, match="packed keys/values do not match"):
        decode_kernel.prefill(q, kp, vp, 80, 3, None, 1, 0.125)
    with pytest.raises(RuntimeError, match="mask shape"):
        decode_kernel.prefill(q, kp, vp, 40, 3, torch.ones(1, 2, 39, dtype=torch.bool), 2, 0.125)


@needs_prefill
@pytest.mark.parametrize("with_mask", [True, False])
def test_prefill_over_a_shared_prefix_takes_the_kernel_and_agrees_with_flash(with_mask):
    """The inference prefill of _with_prefix (bf16, head dim 64): the kernel's prefix and own parts merged give
    what the two flash calls give, as close to exact attention, and the prefix is packed once per layer."""
    rows, kv_heads, groups, length, own, prefix_len = 3, 2, 3, 7, 20, 50
    g = torch.Generator().manual_seed(11)
    query = torch.randn(rows, kv_heads * groups, length, 64, generator=g).bfloat16()
    k = torch.randn(rows, kv_heads, own + 4, 64, generator=g).bfloat16()[:, :, :own]
    v = torch.randn(rows, kv_heads, own + 4, 64, generator=g).bfloat16()[:, :, :own]
    pk = torch.randn(1, kv_heads, prefix_len, 64, generator=g).bfloat16()
    pv = torch.randn(1, kv_heads, prefix_len, 64, generator=g).bfloat16()
    causal = torch.ones(length, own, dtype=torch.bool).tril(own - length)
    own_mask = None
    if with_mask:
        own_mask = causal[None, None].expand(rows, 1, -1, -1) & (
            torch.rand(rows, 1, 1, own, generator=g) > 0.3
        )
    layer = _Layer()

    def run(kernel: bool) -> torch.Tensor:
        attention.use_decode_kernel = kernel
        shared = attention.SharedPrefix([(pk, pv)])
        try:
            before = decode_kernel.calls
            out, _ = attention.packed_gqa_attention(
                layer, query, k, v, own_mask, scaling=0.125, shared_prefix=shared
            )
            assert (decode_kernel.calls - before == 2) == kernel
            assert (shared._packed[0] is not None) == kernel
            return out
        finally:
            attention.use_decode_kernel = True

    with_kernel, with_flash = run(True), run(False)
    allowed = causal[None, None].expand(rows, 1, -1, -1) if own_mask is None else own_mask
    full = torch.cat([torch.ones(rows, 1, length, prefix_len, dtype=torch.bool), allowed], 3)
    keys = torch.cat([pk.expand(rows, -1, -1, -1), k], 2).repeat_interleave(groups, 1)
    values = torch.cat([pv.expand(rows, -1, -1, -1), v], 2).repeat_interleave(groups, 1)
    want, _ = _prefill_exact(query, keys, values, full, 0.125)
    want = want.transpose(1, 2)
    torch.testing.assert_close(with_kernel.double(), want, atol=1e-2, rtol=0)
    torch.testing.assert_close(with_flash.double(), want, atol=1e-2, rtol=0)


@needs_prefill
@pytest.mark.parametrize("mask_kind", ["causal", "bool", "additive"])
def test_a_prefill_without_shared_prefix_takes_the_kernel_and_agrees_with_sdpa(mask_kind):
    """packed_gqa_attention at length > 1 with no shared prefix (a fresh causal prefill, or a masked one over a
    cache with holes): the kernel's output equals exact attention as closely as sdpa's does."""
    rows, kv_heads, groups, length, columns = 2, 3, 3, 9, 9 if mask_kind == "causal" else 30
    g = torch.Generator().manual_seed(3)
    query = torch.randn(rows, kv_heads * groups, length, 64, generator=g).bfloat16()
    k = torch.randn(rows, kv_heads, columns, 64, generator=g).bfloat16()
    v = torch.randn(rows, kv_heads, columns, 64, generator=g).bfloat16()
    allowed = (
        torch.ones(length, columns, dtype=torch.bool).tril(columns - length)[None, None].repeat(rows, 1, 1, 1)
    )
    if mask_kind != "causal":
        allowed &= torch.rand(rows, 1, 1, columns, generator=g) > 0.3
        allowed[..., columns - length :] |= torch.eye(length, dtype=torch.bool)  # each query sees itself
    mask = {"causal": None, "bool": allowed}.get(mask_kind)
    if mask_kind == "additive":
        mask = torch.zeros(allowed.shape, dtype=torch.bfloat16).masked_fill(
            ~allowed, torch.finfo(torch.bfloat16).min
        )
    layer = _Layer()
    layer.num_key_value_groups = groups  # sdpa's path repeats K/V by it
    layer.is_causal = True

    def run(kernel: bool) -> torch.Tensor:
        attention.use_decode_kernel = kernel
        try:
            before = decode_kernel.calls
            out, _ = attention.packed_gqa_attention(layer, query, k, v, mask, scaling=0.125)
            assert (decode_kernel.calls > before) == kernel
            return out
        finally:
            attention.use_decode_kernel = True

    keys, values = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    want, _ = _prefill_exact(query, keys, values, allowed, 0.125)
    want = want.transpose(1, 2)
    with_kernel, with_sdpa = run(True), run(False)
    torch.testing.assert_close(with_kernel.double(), want, atol=1e-2, rtol=0)
    torch.testing.assert_close(with_sdpa.double(), want, atol=1e-2, rtol=0)


@needs_prefill
def test_a_fresh_causal_prefill_with_gradients_takes_both_kernels_and_agrees_with_sdpa(monkeypatch):
    """Training's fresh causal forward (a batch's shared prefix) through packed_gqa_attention with gradients:
    the prefill kernel forward and the attention-backward kernel, against sdpa on the same bf16 inputs, both
    against float64 autograd."""
    rows, kv_heads, groups, length = 2, 3, 3, 75
    g = torch.Generator().manual_seed(4)
    base = [
        torch.randn(rows, kv_heads * groups, length, 64, generator=g),
        torch.randn(rows, kv_heads, length, 64, generator=g),
        torch.randn(rows, kv_heads, length, 64, generator=g),
    ]
    weights = torch.randn(rows, length, kv_heads * groups, 64, generator=g)
    exact = [t.double().requires_grad_(True) for t in base]
    keys, values = (t.repeat_interleave(groups, 1) for t in exact[1:])
    want, _ = _prefill_exact(
        exact[0], keys, values, torch.ones(length, length, dtype=torch.bool).tril(), 0.125
    )
    want_grads = torch.autograd.grad((want.transpose(1, 2) * weights.double()).sum(), exact)
    layer = _Layer()
    layer.num_key_value_groups = groups
    layer.is_causal = True

    def run(kernel: bool):
        monkeypatch.setattr(attention, "use_decode_kernel", kernel)
        leaves = [t.bfloat16().requires_grad_(True) for t in base]
        before = decode_kernel.calls
        out, _ = attention.packed_gqa_attention(layer, *leaves, None, scaling=0.125)
        grads = torch.autograd.grad((out.float() * weights).sum(), leaves)
        assert (decode_kernel.calls - before) == (2 if kernel else 0)  # forward and backward
        return [(out.double() - want.transpose(1, 2)).abs().max().item()] + [
            ((a.double() - b).abs().max() / b.abs().max()).item()
            for a, b in zip(grads, want_grads, strict=True)
        ]

    for name, mine, theirs in zip(("output", "query", "key", "value"), run(True), run(False), strict=True):
        assert mine <= 2 * theirs + 0.01, f"{name}: kernel error {mine:.4f}, sdpa's {theirs:.4f}"


@needs_prefill
@pytest.mark.parametrize(
    "items, heads, queries, keys, lines, masked",
    [
        (3, 3, 37, 70, 37, False),  # no mask, ragged tiles and blocks
        (6, 3, 3 * 21, 21, 21, True),  # folded query heads over causal own columns, one mask per row
        (2, 1, 50, 50, 50, True),  # one mask line per query, holes
        (2, 2, 9, 40, 9, True),  # a query with no allowed key gets zero gradients
    ],
)
def test_attention_backward_equals_float64_autograd(items, heads, queries, keys, lines, masked):
    g = torch.Generator().manual_seed(queries + keys)
    q = torch.randn(items, queries, 64, generator=g).bfloat16()
    k = torch.randn(items, keys + 5, 64, generator=g).bfloat16()[:, :keys]  # a strided view, as a cache slice
    v = torch.randn(items, keys, 64, generator=g).bfloat16()
    dout = torch.randn(items, queries, 64, generator=g).bfloat16()
    mask = None
    if masked:
        mask = torch.rand(items // heads, lines, keys, generator=g) > 0.3
        if lines == keys:
            mask &= torch.ones(lines, keys, dtype=torch.bool).tril()
        mask[0, 0] = False  # row 0's first line sees nothing
    allowed = torch.ones(items, queries, keys, dtype=torch.bool)
    if mask is not None:
        allowed = mask.repeat_interleave(heads, 0)[:, torch.arange(queries) % lines]
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    scores = (leaves[0] @ leaves[1].transpose(-1, -2)) * 0.125
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    out = (scores - lse[..., None]).exp().nan_to_num(0.0) @ leaves[2]
    want = torch.autograd.grad((out * dout.double()).sum(), leaves)
    delta = (dout.double() * out.detach()).sum(-1).float()
    got = decode_kernel.attention_backward(
        q, k, v, dout, lse.detach().float(), delta, heads, mask, lines, 0.125
    )
    for name, a, b in zip(("query", "key", "value"), got, want, strict=True):
        assert a.dtype == torch.float32 and a.shape == b.shape
        err = ((a.double() - b).abs().max() / b.abs().max()).item()
        assert err < 0.02, f"gradient of the {name}: relative error {err:.4f}"
    if masked:
        empty = [i for i in range(heads) if not allowed[i, 0].any()]
        assert empty and all(got[0][i, 0].abs().max() == 0 for i in empty)


@needs_prefill
@pytest.mark.parametrize("packed", [False, True])
def test_training_attention_takes_the_kernels_and_its_gradients_stay_exact(packed, monkeypatch):
    """CascadeAttention (training over a shared prefix) in bf16 through the prefill kernel forward and the
    attention-backward kernel. Values and all five gradients must match one float64 softmax over
    [prefix | own] as closely as torch's own bf16 flash path does."""
    g = torch.Generator().manual_seed(3)
    rows, q_heads, kv_heads, length, p_len, dim = 3, 9, 3, 70, 150, 64
    q = torch.randn(rows, q_heads, length, dim, generator=g)
    pk, pv = (
        torch.randn(1, kv_heads, p_len, dim, generator=g),
        torch.randn(1, kv_heads, p_len, dim, generator=g),
    )
    k, v = (
        torch.randn(rows, kv_heads, length, dim, generator=g),
        torch.randn(rows, kv_heads, length, dim, generator=g),
    )
    weights = torch.randn(rows, q_heads, length, dim, generator=g)
    allowed = torch.ones(length, length, dtype=torch.bool).tril().expand(rows, 1, length, length).clone()
    if packed:  # row 0 holds two sequences (30 + 40 tokens): the second does not see the first
        allowed[0, 0, 30:, :30] = False
    inputs = [t.double().requires_grad_(True) for t in (q, pk, pv, k, v)]
    keys = torch.cat([inputs[1].expand(rows, -1, -1, -1), inputs[3]], 2).repeat_interleave(3, 1)
    values = torch.cat([inputs[2].expand(rows, -1, -1, -1), inputs[4]], 2).repeat_interleave(3, 1)
    full = torch.cat([torch.ones(rows, 1, length, p_len, dtype=torch.bool), allowed], 3)
    scores = (inputs[0] @ keys.transpose(-1, -2)) * dim**-0.5
    ref = scores.masked_fill(~full, float("-inf")).softmax(-1) @ values
    ref_grads = torch.autograd.grad((ref * weights.double()).sum(), inputs)

    def run(kernel: bool):
        monkeypatch.setattr(attention, "use_decode_kernel", kernel)
        leaves = [t.to(torch.bfloat16).requires_grad_(True) for t in (q, pk, pv, k, v)]
        own_mask = None
        if packed:
            own_mask = torch.zeros(allowed.shape, dtype=torch.bfloat16)
            own_mask = own_mask.masked_fill(~allowed, torch.finfo(torch.bfloat16).min)
        before = decode_kernel.calls
        out = attention.CascadeAttention.apply(*leaves, own_mask, dim**-0.5)
        grads = torch.autograd.grad((out.float() * weights).sum(), leaves)
        assert all(grad.dtype == torch.bfloat16 for grad in grads)
        return out, grads, decode_kernel.calls - before

    def errors(out, grads):
        return [(out.double() - ref).abs().max().item()] + [
            ((a.double() - b).abs().max() / b.abs().max()).item()
            for a, b in zip(grads, ref_grads, strict=True)
        ]

    out, grads, calls = run(kernel=True)
    assert calls == 4  # forward and backward, each the prefix part and the own part
    torch_out, torch_grads, torch_calls = run(kernel=False)
    assert torch_calls == 0
    names = ("output", "query", "prefix keys", "prefix values", "keys", "values")
    for name, mine, theirs in zip(names, errors(out, grads), errors(torch_out, torch_grads), strict=True):
        assert mine <= 2 * theirs + 0.01, f"{name}: kernel error {mine:.4f}, torch's bf16 path {theirs:.4f}"


@needs_prefill
def test_the_prefill_switch_turns_off_the_prefill_kernel_alone(monkeypatch):
    query, key = (
        torch.zeros(1, 3, 5, 64, dtype=torch.bfloat16),
        torch.zeros(1, 1, 5, 64, dtype=torch.bfloat16),
    )
    assert decode_kernel.supports_prefill(query, key)
    monkeypatch.setenv(decode_kernel.PREFILL_SWITCH, "0")
    assert not decode_kernel.supports_prefill(query, key)
    assert decode_kernel.supports(query[:, :, :1], key)


@needs_prefill
def test_an_amx_cpu_keeps_torchs_flash_attention_for_prefill(monkeypatch):
    query, key = (
        torch.zeros(1, 3, 5, 64, dtype=torch.bfloat16),
        torch.zeros(1, 1, 5, 64, dtype=torch.bfloat16),
    )
    flags = decode_kernel._cpu_flags()
    monkeypatch.setattr(decode_kernel, "_cpu_flags", lambda: flags + " amx_bf16 amx_tile")
    assert not decode_kernel.supports_prefill(query, key)


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv(decode_kernel.ENV_SWITCH, "0")
    q, pk, pv, k, v, mask = _case(2, 2, 2, 16, 0, 10, torch.float32)
    assert decode_kernel.load() is None
    assert not decode_kernel.supports(q.reshape(2, 4, 1, 16), k)


def test_a_finished_build_is_imported_without_building_again(monkeypatch, tmp_path):
    """What a later process does: it imports the published module and never touches the compiler, so a lock file
    that a killed build left behind, or another checkout's build, cannot make it wait or rebuild."""
    built = decode_kernel.build_directory()
    monkeypatch.setenv("TRACE_EXTENSIONS_DIR", str(tmp_path))
    published = decode_kernel.build_directory()
    shutil.copytree(built, published)
    (published / "lock").touch()

    def no_build(*args):
        raise AssertionError("built again")

    monkeypatch.setattr(decode_kernel, "_build", no_build)
    monkeypatch.setattr(decode_kernel, "_tried", False)
    monkeypatch.setattr(decode_kernel, "_module", None)
    module = decode_kernel.load()
    assert module is not None and decode_kernel.error is None
    q, pk, pv, k, v, mask = _case(2, 2, 2, 16, 3, 10, torch.float32)
    torch.testing.assert_close(
        module.decode_attention(q, pk, pv, k, v, mask, 0.25, 1).double(),
        _exact(q, pk, pv, k, v, mask, 0.25),
        atol=2e-6,
        rtol=0,
    )


@pytest.mark.slow
def test_a_kernel_that_does_not_build_leaves_the_matmul_path(monkeypatch, tmp_path, capsys):
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(decode_kernel, "SOURCE", broken)
    monkeypatch.setattr(decode_kernel, "_tried", False)
    monkeypatch.setattr(decode_kernel, "_module", None)
    monkeypatch.setenv("TRACE_EXTENSIONS_DIR", str(tmp_path / "ext"))
    assert decode_kernel.load() is None
    assert decode_kernel.error
    assert (
        "CPU kernels (decode and prefill attention, routed LoRA) unavailable, using torch"
        in capsys.readouterr().err
    )
    assert list((tmp_path / "ext").iterdir()) == []  # the failed build's private directory is gone
    q, pk, pv, k, v, mask = _case(2, 2, 2, 16, 0, 10, torch.float32)
    assert not decode_kernel.supports(q.reshape(2, 4, 1, 16), k)


@pytest.mark.parametrize("rank", [4, 6])  # the kernel takes A four rows at a time: 6 leaves a remainder of 2
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_routed_lora_update_adds_each_tokens_own_adapter_only(dtype, rank):
    """out[t] += B_s A_s x[t] * scaling for the token's slot s (none for the base slot 0), against float64; 300
    outputs are four whole chunks of 64 and a partial one."""
    tokens, width_in, width_out, adapters = 7, 40, 300, 3
    g = torch.Generator().manual_seed(9)
    x = torch.randn(tokens, width_in, generator=g).to(dtype)
    a = [torch.randn(rank, width_in, generator=g).to(dtype) for _ in range(adapters)]
    b = [torch.randn(width_out, rank, generator=g).to(dtype) for _ in range(adapters)]
    scaling = [0.5, 2.0, 1.0]
    stacked_a = torch.cat(a)
    stacked_bt = (
        torch.cat([(bk.double() * s).to(dtype) for bk, s in zip(b, scaling, strict=True)], 1).t().contiguous()
    )
    slots = torch.tensor([0, 1, 2, 3, 1, 0, 3])
    base = torch.randn(tokens, width_out + 5, generator=g).to(dtype)[
        :, :width_out
    ]  # a strided view of a buffer
    out = base.clone()
    decode_kernel.routed_lora_update(x, stacked_a, stacked_bt, slots, out, rank)
    want = base.double().clone()
    for t, s in enumerate(slots.tolist()):
        if s:
            want[t] += (b[s - 1].double() * scaling[s - 1]) @ (a[s - 1].double() @ x[t].double())
    tol = 1e-4 if dtype == torch.float32 else 0.0
    if dtype == torch.bfloat16:  # one rounding of the exact sum
        torch.testing.assert_close(out, want.to(dtype), atol=want.abs().max().item() * 2**-8, rtol=0)
    else:
        torch.testing.assert_close(out.double(), want, atol=tol, rtol=0)
    assert torch.equal(out[0], base[0]) and torch.equal(out[5], base[5])  # base-slot tokens untouched
    with pytest.raises(RuntimeError, match="slot 4 is past the 3 adapters"):
        decode_kernel.routed_lora_update(x, stacked_a, stacked_bt, torch.full((tokens,), 4), out, rank)
