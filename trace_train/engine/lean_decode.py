"""A decode step of a Llama-architecture model without its modules: the same computation in ~40 tensor calls a
layer, with fused projections.

A decode step through transformers' modules runs ~150 tensor operations a layer (views, casts, the mask and
rotary helpers, the cache and attention-interface plumbing) and as many Python calls around them. On a 2-core
AVX2 EPYC, float32, one row of the shipped base (SmolLM2-135M, 30 layers) after a 3,400-token prompt: 62 ms a
step, of which the decode linears take 21 and attention 10; ~4,500 operator calls a step took the rest
(``benchmarks/profile_decode_step.py``). A decode step's arithmetic is small, so that overhead was half of it.

:class:`LeanDecoder` runs the step directly from the model's weights: the embedding, then per layer RMSNorm, one
fused q/k/v projection, rotary embedding of queries and keys together, the cache's own ``update``, the engine's
attention function (:func:`trace_train.engine.attention.packed_gqa_attention`, the one the model calls), the
output projection, RMSNorm, one fused gate/up projection, SiLU times up, the down projection; the final norm and
the LM head. Projections go through :meth:`trace_train.engine.linears.DecodeLinears.linear` (the kernel that
suits the step's rows). The fused weights are concatenated copies of the model's, made again when a weight
changes (an optimiser step, a LoRA delta merged for generation).

It takes a model only where it computes exactly what the model's forward computes (:meth:`LeanDecoder.for_model`
returns None otherwise, and the engine calls the model): a ``LlamaForCausalLM`` with transformers' own Llama
modules and no hooks, whose projections are plain ``nn.Linear``, PEFT LoRA layers whose adapters add nothing
(merged or disabled, as :class:`trace_train.policies.hf.MergedLoRA` leaves them for generation), or modules that
add their own update to a base linear's output (``base_layer`` and ``add_update(x, out)``: the composed model's
routed LoRA linears, whose gates route each layer's input through a forward pre-hook marked ``observes_input``,
which the step calls itself). Tests compare it with the module path on every kind of step
(``tests/train/test_lean_decode.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from trace_train.engine import decode_kernel
from trace_train.engine.attention import packed_gqa_attention
from trace_train.engine.cache import RaggedCache
from trace_train.engine.linears import DecodeLinears

try:  # transformers' Llama modules: the only ones whose forward this step reproduces
    from transformers.activations import ACT2FN
    from transformers.models.llama.modeling_llama import (
        LlamaAttention,
        LlamaDecoderLayer,
        LlamaForCausalLM,
        LlamaMLP,
        LlamaRMSNorm,
    )
except ImportError:  # pragma: no cover - a transformers without Llama
    LlamaForCausalLM = None


class _Projection(NamedTuple):
    linear: nn.Linear  # the base: F.linear of its weight
    update: nn.Module | None  # adds its own update to the base's output in place (``add_update``), or None


@dataclass
class _Layer:
    module: nn.Module  # the decoder layer, for its input observers
    observers: list[
        tuple[Callable, bool]
    ]  # forward pre-hooks that only observe the input: (hook, with_kwargs)
    attn: nn.Module  # the attention module: its layer_idx and scaling, for the attention function
    input_norm: LlamaRMSNorm
    qkv: list[_Projection]
    o: _Projection
    post_norm: LlamaRMSNorm
    gate_up: list[_Projection]
    down: _Projection


class LeanDecoder:
    """Decode steps of one model (see the module docstring). Make it with :meth:`for_model`."""

    def __init__(self, model: nn.Module, causal_lm: nn.Module, layers: list[_Layer], linears: DecodeLinears):
        self.model = model  # what the engine was given (maybe a PEFT model)
        self.causal_lm = causal_lm
        self.layers = layers
        self.linears = linears
        decoder = causal_lm.model
        self.embed = decoder.embed_tokens
        self.rotary = decoder.rotary_emb
        self.final_norm = decoder.norm
        self.head = causal_lm.lm_head
        config = causal_lm.config
        self.q_heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = layers[0].attn.head_dim if layers else 0
        self.intermediate = layers[0].down.linear.in_features if layers else 0
        # (layer, "qkv" | "gate_up") -> (the sources' (ptr, version) each, the fused weight, the fused bias)
        self._fused: dict[tuple[int, str], tuple[tuple, torch.Tensor, torch.Tensor | None]] = {}
        self.steps = 0  # decode steps run here (tests check that a path was taken)

    @classmethod
    def for_model(
        cls, model: nn.Module, linears: DecodeLinears, previous: LeanDecoder | None = None
    ) -> LeanDecoder | None:
        """A lean decoder for ``model`` if its forward is what this step computes now (see the module docstring),
        else None. Checked per turn (LoRA layers are merged or disabled inside a generation context; hooks come
        and go); ``previous`` is returned while the modules are the same, so its fused weights are kept."""
        found = _plain_llama(model)
        if found is None:
            return None
        if previous is not None and previous.causal_lm is found[0] and previous.layers == found[1]:
            return previous
        return cls(model, *found, linears)

    @torch.no_grad()
    def __call__(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: RaggedCache
    ) -> torch.Tensor:
        """One decode step: ``ids`` ``[R]`` (one token per running row), ``mask`` ``[R, W]`` bool (the rows'
        own columns, the new one included), ``positions`` ``[R]``; writes the new K/V into ``cache`` and returns
        the next-token logits ``[R, V]``."""
        rows = ids.shape[0]
        hq, hkv, dim = self.q_heads, self.kv_heads, self.head_dim
        # the elementwise kernels where they serve (bf16 and float32 on CPU), else torch's operations
        fast = ids.device.type == "cpu" and self.embed.weight.dtype in (torch.float32, torch.bfloat16)
        ops = decode_kernel.load() if fast else None
        x = F.embedding(ids, self.embed.weight)  # [R, hidden]
        cos, sin = self.rotary(x[:, None], positions[:, None])  # [R, 1, dim]
        cos, sin = cos.reshape(rows, dim).contiguous(), sin.reshape(rows, dim).contiguous()
        attention_mask = mask[:, None, None, :]
        prefix = cache.prefix
        for index, layer in enumerate(self.layers):
            for hook, with_kwargs in layer.observers:  # e.g. the composed model's gate routing these tokens
                args = (x[:, None],)  # the layer's input as its forward gets it, [R, 1, hidden]
                hook(layer.module, args, {}) if with_kwargs else hook(layer.module, args)
            h = _rms_norm(ops, x, layer.input_norm)
            qkv = self._fused_linear(h, index, "qkv", layer.qkv)  # [R, (hq + 2 hkv) dim]
            _rotate(ops, qkv, hq + hkv, dim, cos, sin)  # queries and keys, in place
            q = qkv[:, : hq * dim].view(rows, 1, hq, dim).transpose(1, 2)  # [R, hq, 1, dim]
            k = qkv[:, hq * dim : (hq + hkv) * dim].view(rows, 1, hkv, dim).transpose(1, 2)
            v = qkv[:, (hq + hkv) * dim :].view(rows, 1, hkv, dim).transpose(1, 2)
            keys, values = cache.layers[index].update(k, v)
            out, _ = packed_gqa_attention(
                layer.attn, q, keys, values, attention_mask, scaling=layer.attn.scaling, shared_prefix=prefix
            )
            x = x + self._linear(out.reshape(rows, hq * dim), index, "o", layer.o)
            h = _rms_norm(ops, x, layer.post_norm)
            gate_up = self._fused_linear(h, index, "gate_up", layer.gate_up)
            act = _silu_mul(ops, gate_up, self.intermediate)
            x = x + self._linear(act, index, "down", layer.down)
        if prefix is not None:
            prefix.check()
        self.steps += 1
        x = _rms_norm(ops, x, self.final_norm)
        return self.linears.linear(x, self.head.weight, self.head.bias, "lm_head")

    def _linear(self, x: torch.Tensor, index: int, name: str, projection: _Projection) -> torch.Tensor:
        base = projection.linear
        out = self.linears.linear(x, base.weight, base.bias, (name, index))
        if projection.update is not None:
            projection.update.add_update(x, out)
        return out

    def _fused_linear(
        self, x: torch.Tensor, index: int, name: str, projections: list[_Projection]
    ) -> torch.Tensor:
        """``x`` through the projections at once: their base weights concatenated (kept while they are
        unchanged), then each projection's own update added to its columns."""
        bases = [p.linear for p in projections]
        sources = tuple((m.weight.data_ptr(), m.weight._version) for m in bases)
        kept = self._fused.get((index, name))
        if kept is None or kept[0] != sources:
            weight = torch.cat([m.weight.detach() for m in bases])
            bias = None
            if any(m.bias is not None for m in bases):
                bias = torch.cat(
                    [
                        m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features)
                        for m in bases
                    ]
                )
            kept = (sources, weight, bias)
            self._fused[(index, name)] = kept
            self.linears.forget((name, index))  # a new tensor may reuse the old one's address and version
        out = self.linears.linear(x, kept[1], kept[2], (name, index))
        start = 0
        for p in projections:
            end = start + p.linear.out_features
            if p.update is not None:
                p.update.add_update(x, out[:, start:end])
            start = end
        return out


def _rms_norm(ops, x: torch.Tensor, norm: LlamaRMSNorm) -> torch.Tensor:
    """``LlamaRMSNorm.forward``'s arithmetic: normalised in float32, cast back, then scaled."""
    if ops is not None:
        return ops.lean_rms_norm(x, norm.weight, norm.variance_epsilon)
    normed = torch.rms_norm(x.float(), (x.shape[-1],), None, norm.variance_epsilon)
    return norm.weight * normed.to(x.dtype)


def _rotate(ops, qkv: torch.Tensor, heads: int, dim: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """``apply_rotary_pos_emb`` on the first ``heads`` heads of each row of ``qkv`` ``[R, ...]``, in place."""
    if ops is not None:
        ops.lean_rope_(qkv, heads, dim, cos, sin)
        return
    x = qkv[:, : heads * dim].view(qkv.shape[0], heads, dim)
    half = dim // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    x.copy_(x * cos[:, None] + rotated * sin[:, None])


def _silu_mul(ops, gate_up: torch.Tensor, width: int) -> torch.Tensor:
    """``LlamaMLP``'s ``act_fn(gate) * up`` from the fused ``[gate | up]`` rows."""
    if ops is not None:
        return ops.lean_silu_mul(gate_up)
    return F.silu(gate_up[:, :width]) * gate_up[:, width:]


def _plain_llama(model: nn.Module) -> tuple[nn.Module, list[_Layer]] | None:
    """The ``LlamaForCausalLM`` whose forward ``model``'s forward is, and its layers' parts (see the module
    docstring); None if ``model`` computes anything else."""
    if LlamaForCausalLM is None:
        return None
    causal_lm = model
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):  # a PEFT model
        causal_lm = get_base()
    if type(causal_lm) is not LlamaForCausalLM:
        return None
    config = causal_lm.config
    if config.hidden_act != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return None
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return None
    decoder = causal_lm.model
    layer_ids = {id(layer) for layer in decoder.layers}
    for module in model.modules():
        pre_hooks = list(module._forward_pre_hooks.values())
        if id(module) in layer_ids:  # a decoder layer's hooks may observe its input (the step calls them)
            pre_hooks = [h for h in pre_hooks if not getattr(h, "observes_input", False)]
        if module._forward_hooks or pre_hooks or "forward" in module.__dict__:
            return None
    if type(decoder.embed_tokens) is not nn.Embedding or type(decoder.norm) is not LlamaRMSNorm:
        return None
    if type(causal_lm.lm_head) is not nn.Linear:
        return None
    layers = []
    for layer in decoder.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if (
            type(layer) is not LlamaDecoderLayer
            or type(attn) is not LlamaAttention
            or type(mlp) is not LlamaMLP
            or type(layer.input_layernorm) is not LlamaRMSNorm
            or type(layer.post_attention_layernorm) is not LlamaRMSNorm
            or type(mlp.act_fn) not in (nn.SiLU, type(ACT2FN["silu"]))
        ):
            return None
        modules = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj)
        q, k, v, o, gate, up, down = (_projection(m) for m in (*modules, mlp.down_proj))
        if None in (q, k, v, o, gate, up, down):
            return None
        observers = [
            (hook, hook_id in layer._forward_pre_hooks_with_kwargs)
            for hook_id, hook in layer._forward_pre_hooks.items()
        ]
        layers.append(
            _Layer(
                module=layer,
                observers=observers,
                attn=attn,
                input_norm=layer.input_layernorm,
                qkv=[q, k, v],
                o=o,
                post_norm=layer.post_attention_layernorm,
                gate_up=[gate, up],
                down=down,
            )
        )
    return causal_lm, layers


def _projection(module: nn.Module) -> _Projection | None:
    """``module`` as a base ``nn.Linear`` plus an in-place update: a plain ``nn.Linear``; a PEFT LoRA layer while
    its adapters add nothing (merged into the base weight, disabled, or none active): its base layer; a module
    with a ``base_layer`` and ``add_update(x, out)`` (the composed model's routed LoRA linears). Else None."""
    if type(module) is nn.Linear:
        return _Projection(module, None)
    base = getattr(module, "base_layer", None)
    if type(base) is not nn.Linear:
        return None
    if callable(getattr(module, "add_update", None)):
        return _Projection(base, module)
    lora_a = getattr(module, "lora_A", None)
    if lora_a is None or not hasattr(module, "merged"):
        return None
    if module.disable_adapters:  # disabled and merged: its forward would unmerge first
        return None if module.merged else _Projection(base, None)
    if module.merged or not any(name in lora_a for name in module.active_adapters):
        return _Projection(base, None)
    return None
