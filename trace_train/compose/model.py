"""The composed model: a transformers causal LM whose LoRA-targeted linears route every token top-1.

The base model stays what it is (a ``LlamaForCausalLM`` or any decoder with a ``layers`` ModuleList), so
``forward(input_ids, attention_mask, position_ids, past_key_values, use_cache, logits_to_keep)``, transformers'
cache classes and ``generate`` all work unchanged, and any engine built on HF models accepts it. Two edits:

* every decoder layer gets a :class:`LayerGate` (a Linear from the layer's input hidden state to N+1 slots,
  slot 0 = the plain base) run by a forward pre-hook; it decides one slot per token for the whole layer;
* every LoRA-targeted linear becomes a :class:`RoutedLoRALinear`: base output plus, for each slot that some
  tokens chose, that adapter's low-rank update computed on those tokens only (gather, A, B, scatter-add).
  Routing therefore costs about one adapter whatever N is; nothing is computed for all N and masked.

Gates start at the base: zero weights, bias ``base_bias`` on slot 0, so argmax is slot 0 for every token.
In training the chosen update is multiplied by ``p / p.detach()`` (value exactly 1, gradient of the chosen
slot's probability; the straight-through trick of Switch-style top-1 routing), so the LM loss reaches the
gates while the forward pass stays bit-identical to the chosen adapter's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from trace_train.engine import decode_kernel

BASE_SLOT = 0
# Up to this many tokens per forward with mixed slots (decode steps), the updates are computed for all adapters
# at once and masked per token (a fixed number of ops) instead of one group per slot.
PER_TOKEN_MAX = 64
# Benchmarks set this to label the gate / gather / matmul / scatter regions for torch.profiler.
PROFILE = False
# decode-sized updates through decode_kernel.routed_lora_update where it builds (False: the masked matmuls)
use_lora_kernel = True


class CompositionError(ValueError):
    """An adapter or artefact that cannot be composed with this base (named in the message)."""


def _region(name: str):
    return torch.profiler.record_function(name) if PROFILE else contextlib.nullcontext()


@dataclass
class RoutingPlan:
    """One layer's routing of the current forward call: token rows (flattened batch x sequence) per slot."""

    slots: torch.Tensor  # (T,) chosen slot per token
    groups: list[tuple[int, torch.Tensor | None]]  # (slot >= 1, row indices or None = every row)
    st_scale: torch.Tensor | None = None  # (T,) straight-through factor, training only
    dense: torch.Tensor | None = None  # (T, N+1) mixing weights when every slot is computed (benchmarks)
    # few tokens (decode): all adapters' factors at once, masked per token (no gathers)
    per_token: bool = False
    _gathered: tuple[torch.Tensor, list[torch.Tensor]] | None = field(default=None, repr=False)
    _masks: dict[tuple, torch.Tensor] | None = field(default=None, repr=False)

    def rank_mask(self, adapters: int, rank: int, dtype: torch.dtype) -> torch.Tensor:
        """``(T, adapters * rank)``: 1 over the rank block of each token's own adapter (slot k: block k - 1), 0
        elsewhere (a base-slot token: all 0). Made once per layer and shared by its routed linears."""
        key = (adapters, rank, dtype)
        if self._masks is None:
            self._masks = {}
        if key not in self._masks:
            own = self.slots[:, None] == torch.arange(1, adapters + 1, device=self.slots.device)[None, :]
            self._masks[key] = own.repeat_interleave(rank, dim=1).to(dtype)
        return self._masks[key]

    def gathered(self, x: torch.Tensor, flat_x: torch.Tensor) -> list[torch.Tensor]:
        """Rows of ``flat_x`` per group; q/k/v (and gate/up) projections receive the same input tensor ``x``,
        which is gathered once (keyed by identity: the flattened view is a new object at every call)."""
        if self._gathered is not None and self._gathered[0] is x:
            return self._gathered[1]
        with _region("compose.gather"):
            parts = [flat_x if idx is None else flat_x.index_select(0, idx) for _, idx in self.groups]
        self._gathered = (x, parts)
        return parts


class LayerGate(nn.Module):
    """Linear(hidden -> N+1 slots) over a decoder layer's input hidden state; routes top-1 per token."""

    def __init__(self, hidden_size: int, num_slots: int, base_bias: float = 1.0):
        super().__init__()
        self.proj = nn.Linear(hidden_size, num_slots)
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.bias.zero_()
            self.proj.bias[BASE_SLOT] = base_bias
        self.num_slots = num_slots
        self.base_bias = base_bias
        self.force: int | None = None  # route every token to this slot (adapter k alone, baselines, tests)
        self.dense = False  # compute every adapter and mix by the gate's softmax (benchmark reference)
        self.record: list[torch.Tensor] | None = None  # when a list, logits of each forward are appended
        self.plan: RoutingPlan | None = None

    def route(self, hidden: torch.Tensor) -> RoutingPlan:
        with _region("compose.gate"):
            flat = hidden.reshape(-1, hidden.shape[-1])
            logits = self.proj(flat.to(self.proj.weight.dtype))
            if self.record is not None:
                self.record.append(logits)
            if self.force is not None:
                slots = torch.full((flat.shape[0],), self.force, dtype=torch.long, device=flat.device)
            else:
                slots = logits.argmax(-1)
            dense = None
            if self.dense:
                dense = logits.softmax(-1).to(hidden.dtype)
                groups: list[tuple[int, torch.Tensor | None]] = [(s, None) for s in range(1, self.num_slots)]
                self.plan = RoutingPlan(slots=slots, groups=groups, dense=dense)
                return self.plan
            counts = torch.bincount(slots, minlength=self.num_slots).tolist()
            total = flat.shape[0]
            groups = []
            if counts[BASE_SLOT] != total:
                order = torch.argsort(slots, stable=True) if len(counts) > 2 else None
                start = counts[BASE_SLOT]
                for slot in range(1, self.num_slots):
                    n = counts[slot]
                    if n == total:
                        groups.append((slot, None))
                    elif n:
                        idx = order[start : start + n] if order is not None else slots.nonzero().squeeze(1)
                        groups.append((slot, idx))
                    start += n
            st_scale = None
            if self.force is None and torch.is_grad_enabled() and self.proj.weight.requires_grad:
                p = logits.softmax(-1).gather(1, slots[:, None]).squeeze(1)
                st_scale = p / p.detach()
            mixed = bool(groups) and not (len(groups) == 1 and groups[0][1] is None)
            per_token = mixed and st_scale is None and total <= PER_TOKEN_MAX
            self.plan = RoutingPlan(slots=slots, groups=groups, st_scale=st_scale, per_token=per_token)
            return self.plan


class RoutedLoRALinear(nn.Module):
    """A frozen linear plus N frozen LoRA updates; each token gets the update of the slot its gate chose.

    ``lora_A[k]``/``lora_B[k]``/``scaling[k]`` are adapter k+1's (slot k+1) tensors exactly as PEFT holds them,
    and the update is computed as PEFT does (``B(A(x)) * scaling`` added to the base output), so a gate forced
    to one slot reproduces that PEFT adapter bit for bit in the same dtype.
    """

    def __init__(
        self,
        base_layer: nn.Linear,
        gate: LayerGate,
        lora_A: list[torch.Tensor],
        lora_B: list[torch.Tensor],
        scaling: list[float],
    ):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.ParameterList([nn.Parameter(a, requires_grad=False) for a in lora_A])
        self.lora_B = nn.ParameterList([nn.Parameter(b, requires_grad=False) for b in lora_B])
        self.scaling = list(scaling)
        self.in_features, self.out_features = base_layer.in_features, base_layer.out_features
        object.__setattr__(self, "_gate", gate)  # not a submodule: the gate belongs to the decoder layer
        self._stack_cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def weight(self) -> torch.Tensor:  # for code that inspects ``module.weight`` (dtype/device checks)
        return self.base_layer.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        self.add_update(x, out)
        return out

    def add_update(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """Add each token's routed LoRA update to ``out`` (the base linear's output for ``x``, or a view of it with
        unit last stride, as the lean decode step's fused projections give) in place."""
        plan = self._gate.plan
        if plan is None or not plan.groups:
            return
        flat_out = out.reshape(-1, self.out_features)  # a view: the adds below write into ``out``
        if flat_out.numel() and flat_out.data_ptr() != out.data_ptr():  # a copy: the adds would be lost
            raise ValueError("add_update needs an output it can reshape to rows without a copy")
        flat_x = x.reshape(-1, self.in_features)
        if plan.per_token:
            self._per_token_update(flat_x, flat_out, plan)
            return
        for (slot, idx), xs in zip(plan.groups, plan.gathered(x, flat_x), strict=True):
            k = slot - 1
            a, b = self.lora_A[k], self.lora_B[k]
            with _region("compose.lora_matmul"):
                y = F.linear(F.linear(xs.to(a.dtype), a), b) * self.scaling[k]
                if plan.dense is not None:
                    y = y * plan.dense[:, slot : slot + 1].to(y.dtype)
                if plan.st_scale is not None:
                    scale = plan.st_scale if idx is None else plan.st_scale.index_select(0, idx)
                    y = y * scale[:, None].to(y.dtype)
            with _region("compose.scatter"):
                # in place: the base linear's backward needs its input, not its output
                if idx is None:
                    flat_out.add_(y.to(flat_out.dtype))
                else:
                    flat_out.index_add_(0, idx, y.to(flat_out.dtype))

    def _stacked(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every adapter's A stacked along the rank, ``[N*r, in]``, its B side by side with the scaling folded
        in, ``[out, N*r]`` (ranks zero-padded to the largest), and that B transposed, ``[N*r, out]`` contiguous
        (what ``decode_kernel.routed_lora_update`` reads)."""
        a0 = self.lora_A[0]
        cached = self._stack_cache
        if cached is not None and cached[0].dtype == a0.dtype and cached[0].device == a0.device:
            return cached
        rank = max(a.shape[0] for a in self.lora_A)
        n = len(self.lora_A)
        big_a = a0.new_zeros(n * rank, self.in_features)
        big_b = a0.new_zeros(self.out_features, n * rank)
        with torch.no_grad():
            for k, (a, b) in enumerate(zip(self.lora_A, self.lora_B, strict=True)):
                big_a[k * rank : k * rank + a.shape[0]] = a
                big_b[:, k * rank : k * rank + b.shape[1]] = b * self.scaling[k]
        self._stack_cache = (big_a, big_b, big_b.t().contiguous())
        return self._stack_cache

    def _per_token_update(self, flat_x: torch.Tensor, flat_out: torch.Tensor, plan: RoutingPlan) -> None:
        """Decode-sized batches: every adapter's A for every token in one matmul, each token's block of the
        result kept by a mask (its own slot's, none for the base), then every B in one matmul.

        Each token gets exactly its own adapter's update (the other blocks are zeros), in four ops per linear
        whatever the number of slots in use: with a few tokens per step the per-op overhead is what costs, and
        the stacked factors are small (N*r rows) where gathering each token's own B copied ``out x r`` weights
        per token (1.7x the merged model's decode time at N = 4; see ``benchmarks/bench_compose.py``).
        """
        big_a, big_b, big_bt = self._stacked()
        rank = big_a.shape[0] // len(self.lora_A)
        if use_lora_kernel and decode_kernel.supports_routed_lora(flat_x, flat_out, big_a):
            with _region("compose.lora_matmul"):  # each token's own adapter only (decode_kernel)
                decode_kernel.routed_lora_update(flat_x, big_a, big_bt, plan.slots, flat_out, rank)
            return
        with _region("compose.lora_matmul"):
            h = F.linear(flat_x.to(big_a.dtype), big_a)  # (T, N*r)
            h = h * plan.rank_mask(len(self.lora_A), rank, h.dtype)
            y = F.linear(h, big_b)
        with _region("compose.scatter"):
            flat_out.add_(y.to(flat_out.dtype))

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, adapters={len(self.lora_A)}"


def decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The decoder-layer ModuleList of a causal LM (``model.layers`` in Llama/Qwen/Mistral/SmolLM...)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n and name.endswith("layers"):
            return name, module
    raise CompositionError(
        f"cannot find the decoder layers of {type(model).__name__} (a 'layers' ModuleList)"
    )


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _routing_hook(gate: LayerGate):
    """The decoder layer's forward pre-hook: the gate routes the layer's input tokens (and changes nothing).
    Marked ``observes_input``, so the lean decode step (``trace_train.engine.lean_decode``) may call it itself."""

    def hook(_module, args, kwargs):
        gate.route(_hidden_of(args, kwargs))

    hook.observes_input = True
    return hook


class Composition:
    """Gates and routed linears installed in a causal LM (``self.model``, still a regular transformers model).

    ``names[k]`` is the adapter of slot k+1; slot 0 is the base. The gates are ``model.trace_gates`` (so they
    move with ``model.to`` and appear in its state dict); everything else in the model is frozen.
    """

    def __init__(
        self, model: nn.Module, names: list[str], gates: nn.ModuleList, routed: dict[str, RoutedLoRALinear]
    ):
        self.model = model
        self.names = list(names)
        self.gates = gates
        self.routed = routed
        self.adapters: list = []  # AdapterSpec of each slot >= 1 (set by the loader; used by the artefact)

    @property
    def num_slots(self) -> int:
        return len(self.names) + 1

    @property
    def slot_names(self) -> list[str]:
        return ["base", *self.names]

    def gate_parameters(self) -> list[nn.Parameter]:
        return list(self.gates.parameters())

    def gate_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone().contiguous() for k, v in self.gates.state_dict().items()}

    def load_gate_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        try:
            self.gates.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise CompositionError(f"gate weights do not fit this composition: {e}") from e

    @contextlib.contextmanager
    def forced(self, slot: int | None) -> Iterator[None]:
        """Route every token to ``slot`` (0 = base, k = adapter k) inside the block; None = the gates decide."""
        if slot is not None and not 0 <= slot < self.num_slots:
            raise CompositionError(f"slot {slot} out of range 0..{self.num_slots - 1} ({self.slot_names})")
        before = [g.force for g in self.gates]
        for g in self.gates:
            g.force = slot
        try:
            yield
        finally:
            for g, f in zip(self.gates, before, strict=True):
                g.force = f

    @contextlib.contextmanager
    def merged(self, slot: int) -> Iterator[None]:
        """Adapter ``slot`` folded into the base weights, every token on the base path, inside the block: the
        model of ``forced(slot)`` (up to rounding: the merged weight is rounded once to the model's dtype, as
        a merged single-LoRA policy is) at the cost of the plain base. For whole episodes on one adapter (the
        task-level router). The original weights are kept once and copied back, so they are restored bit for
        bit (subtracting the delta again would drift in low precision)."""
        if not 0 <= slot < self.num_slots:
            raise CompositionError(f"slot {slot} out of range 0..{self.num_slots - 1} ({self.slot_names})")
        if slot == BASE_SLOT:
            with self.forced(BASE_SLOT):
                yield
            return
        backup = self.__dict__.setdefault("_merge_backup", {})
        k = slot - 1
        with torch.no_grad():
            for name, lin in self.routed.items():
                weight = lin.base_layer.weight
                if name not in backup:
                    backup[name] = weight.detach().clone()
                delta = (lin.lora_B[k].float() @ lin.lora_A[k].float()) * lin.scaling[k]
                weight.add_(delta.to(weight.dtype))
        try:
            with self.forced(BASE_SLOT):
                yield
        finally:
            with torch.no_grad():
                for name, lin in self.routed.items():
                    lin.base_layer.weight.copy_(backup[name])

    @contextlib.contextmanager
    def dense(self) -> Iterator[None]:
        """Compute all N adapters for every token and mix them by the gates' softmax (the reference cost)."""
        for g in self.gates:
            g.dense = True
        try:
            yield
        finally:
            for g in self.gates:
                g.dense = False

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[list[torch.Tensor]]]:
        """Collect each layer's gate logits (T x slots per forward call) while the block runs."""
        logs: list[list[torch.Tensor]] = [[] for _ in self.gates]
        for g, log in zip(self.gates, logs, strict=True):
            g.record = log
        try:
            yield logs
        finally:
            for g in self.gates:
                g.record = None

    def slot_share(self, logs: list[list[torch.Tensor]]) -> list[float]:
        counts = torch.zeros(self.num_slots)
        for layer_logs in logs:
            for logits in layer_logs:
                counts += torch.bincount(logits.argmax(-1).cpu(), minlength=self.num_slots)
        return (counts / counts.sum().clamp(min=1)).tolist()


def compose_lora_weights(
    model: nn.Module,
    names: list[str],
    weights: dict[str, list[tuple[torch.Tensor, torch.Tensor, float]]],
    base_bias: float = 1.0,
) -> Composition:
    """Install gates and routed linears in ``model`` (mutated and frozen).

    ``weights[module_name]`` holds one ``(lora_A, lora_B, scaling)`` per adapter in the order of ``names``.
    """
    if not names:
        raise CompositionError("at least one adapter is needed")
    for p in model.parameters():
        p.requires_grad_(False)
    layers_name, layers = decoder_layers(model)
    hidden = model.config.hidden_size
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    gates = nn.ModuleList([LayerGate(hidden, len(names) + 1, base_bias) for _ in layers]).to(device)
    routed: dict[str, RoutedLoRALinear] = {}
    modules = dict(model.named_modules())
    for module_name, per_adapter in sorted(weights.items()):
        prefix = layers_name + "."
        if not module_name.startswith(prefix):
            raise CompositionError(
                f"LoRA on {module_name} is outside the decoder layers; only layer linears route"
            )
        layer_index = int(module_name[len(prefix) :].split(".", 1)[0])
        base = modules.get(module_name)
        if not isinstance(base, nn.Linear):
            raise CompositionError(
                f"{module_name} is not a Linear in this base model ({type(base).__name__})"
            )
        if len(per_adapter) != len(names):
            raise CompositionError(
                f"{module_name}: {len(per_adapter)} LoRA updates for {len(names)} adapters"
            )
        a_list, b_list, scales = [], [], []
        for name, (a, b, s) in zip(names, per_adapter, strict=True):
            if a.shape[1] != base.in_features or b.shape[0] != base.out_features or a.shape[0] != b.shape[1]:
                raise CompositionError(
                    f"adapter '{name}' does not fit {module_name} (A {tuple(a.shape)}, B {tuple(b.shape)}, base "
                    f"{base.out_features}x{base.in_features}): it was trained on another base model"
                )
            a_list.append(a.detach().to(device=device, dtype=dtype).clone())
            b_list.append(b.detach().to(device=device, dtype=dtype).clone())
            scales.append(float(s))
        module = RoutedLoRALinear(base, gates[layer_index], a_list, b_list, scales)
        parent_name, _, child = module_name.rpartition(".")
        setattr(modules[parent_name], child, module)
        routed[module_name] = module
    for gate, layer in zip(gates, layers, strict=True):
        layer.register_forward_pre_hook(_routing_hook(gate), with_kwargs=True)
    model.trace_gates = gates  # registered as a submodule: moves with .to(), listed by .parameters()
    composition = Composition(model, names, gates, routed)
    model.trace_composition = composition
    return composition
