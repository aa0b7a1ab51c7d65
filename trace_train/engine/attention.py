"""Grouped-query attention for cached inference on CPU without copying the cache per query head.

Models with fewer key/value heads than query heads (SmolLM2: 9 query heads over 3 K/V heads) reach
``scaled_dot_product_attention`` in transformers' ``sdpa`` path either with ``enable_gqa=True`` (when no mask is
needed: a decode step over a hole-free cache) or after ``repeat_kv`` (a masked prefill over a cache), which copies
every layer's cache three times per call. On this CPU the first costs 8.3 ms per layer for one bf16 decode step of
8 rows over 1,600 cached tokens; folding the query heads of each K/V head into the query length
(``[B, Hq, L, D] -> [B, Hkv, G*L, D]``) and broadcasting the mask the same way costs 1.2 ms and computes the same
thing (``benchmarks/bench_engine.py``, figure 5).

:func:`packed_gqa` registers this as the attention implementation ``"trace_packed_gqa"`` (transformers'
``AttentionInterface``, with sdpa's mask builder) and switches a model to it for the duration of a ``with`` block.
Training (anything that needs gradients), dropout and the mask-free causal prefill keep transformers' sdpa path.

**Shared prefix** (cascade attention): when every row of a batch starts with the same prefix (the system prompt
and tool schemas, ~2,700 SmolLM2 tokens on retail), the cache keeps that prefix's K/V once, ``[1, Hkv, P, D]`` per
layer, instead of a copy per row, and the model is called with ``shared_prefix=SharedPrefix(...)``, which
transformers passes down to the attention function. A decode step then reads the prefix once for all rows (one
matmul of every row's queries against it) and each row's own columns separately, and takes one softmax over both
(eager attention's numerics: scores in the model's dtype, softmax in float32). A prefill over the prefix
concatenates it per call. The attention function counts the layers that used the prefix, so a model that drops
the keyword is caught (:meth:`SharedPrefix.check`) instead of silently attending to half its context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from trace_train.engine import decode_kernel

NAME = "trace_packed_gqa"
use_decode_kernel = True  # decode steps through decode_kernel where it builds (False: the matmul path)


def packed_gqa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    shared_prefix: SharedPrefix | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """An ``AttentionInterface`` function: ``query`` ``[B, Hq, L, D]``, ``key``/``value`` ``[B, Hkv, T, D]``,
    ``attention_mask`` None or ``[B|1, 1, L, T]`` (bool or additive). Returns ``[B, L, Hq, D]``.
    With ``shared_prefix``, ``key``/``value``/``attention_mask`` cover only the columns after it."""
    if shared_prefix is not None:
        return _with_prefix(module, query, key, value, attention_mask, scaling, shared_prefix)
    batch, q_heads, length, dim = query.shape
    kv_heads = key.shape[1]
    groups = q_heads // kv_heads
    mask_per_head = attention_mask is not None and attention_mask.shape[1] != 1
    scale = dim**-0.5 if scaling is None else scaling
    fresh_causal = attention_mask is None and length == key.shape[2]  # what a mask-free prefill means here
    if (
        length > 1
        and use_decode_kernel
        and fresh_causal
        and not dropout
        and kwargs.get("position_bias") is None
        and _needs_grad(query, key, value)
        and decode_kernel.supports_prefill(query.detach(), key.detach())
    ):  # training's fresh causal forward (a batch's shared prefix): both passes through the bf16 kernels
        return CausalKernelAttention.apply(query, key, value, scale).transpose(1, 2).contiguous(), None
    if (
        length > 1
        and use_decode_kernel
        and not dropout
        and not mask_per_head
        and kwargs.get("position_bias") is None
        and (attention_mask is not None or fresh_causal)
        and decode_kernel.supports_prefill(query, key)
    ):
        return _kernel_prefill_own(query, key, value, attention_mask, scale), None
    if (
        groups == 1
        or dropout
        or mask_per_head
        or kwargs.get("position_bias") is not None
        or (attention_mask is None and length > 1)  # sdpa's causal kernel, which needs no mask
        or (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad))
    ):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    if length == 1 and use_decode_kernel and decode_kernel.supports(query, key):  # a decode step: one pass
        if attention_mask is None:
            allowed = torch.ones((1, key.shape[2]), dtype=torch.bool)
        else:
            allowed = _allowed(attention_mask).reshape(attention_mask.shape[0], key.shape[2])
        no_prefix = query.new_empty((kv_heads, 0, dim))
        q = query.reshape(batch, kv_heads, groups, dim)
        out = decode_kernel.decode_attention(q, no_prefix, no_prefix, key, value, allowed, scale)
        return out.reshape(batch, 1, q_heads, dim), None
    # query head h = k * groups + g reads K/V head k: fold g into the query length of head k
    q = query.reshape(batch, kv_heads, groups * length, dim)
    mask = attention_mask
    if mask is not None:
        rows = mask.shape[0]
        mask = mask[:, :, None].expand(rows, 1, groups, length, mask.shape[-1])
        mask = mask.reshape(rows, 1, groups * length, mask.shape[-1])
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, scale=scaling)
    out = out.view(batch, kv_heads, groups, length, dim).reshape(batch, q_heads, length, dim)
    return out.transpose(1, 2).contiguous(), None


class SharedPrefix:
    """The K/V of a prefix that every row of the batch starts with: ``kv[layer] = (keys, values)``, each
    ``[1, Hkv, P, D]``. Passed to the model as the ``shared_prefix`` keyword."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]]):
        self.kv = kv
        self.length = kv[0][0].shape[2] if kv else 0
        self.layers_used = 0
        self._keys_t: list[torch.Tensor | None] = [None] * len(kv)
        self._packed: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(kv)

    def keys_t(self, layer: int) -> torch.Tensor:
        """K transposed once per layer, ``[Hkv, D, P]`` contiguous: a decode step multiplies every row's
        queries against it (made on first use: training forwards never need it)."""
        if self._keys_t[layer] is None:
            self._keys_t[layer] = self.kv[layer][0][0].transpose(-1, -2).contiguous()
        return self._keys_t[layer]

    def packed(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's keys and values packed for the prefill kernel (``decode_kernel.pack``), made on first use."""
        if self._packed[layer] is None:
            self._packed[layer] = decode_kernel.pack(*self.kv[layer])
        return self._packed[layer]

    def check(self) -> None:
        """Raise unless every layer of the forward just run attended to the prefix (then reset the count)."""
        used, self.layers_used = self.layers_used, 0
        if used != len(self.kv):
            raise RuntimeError(
                f"the model attended to the shared prefix in {used} of {len(self.kv)} layers: it does not pass "
                "the shared_prefix keyword to its attention (use a transformers model with sdpa attention, or "
                "a cache without a shared prefix)"
            )


def _with_prefix(module, query, key, value, attention_mask, scaling, prefix: SharedPrefix):
    prefix_k, prefix_v = prefix.kv[module.layer_idx]
    prefix.layers_used += 1
    batch, q_heads, length, dim = query.shape
    kv_heads, p_len, own = key.shape[1], prefix_k.shape[2], key.shape[2]
    groups = q_heads // kv_heads
    scaling = dim**-0.5 if scaling is None else scaling
    own_mask = attention_mask
    if own_mask is None:  # transformers skips the mask when it is plain causal over the own columns
        q_pos = torch.arange(own - length, own, device=query.device)
        own_mask = (torch.arange(own, device=query.device)[None, :] <= q_pos[:, None])[None, None]
    own_mask = _allowed(own_mask)
    if length > 1 and query.device.type == "cpu" and _needs_grad(query, key, value, prefix_k, prefix_v):
        # training: the prefix is never copied per row (see CascadeAttention)
        causal = own_mask.shape[-2:] == (own, own) and bool((own_mask == _causal(own, own_mask.device)).all())
        additive = None
        if not causal:
            additive = torch.zeros(own_mask.shape, dtype=query.dtype, device=query.device)
            additive = additive.masked_fill(~own_mask, torch.finfo(query.dtype).min)
        out = CascadeAttention.apply(query, prefix_k, prefix_v, key, value, additive, scaling)
        return out.transpose(1, 2).contiguous(), None
    if length > 1 and use_decode_kernel and decode_kernel.supports_prefill(query, key):  # bf16 dot products
        return _kernel_prefill(query, prefix, module.layer_idx, key, value, own_mask, scaling), None
    if length > 1 and query.device.type == "cpu":  # prefill: two flash calls, as in training (no copies)
        return _cascade_prefill(query, prefix_k, prefix_v, key, value, own_mask, scaling), None
    if length > 1:  # elsewhere: the prefix concatenated per row, then one packed attention
        full_k = torch.cat([prefix_k.expand(batch, -1, -1, -1), key], dim=2)
        full_v = torch.cat([prefix_v.expand(batch, -1, -1, -1), value], dim=2)
        rows = own_mask.shape[0]
        seen = torch.ones((rows, 1, length, p_len), dtype=torch.bool, device=query.device)
        mask = torch.cat([seen, own_mask.expand(rows, 1, length, own)], dim=3)
        return packed_gqa_attention(module, query, full_k, full_v, mask, scaling=scaling)
    kernel = use_decode_kernel and decode_kernel.worth_it(batch, p_len, own)
    if kernel and decode_kernel.supports(query, key):  # decode: one pass over every key and value
        mask_2d = own_mask.reshape(own_mask.shape[0], own)
        q = query.reshape(batch, kv_heads, groups, dim)
        out = decode_kernel.decode_attention(q, prefix_k[0], prefix_v[0], key, value, mask_2d, scaling)
        return out.reshape(batch, 1, q_heads, dim), None
    # decode by matmuls: every row's queries against the prefix in one matmul, then against its own columns. The scores of
    # both go into one float32 buffer [Hkv, B*G, P + own] (eager attention's numerics: scores in the model's
    # dtype, softmax in float32), laid out so that the prefix part is the prefix matmul's own layout: no
    # concatenation of strided parts, and the probabilities multiply V without a copy (same values bit for bit;
    # per layer at 32 rows over a 3,350-token prefix: 1.14x faster in bf16, 2.5x in float32)
    q = query.reshape(batch, kv_heads, groups, dim)
    q_all = q.transpose(0, 1).reshape(kv_heads, batch * groups, dim)
    scores = torch.empty((kv_heads, batch * groups, p_len + own), dtype=torch.float32, device=query.device)
    scores[:, :, :p_len] = torch.matmul(q_all, prefix.keys_t(module.layer_idx))
    # K @ q^T rather than q @ K^T: the cache's columns are a strided view, and a transposed strided operand makes
    # the batched matmul copy it (3x slower here)
    s_own = torch.matmul(key, q.transpose(-1, -2))  # [B, Hkv, own, G]
    own_scores = scores[:, :, p_len:].view(kv_heads, batch, groups, own)
    own_scores.copy_(s_own.permute(1, 0, 3, 2))
    scores.mul_(scaling)
    own_scores.masked_fill_(~own_mask.reshape(1, own_mask.shape[0], 1, own), torch.finfo(torch.float32).min)
    probs = scores.softmax(-1).to(value.dtype)
    out = torch.matmul(probs[:, :, :p_len], prefix_v[0]).view(kv_heads, batch, groups, dim).transpose(0, 1)
    p_own = (
        probs[:, :, p_len:]
        .view(kv_heads, batch, groups, own)
        .transpose(0, 1)
        .reshape(batch * kv_heads, groups, own)
    )
    out = out + torch.bmm(p_own, value.reshape(batch * kv_heads, own, dim)).view(batch, kv_heads, groups, dim)
    return out.reshape(batch, q_heads, 1, dim).transpose(1, 2).contiguous(), None


def _cascade_prefill(query, prefix_k, prefix_v, key, value, own_mask, scale) -> torch.Tensor:
    """Inference prefill over a shared prefix: :class:`CascadeAttention`'s forward with a general own mask.

    The prefix part reads the prefix once for every row and query head (no per-row copy of it, as concatenating
    ``[prefix | own]`` per call did); the own part folds each K/V head's query heads into the query length and
    takes the row's mask (holes, earlier turns); the two are merged by their log-sum-exps. A query whose own
    columns are all masked (a padding position) gets the prefix part alone, finite. Returns ``[B, L, Hq, D]``."""
    rows, q_heads, length, dim = query.shape
    kv_heads, own = prefix_k.shape[1], key.shape[2]
    groups = q_heads // kv_heads
    fold, unfold = _folding(rows, kv_heads, groups, length)
    out_p, lse_p = _flash(fold(query), prefix_k, prefix_v, scale=scale)
    mask_rows = own_mask.shape[0]
    allowed = own_mask.expand(mask_rows, 1, length, own)[:, :, None].expand(mask_rows, 1, groups, length, own)
    additive = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device)
    additive = additive.masked_fill(~allowed, torch.finfo(query.dtype).min).reshape(
        mask_rows, 1, groups * length, own
    )
    q_own = query.reshape(rows, kv_heads, groups * length, dim)
    out_o, lse_o = _flash(q_own, key, value, attn_mask=additive, scale=scale)
    out_o, lse_o = out_o.reshape(rows, q_heads, length, dim), lse_o.reshape(rows, q_heads, length)
    out, _ = _merge(unfold(out_p), unfold(lse_p), out_o, lse_o)
    return out.transpose(1, 2).contiguous()


def _kernel_prefill(query, prefix: SharedPrefix, layer: int, key, value, own_mask, scale) -> torch.Tensor:
    """:func:`_cascade_prefill` through the decode kernel module's bf16 prefill kernel, the prefix packed once per
    session and layer (:func:`_kernel_cascade`). Returns ``[B, L, Hq, D]``."""
    allowed = own_mask.reshape(own_mask.shape[0], query.shape[2], key.shape[2])
    out, _ = _kernel_cascade(query, prefix.packed(layer), prefix.length, key, value, allowed, scale)
    return out.transpose(1, 2).contiguous()


def _kernel_cascade(query, packed_prefix, prefix_len: int, key, value, allowed, scale):
    """Attention over a shared prefix (packed by ``decode_kernel.pack``, ``prefix_len`` keys) and each row's own
    columns (``allowed`` bool ``[B|1, L, own]``) through the bf16 prefill kernel: the prefix part with every K/V
    head's query heads of all rows folded into one long query, the own part over each row's columns packed per
    call, merged by their log-sum-exps. Returns the output ``[B, Hq, L, D]`` and the log-sum-exp ``[B, Hq, L]``."""
    rows, q_heads, length, dim = query.shape
    kv_heads, own = key.shape[1], key.shape[2]
    groups = q_heads // kv_heads
    fold, unfold = _folding(rows, kv_heads, groups, length)
    kp, vp = packed_prefix
    out_p, lse_p = decode_kernel.prefill(fold(query)[0], kp, vp, prefix_len, kv_heads, None, 1, scale)
    own_kp, own_vp = decode_kernel.pack(key, value)
    q_own = query.reshape(rows * kv_heads, groups * length, dim)
    out_o, lse_o = decode_kernel.prefill(q_own, own_kp, own_vp, own, kv_heads, allowed, length, scale)
    return _merge(
        unfold(out_p[None]),
        unfold(lse_p[None]),
        out_o.reshape(rows, q_heads, length, dim),
        lse_o.reshape(rows, q_heads, length),
    )


def _kernel_prefill_own(query, key, value, attention_mask, scale) -> torch.Tensor:
    """A prefill without a shared prefix through the bf16 prefill kernel: ``attention_mask`` ``[B|1, 1, L, T]``
    (bool or additive) or None for causal over ``T == L`` columns. Returns ``[B, L, Hq, D]``."""
    rows, q_heads, length, dim = query.shape
    kv_heads, columns = key.shape[1], key.shape[2]
    allowed = _causal(length, query.device)[None] if attention_mask is None else _allowed(attention_mask)
    allowed = allowed.reshape(allowed.shape[0], length, columns)
    kp, vp = decode_kernel.pack(key, value)
    q = query.reshape(rows * kv_heads, (q_heads // kv_heads) * length, dim)
    out, _ = decode_kernel.prefill(q, kp, vp, columns, kv_heads, allowed, length, scale)
    return out.reshape(rows, q_heads, length, dim).transpose(1, 2).contiguous()


def _allowed(mask: torch.Tensor) -> torch.Tensor:
    """A bool mask as it is; an additive one as bool (True where the position may be attended to)."""
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2


def _merge(out_p, lse_p, out_o, lse_o) -> tuple[torch.Tensor, torch.Tensor]:
    """Two attention outputs over disjoint key sets, ``[..., D]`` with their log-sum-exps ``[...]``, as one
    softmax over both key sets would give: the output and the merged log-sum-exp."""
    lse = torch.logaddexp(lse_p, lse_o)
    weight_p = (lse_p - lse).exp().unsqueeze(-1).to(out_p.dtype)
    weight_o = (lse_o - lse).exp().unsqueeze(-1).to(out_o.dtype)
    return out_p * weight_p + out_o * weight_o, lse


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _causal(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones((n, n), dtype=torch.bool, device=device).tril()


_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class CascadeAttention(torch.autograd.Function):
    """Attention of ``query`` ``[R, Hq, L, D]`` over a shared prefix ``prefix_k``/``prefix_v`` ``[1, Hkv, P, D]``
    followed by each row's own ``key``/``value`` ``[R, Hkv, L, D]``, with gradients, in two flash-attention
    calls (torch's CPU kernels) merged by their log-sum-exps.

    The prefix part is one call with no mask and no copy: every row's query heads of a K/V head are folded into
    one long query (``[1, Hkv, R*G*L, D]``), so the prefix is read once, not once per row and query head as after
    ``expand`` + ``repeat_kv``. The own part is causal (the kernel skips the upper triangle) or takes
    ``own_mask`` (additive ``[R, 1, L, L]``: packed rows). Together they do the least attention work an exact
    computation needs, ``L*P + L*L/2`` score pairs per row instead of ``L*(P+L)``. Backward runs each part's
    flash backward with the *merged* output and log-sum-exp, which gives exactly the gradients of one softmax
    over all the keys (the same identity ring attention uses); tested against the concatenated computation.
    """

    @staticmethod
    def forward(ctx, query, prefix_k, prefix_v, key, value, own_mask, scale):  # type: ignore[override]
        rows, q_heads, length, dim = query.shape
        kv_heads = prefix_k.shape[1]
        groups = q_heads // kv_heads
        fold, unfold = _folding(rows, kv_heads, groups, length)
        # the path is chosen once: the kernels' backward needs their forward's log-sum-exp, and neither repeats K/V
        ctx.kernel = use_decode_kernel and decode_kernel.supports_prefill(query, key)
        ctx.own_mask, ctx.scale, ctx.groups = own_mask, scale, groups
        if ctx.kernel:
            # bf16 dot products (torch's flash attention computes bf16 at the float32 rate on a CPU without AMX)
            causal = _causal(length, query.device)[None]
            ctx.allowed = causal if own_mask is None else _allowed(own_mask).reshape(-1, length, length)
            packed = decode_kernel.pack(prefix_k, prefix_v)
            out, lse = _kernel_cascade(query, packed, prefix_k.shape[2], key, value, ctx.allowed, scale)
            ctx.save_for_backward(query, prefix_k, prefix_v, key, value, out, lse)
            return out
        key_r, value_r = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
        out_p, lse_p = _flash(fold(query), prefix_k, prefix_v, scale=scale)
        if own_mask is None:
            out_o, lse_o = _flash(query, key_r, value_r, is_causal=True, scale=scale)
        else:
            out_o, lse_o = _flash(query, key_r, value_r, attn_mask=own_mask, scale=scale)
        out, lse = _merge(unfold(out_p), unfold(lse_p), out_o, lse_o)
        ctx.save_for_backward(query, prefix_k, prefix_v, key_r, value_r, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        grad_out = grad_out.contiguous()
        if ctx.kernel:
            return _kernel_cascade_backward(ctx, grad_out) + (None, None)
        query, prefix_k, prefix_v, key_r, value_r, out, lse = ctx.saved_tensors
        rows, q_heads, length, dim = query.shape
        kv_heads, groups = prefix_k.shape[1], ctx.groups
        fold, unfold = _folding(rows, kv_heads, groups, length)
        dq_p, d_prefix_k, d_prefix_v = _flash_backward(
            fold(grad_out), fold(query), prefix_k, prefix_v, fold(out), fold(lse), 0.0, False, scale=ctx.scale
        )
        causal = ctx.own_mask is None
        mask = {} if causal else {"attn_mask": ctx.own_mask}
        dq_o, dk, dv = _flash_backward(
            grad_out, query, key_r, value_r, out, lse, 0.0, causal, scale=ctx.scale, **mask
        )
        dk = dk.view(rows, kv_heads, groups, length, dim).sum(2)
        dv = dv.view(rows, kv_heads, groups, length, dim).sum(2)
        return unfold(dq_p) + dq_o, d_prefix_k, d_prefix_v, dk, dv, None, None


def _kernel_cascade_backward(ctx, grad_out):
    """:class:`CascadeAttention`'s backward through the bf16 attention-backward kernel: the prefix part with every
    row's query heads of a K/V head folded into one long query (the prefix read once), the own part over each
    row's own columns with its query heads folded into the query length (no repeated keys), both from the
    merged output's log-sum-exp. Gradients in the inputs' dtype (float32 inside)."""
    query, prefix_k, prefix_v, key, value, out, lse = ctx.saved_tensors
    rows, q_heads, length, dim = query.shape
    kv_heads, groups = prefix_k.shape[1], ctx.groups
    fold, unfold = _folding(rows, kv_heads, groups, length)
    delta = (grad_out.float() * out.float()).sum(-1)  # [R, Hq, L]
    dq_p, d_prefix_k, d_prefix_v = decode_kernel.attention_backward(
        fold(query)[0],
        prefix_k[0],
        prefix_v[0],
        fold(grad_out)[0],
        fold(lse)[0],
        fold(delta)[0],
        kv_heads,
        None,
        1,
        ctx.scale,
    )
    # the own part: each K/V head's query heads folded into the query length, over the row's own columns
    own = (rows * kv_heads, groups * length)
    dq_o, dk, dv = decode_kernel.attention_backward(
        query.reshape(*own, dim),
        key.reshape(rows * kv_heads, length, dim),
        value.reshape(rows * kv_heads, length, dim),
        grad_out.reshape(*own, dim),
        lse.reshape(own),
        delta.reshape(own),
        kv_heads,
        ctx.allowed,
        length,
        ctx.scale,
    )
    dq = unfold(dq_p[None]) + dq_o.reshape(rows, q_heads, length, dim)
    return (
        dq.to(query.dtype),
        d_prefix_k[None].to(prefix_k.dtype),
        d_prefix_v[None].to(prefix_v.dtype),
        dk.reshape(key.shape).to(key.dtype),
        dv.reshape(value.shape).to(value.dtype),
    )


class CausalKernelAttention(torch.autograd.Function):
    """Causal self-attention of a fresh prefill ``[R, Hq, L, D]`` over its own keys ``[R, Hkv, L, D]``, with
    gradients, through the bf16 kernels (the shared prefix of a training batch is computed once this way): the
    prefill kernel forward, the attention-backward kernel backward, each K/V head's query heads folded into the
    query length (no repeated keys)."""

    @staticmethod
    def forward(ctx, query, key, value, scale):  # type: ignore[override]
        rows, q_heads, length, dim = query.shape
        kv_heads = key.shape[1]
        kp, vp = decode_kernel.pack(key, value)
        causal = _causal(length, query.device)[None]
        folded = query.reshape(rows * kv_heads, -1, dim)
        out, lse = decode_kernel.prefill(folded, kp, vp, length, kv_heads, causal, length, scale)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.scale = scale
        return out.reshape(rows, q_heads, length, dim)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        query, key, value, out, lse = ctx.saved_tensors
        rows, _, length, dim = query.shape
        kv_heads = key.shape[1]
        items = rows * kv_heads
        grad = grad_out.reshape(items, -1, dim).contiguous()
        delta = (grad.float() * out.float()).sum(-1)
        dq, dk, dv = decode_kernel.attention_backward(
            query.reshape(items, -1, dim),
            key.reshape(items, length, dim),
            value.reshape(items, length, dim),
            grad,
            lse,
            delta,
            kv_heads,
            _causal(length, query.device)[None],
            length,
            ctx.scale,
        )
        return (
            dq.reshape(query.shape).to(query.dtype),
            dk.reshape(key.shape).to(key.dtype),
            dv.reshape(value.shape).to(value.dtype),
            None,
        )


def _folding(rows: int, kv_heads: int, groups: int, length: int):
    """``[R, Hkv*G, L, ...] <-> [1, Hkv, R*G*L, ...]``: query head ``k*G + g`` of every row reads K/V head k."""

    def fold(t: torch.Tensor) -> torch.Tensor:
        tail = t.shape[3:]
        t = t.reshape(rows, kv_heads, groups * length, *tail).transpose(0, 1)
        return t.reshape(1, kv_heads, rows * groups * length, *tail)

    def unfold(t: torch.Tensor) -> torch.Tensor:
        tail = t.shape[3:]
        t = t.reshape(kv_heads, rows, groups * length, *tail).transpose(0, 1)
        return t.reshape(rows, kv_heads * groups, length, *tail)

    return fold, unfold


AttentionInterface.register(NAME, packed_gqa_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


@contextmanager
def packed_gqa(model: torch.nn.Module) -> Iterator[bool]:
    """Run ``model``'s sdpa attention as :func:`packed_gqa_attention` inside the block (CPU only; other devices and
    other attention implementations are left as they are). Yields whether it switched (then ``shared_prefix``
    works)."""
    params = next(model.parameters(), None)
    configs = []
    if params is not None and params.device.type == "cpu":
        seen: set[int] = set()
        for m in model.modules():
            config = getattr(m, "config", None)
            if config is not None and id(config) not in seen:
                seen.add(id(config))
                if getattr(config, "_attn_implementation", None) == "sdpa":
                    configs.append(config)
    for config in configs:
        config._attn_implementation = NAME
    try:
        yield bool(configs)
    finally:
        for config in configs:
            config._attn_implementation = "sdpa"


def replay_attention(
    model: torch.nn.Module,
) -> Callable[[], tuple[AbstractContextManager, AbstractContextManager]]:
    """A ``context_fn`` for ``torch.utils.checkpoint`` (non-reentrant): a checkpointed layer's recomputation in
    the backward pass runs under the attention implementation its forward ran under. Training forwards with a
    shared prefix run inside :func:`packed_gqa` and their backward outside it; replayed with ``sdpa``, a layer
    would ignore the prefix."""
    configs = list(
        {id(c): c for m in model.modules() if (c := getattr(m, "config", None)) is not None}.values()
    )
    configs = [c for c in configs if hasattr(c, "_attn_implementation")]

    def context_fn() -> tuple[AbstractContextManager, AbstractContextManager]:
        names = [c._attn_implementation for c in configs]

        @contextmanager
        def replay() -> Iterator[None]:
            before = [c._attn_implementation for c in configs]
            for c, name in zip(configs, names, strict=True):
                c._attn_implementation = name
            try:
                yield
            finally:
                for c, name in zip(configs, before, strict=True):
                    c._attn_implementation = name

        return nullcontext(), replay()

    context_fn.replays_attention = True  # type: ignore[attr-defined]
    return context_fn
