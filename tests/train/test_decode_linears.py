"""The decode steps' bf16 linears (``trace_train/engine/linears.py``): the same results as ``nn.Linear`` by the
kernel that suits the row count, packed weights that follow in-place updates, and nothing routed outside a
decode block or where gradients are needed."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trace_train.engine import engine_for
from trace_train.engine import linears as decode_linears
from trace_train.engine.linears import NATIVE_MAX_ROWS, DecodeLinears
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy

needs_packing = pytest.mark.skipif(
    not decode_linears.available(), reason="this torch build cannot pack bf16 weights for oneDNN"
)


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(576, 384), nn.SiLU(), nn.Linear(384, 1536, bias=False)).to(torch.bfloat16)


@needs_packing
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 33])
def test_routed_linears_compute_what_nn_linear_does(rows):
    model = _model()
    x = torch.randn(rows, 1, 576, dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        routed = DecodeLinears(model)
        with routed.active() as n:
            got = model(x)
    assert n == 2
    if rows > NATIVE_MAX_ROWS:  # the packed weight: oneDNN's own result, bit for bit
        assert routed.packed_calls == 2 and routed.native_calls == 0
        assert torch.equal(got, want)
    else:  # ATen's kernel sums in another order: bf16 rounding apart
        assert routed.native_calls == 2 and routed.packed_calls == 0
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


@needs_packing
def test_a_packed_weight_follows_an_in_place_update():
    model = _model()
    x = torch.randn(8, 576, dtype=torch.bfloat16)
    routed = DecodeLinears(model)
    with torch.no_grad():
        with routed.active():
            before = model(x)
        model[2].weight.mul_(-1.0)  # as an optimiser step would: same storage, new version
        with routed.active():
            after = model(x)
        want = model(x)
    assert torch.equal(after, want)
    assert not torch.equal(after, before)


@needs_packing
def test_nothing_is_routed_outside_the_block_or_with_gradients():
    model = _model()
    routed = DecodeLinears(model)
    x = torch.randn(4, 576, dtype=torch.bfloat16)
    with routed.active():
        model(x).sum().backward()  # training: the module's own forward, gradients as usual
    assert routed.packed_calls == routed.native_calls == 0
    assert model[0].weight.grad is not None
    assert all("forward" not in m.__dict__ for m in model.modules())
    with pytest.raises(RuntimeError, match="boom"), routed.active():
        raise RuntimeError("boom")
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_small_other_dtype_and_disabled_linears_are_left_alone():
    assert DecodeLinears(_model().double()).eligible() == []
    assert DecodeLinears(_model(), enabled=False).eligible() == []
    assert DecodeLinears(_model().float(), enabled=False).eligible() == []
    tiny = nn.Linear(16, 16).to(torch.bfloat16)  # a LoRA factor's size
    assert DecodeLinears(tiny, enabled=True).eligible() == []


@needs_packing
def test_the_engine_routes_its_decode_steps_and_decodes_as_before(monkeypatch):
    """bf16 greedy decoding of a tiny model with routed and unrouted linears: the routed run uses both kernels
    (one row, then a batch) and picks the same tokens."""
    monkeypatch.setattr(decode_linears, "MIN_WEIGHT_ELEMENTS", 1)  # the tiny model's weights are small
    model, tok = build_tiny_model(hidden_size=64)
    policy = HFPolicy(model.to(torch.bfloat16), tok)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, min_new_tokens=12)
    prompts = [[5, 6, 7, 8, 9, 10 + r, 11] for r in range(4)]

    def decode(enabled: bool, batch: list[list[int]]):
        engine = engine_for(policy)
        engine.clear()
        engine.linears = DecodeLinears(policy.model, enabled=enabled)
        out, _ = engine.session(sampling)(batch, list(range(len(batch))), 0)
        return out, engine.linears

    for batch in (prompts[:1], prompts):
        plain, _ = decode(False, batch)
        routed, used = decode(True, batch)
        assert routed == plain
        assert (used.native_calls if len(batch) <= NATIVE_MAX_ROWS else used.packed_calls) > 0


@needs_packing
def test_a_block_inside_a_block_routes_nothing_twice_and_the_outer_one_restores():
    model = _model()
    routed = DecodeLinears(model)
    with routed.active() as outer:
        with routed.active() as inner:
            pass
        assert all(
            "forward" in m.__dict__ for m in (model[0], model[2])
        )  # still routed until the outer exits
    assert (outer, inner) == (2, 0)
    assert all("forward" not in m.__dict__ for m in model.modules())


needs_float32_packing = pytest.mark.skipif(
    not decode_linears.available(torch.float32),
    reason="this torch build cannot pack float32 weights for oneDNN",
)


@needs_float32_packing
@pytest.mark.parametrize("rows", [1, 2, 8, 16, 17])
def test_float32_routes_two_to_sixteen_rows_to_the_packed_weight(rows, monkeypatch):
    """float32 (dtype auto on an AVX2 CPU) without the small-linear kernel: 2-16 rows on the packed oneDNN
    weight, float32 rounding apart from nn.Linear (another summation order); one row and more than 16 keep
    nn.Linear's own forward, bit for bit."""
    monkeypatch.setattr(decode_linears.decode_kernel, "load", lambda: None)
    model = _model().float()
    x = torch.randn(rows, 1, 576)
    with torch.no_grad():
        want = model(x)
        routed = DecodeLinears(model)
        with routed.active() as n:
            got = model(x)
    assert n == 2 and routed.small_calls == 0
    if 2 <= rows <= 16:
        assert routed.packed_calls == 2
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert routed.packed_calls == 0 and torch.equal(got, want)


needs_small_linear = pytest.mark.skipif(
    decode_linears.decode_kernel.load() is None, reason="the decode kernels do not build here"
)


@needs_float32_packing
@needs_small_linear
@pytest.mark.parametrize("rows", [1, 3, 5, 8, 16, 17])
@pytest.mark.parametrize("bias", [True, False])
def test_float32_routes_one_to_sixteen_rows_to_the_small_linear_kernel(rows, bias):
    """float32 with the kernel: 1-16 rows through ``small_linear`` (tiles of 4 rows and their remainders, output
    widths that leave a partial panel and a partial panel block), float32 rounding apart from nn.Linear; more
    than 16 rows keep nn.Linear's own forward, bit for bit."""
    torch.manual_seed(rows)
    model = nn.Sequential(nn.Linear(576, 389, bias=bias), nn.SiLU(), nn.Linear(389, 1541, bias=bias)).float()
    x = torch.randn(rows, 1, 576)
    with torch.no_grad():
        want = model(x)
        routed = DecodeLinears(model)
        with routed.active():
            got = model(x)
    if rows <= 16:
        assert routed.small_calls == 2 and routed.packed_calls == 0
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert routed.small_calls == 0 and torch.equal(got, want)


@needs_small_linear
def test_small_linear_refuses_a_weight_packed_for_another_shape():
    kernel = decode_linears.decode_kernel.load()
    packed = kernel.pack_small_linear(torch.randn(40, 24))
    with pytest.raises(RuntimeError, match="packed weight of another shape"):
        kernel.small_linear(torch.randn(2, 25), packed, 40)
    with pytest.raises(RuntimeError, match="packed weight of another shape"):
        kernel.small_linear(torch.randn(2, 24), packed, 80)
    with pytest.raises(RuntimeError, match="contiguous 2-D float32"):
        kernel.small_linear(torch.randn(2, 24).double(), packed, 40)


@needs_float32_packing
def test_a_packed_float32_weight_follows_an_in_place_update():
    model = _model().float()
    x = torch.randn(8, 576)
    routed = DecodeLinears(model)
    with torch.no_grad():
        with routed.active():
            before = model(x)
        model[2].weight.mul_(-1.0)
        with routed.active():
            after = model(x)
        want = model(x)
    torch.testing.assert_close(after, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after, before)
