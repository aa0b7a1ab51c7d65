"""Faster bf16 and float32 linears for decode steps on CPU: the kernel that suits the step's few rows.

A decode step multiplies one token per conversation by every weight of the model, so its matmuls have 1-32 rows
and must read each weight once from memory. torch's default CPU path for bf16 (oneDNN with the weight in its
plain layout, reordered on every call) reads weights at 8-13 GB/s at that size on a 2-core AVX-512-bf16 EPYC,
where the machine reads 24-29 GB/s. Measured per 576 -> 1,536 SmolLM2 linear, weights not in cache
(``docs/roofline.md``; the whole step: ``benchmarks/roofline_stages.py --sides linears``):

- at 1-2 rows, ATen's own kernel (oneDNN switched off for the call) reads near the bandwidth: 74-105 us against
  132-142 us, but it is slower from 3 rows on (and 10x slower for the attention's batched matmuls, so oneDNN
  stays on for everything else);
- from 3 rows, oneDNN with the weight reordered once into its own blocked layout
  (``torch.ops.mkldnn._reorder_linear_weight``, the prepacking inductor's freezing uses) gives the same result bit
  for bit at 90-110 us instead of 150-175 us (8 rows), 194 us instead of 272 us (32 rows).

Float32 (what ``dtype = auto`` runs on a CPU without native bf16) takes this project's own kernel from 1 to 16
rows where the decode kernels build (``csrc/small_linear.cpp``: the weight packed once in panels of one vector
of outputs, k-major, a register tile of 4 rows x 3 panels on AVX2 summed over the whole input with the rows'
inputs broadcast, so every weight is streamed once a call). The same 210 linears, weights not in cache, 2-core
AVX2 EPYC, medians of 7 (``F.linear`` / oneDNN packed / this kernel): 1 row 33.0 / 27.7 / **14.3 ms**, 2 rows
47.9 / 23.4 / **11.9**, 4 rows 51.6 / 25.8 / **13.2**, 8 rows 59.9 / 31.6 / **22.3**, 16 rows 78.3 / 49.6 /
**37.3** (2 rows: 423 MB at 35 GB/s). Without the kernel (no compiler, ``TRACE_DECODE_KERNEL=0``) float32 takes
the packed oneDNN weight from 2 to 16 rows: one decoder's seven linears x 30 layers (423 MB, weights not in
cache) on a 2-core AVX2 EPYC took 24.6-46.3 ms packed against 38.0-67.5 ms with ``F.linear`` (8 rows: 34.7
against 57.5 ms); at 1 row ``F.linear`` was faster (21.6 against 27.6 ms) and at 32 rows they tied. Unlike bf16, the packed float32 result is not bit for bit
``F.linear``'s: it sums in another order (differences of ~1e-4 on outputs of ~25, float32 rounding).

:class:`DecodeLinears` applies this to a model's ``nn.Linear`` modules for the duration of a ``with`` block (the
cached engine's decode steps). The packed copies are kept between blocks and made again when a weight changes in
place (its ``_version``: an optimiser step), so they cost one copy of the weights in memory. Only bf16 and float32
weights on CPU under ``torch.no_grad`` are routed; anything else (training, other dtypes or devices, a build
without oneDNN) runs the module's own forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from trace_train.engine import decode_kernel

# bf16: at most this many rows go to ATen's native kernel; more go to the packed oneDNN weight (crossover: 3)
NATIVE_MAX_ROWS = 2
# float32: the small-linear kernel from 1 to 16 rows; without it the packed oneDNN weight from 2 to 16; 1 row
# (without the kernel) and more than 16 keep F.linear (see above)
FLOAT32_SMALL_ROWS = (1, 16)
FLOAT32_PACKED_ROWS = (2, 16)
MIN_WEIGHT_ELEMENTS = 1 << 16  # smaller weights (LoRA factors, a router) are not worth routing


def available(dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether this torch build can pack ``dtype`` (bf16 or float32) weights for oneDNN on this CPU."""
    mkldnn = getattr(torch.ops, "mkldnn", None)
    packs = (
        torch.backends.mkldnn.is_available()
        and hasattr(torch._C, "_set_mkldnn_enabled")
        and mkldnn is not None
        and hasattr(mkldnn, "_reorder_linear_weight")
        and hasattr(mkldnn, "_linear_pointwise")
    )
    if dtype == torch.float32:
        return packs
    return packs and bool(getattr(mkldnn, "_is_mkldnn_bf16_supported", lambda: False)())


class DecodeLinears:
    """Routes a model's bf16 and float32 ``nn.Linear`` forwards by row count inside :meth:`active` (see the module
    docstring). ``enabled`` None or True: each dtype this build can pack; False: nothing."""

    def __init__(self, model: nn.Module, enabled: bool | None = None):
        self.model = model
        routable = (torch.bfloat16, torch.float32) if enabled is not False else ()
        self.dtypes = {d for d in routable if available(d)}
        self.enabled = bool(self.dtypes)
        # key (a module's id, or a caller's name) -> (ptr, version, layout, packed); layout "small" (the
        # kernel's panels) or "onednn"
        self._packed: dict[object, tuple[int, int, str, torch.Tensor]] = {}
        self.native_calls = 0
        self.packed_calls = 0
        self.small_calls = 0

    def eligible(self) -> list[nn.Linear]:
        if not self.enabled:
            return []
        return [
            m
            for m in self.model.modules()
            if isinstance(m, nn.Linear)
            and m.weight.dtype in self.dtypes
            and m.weight.device.type == "cpu"
            and m.weight.numel() >= MIN_WEIGHT_ELEMENTS
            and "forward" not in m.__dict__  # already wrapped (e.g. an accelerate hook): left alone
        ]

    @contextmanager
    def active(self) -> Iterator[int]:
        """Route the eligible linears inside the block; yields how many were routed."""
        modules = self.eligible()  # a module already routed (a block inside a block) is not eligible again
        routed = [(m, self._forward_of(m)) for m in modules]
        for m, forward in routed:
            m.forward = forward  # an instance attribute shadows nn.Linear.forward
        try:
            yield len(modules)
        finally:
            for m, forward in routed:
                if m.__dict__.get("forward") is forward:  # only what this block set
                    del m.forward

    def _forward_of(self, module: nn.Linear):
        # self.linear itself falls back to F.linear (gradients, another dtype or device)
        def forward(x: torch.Tensor) -> torch.Tensor:
            return self.linear(x, module.weight, module.bias, id(module))

        return forward

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, key: object
    ) -> torch.Tensor:
        """``F.linear(x, weight, bias)`` through the kernel that suits ``x``'s rows (no gradients); the packed
        copies of ``weight`` are kept under ``key`` (a module's id, or any name the caller keeps apart) and made
        again when the weight is another tensor or was changed in place."""
        if (
            not self.enabled
            or torch.is_grad_enabled()
            or x.dtype != weight.dtype
            or x.dtype not in self.dtypes
            or x.device.type != "cpu"
            or weight.numel() < MIN_WEIGHT_ELEMENTS
        ):
            return F.linear(x, weight, bias)
        rows = x.numel() // x.shape[-1]
        out_features = weight.shape[0]
        if x.dtype == torch.float32:
            kernel = decode_kernel.load() if FLOAT32_SMALL_ROWS[0] <= rows <= FLOAT32_SMALL_ROWS[1] else None
            if kernel is not None:
                self.small_calls += 1
                flat = x.reshape(rows, x.shape[-1]).contiguous()
                out = kernel.small_linear(flat, self._pack(key, weight, "small"), out_features, bias)
                return out.view(*x.shape[:-1], out_features)
            if not FLOAT32_PACKED_ROWS[0] <= rows <= FLOAT32_PACKED_ROWS[1]:
                return F.linear(x, weight, bias)
        elif rows <= NATIVE_MAX_ROWS:
            self.native_calls += 1
            return _native_linear(x, weight, bias)
        self.packed_calls += 1
        return torch.ops.mkldnn._linear_pointwise(x, self._pack(key, weight, "onednn"), bias, "none", [], "")

    def forget(self, key: object) -> None:
        """Drop the packed copies kept under ``key`` (its weight was replaced)."""
        self._packed.pop(key, None)

    def _pack(self, key: object, w: torch.Tensor, layout: str) -> torch.Tensor:
        made = (w.data_ptr(), w._version, layout)
        kept = self._packed.get(key)
        if kept is None or kept[:3] != made:
            if layout == "small":
                packed = decode_kernel.load().pack_small_linear(w.detach().contiguous())
            else:
                packed = torch.ops.mkldnn._reorder_linear_weight(w.detach())
            kept = (*made, packed)
            self._packed[key] = kept
        return kept[3]


def _native_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` with oneDNN switched off for this one call (ATen's own bf16 kernel)."""
    was = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return F.linear(x, weight, bias)
    finally:
        torch._C._set_mkldnn_enabled(was)
