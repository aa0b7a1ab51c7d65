"""The roofline account: how far each phase of a run is from what this machine can do.

Every model call made by the rollout engine (prefill, decode) and by the trainers (forward and backward of
training, no-grad scoring) records the work it needed in a process-wide :data:`LEDGER`:

- **tokens** pushed through the model, each counted once (a shared prefix once, not once per row);
- **FLOPs** they need: ``2 x matmul parameters`` per token (the LM head only at positions whose logits are
  used), plus attention, ``4 x layers x query heads x head dim`` per (query, key) pair; training adds the
  backward pass (input gradients: 2x the forward; weight gradients only for trainable parameters, which for
  LoRA is a small share) and a recomputed forward under gradient checkpointing;
- **bytes** that must cross the memory bus at least: the weights once per model call, and the keys and
  values each query row attends to (a shared prefix's once per call).

The machine's peaks are measured, not looked up (:func:`machine_peak`): the best FLOP rate of a model-shaped
linear layer at the run's dtype and the best read bandwidth of a large tensor, in this process. A phase's lower
bound is ``max(FLOPs / peak FLOP/s, bytes / peak bandwidth)`` (compute and memory traffic perfectly
overlapped), and its **share of bound** is that bound over the seconds it took: 1.0 is the machine's limit,
0.2 means five times slower than the limit. Time a stage spends outside the model (env steps, tokenising,
Python between turns) is reported as ``other``: its bound is 0.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

PHASES = ("prefill", "decode", "train")


@dataclass(frozen=True)
class ModelCost:
    """What one token costs a model: matmul parameters, attention shape, bytes of weights and of KV cache."""

    body_params: int  # matmul weights every token goes through (decoder layers, adapters included)
    head_params: int  # the LM head: only at positions whose logits are needed
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    weight_bytes: int
    dtype: str

    @property
    def elem_bytes(self) -> int:
        return torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of keys and values one cached token holds, over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.elem_bytes

    def attention_flops(self, new: int, context: int) -> float:
        """QK^T and AV for ``new`` query tokens appended after ``context`` cached ones (causal)."""
        pairs = new * context + new * (new + 1) / 2
        return 4.0 * self.layers * self.q_heads * self.head_dim * pairs

    def forward_flops(self, new: int, context: int, logits: int) -> float:
        return (
            2.0 * self.body_params * new
            + 2.0 * self.head_params * logits
            + self.attention_flops(new, context)
        )

    @classmethod
    def of(cls, model: torch.nn.Module) -> ModelCost:
        """The cost of ``model`` (a transformers causal LM, possibly wrapped by peft); cached per model."""
        cached = _COSTS.get(model)
        if cached is not None:
            return cached
        head = None
        get_head = getattr(model, "get_output_embeddings", None)
        if callable(get_head):
            head = get_head()
        head_weight = getattr(head, "weight", None)
        body = head_params = 0
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                if head_weight is not None and module.weight is head_weight:
                    head_params += module.weight.numel()
                else:
                    body += module.weight.numel()
        if head_weight is not None and head_params == 0:
            head_params = head_weight.numel()
        params = list(model.parameters())
        config = _text_config(model)
        layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        q_heads = int(getattr(config, "num_attention_heads", 0) or 0)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or q_heads)
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        head_dim = int(getattr(config, "head_dim", None) or (hidden // q_heads if q_heads else 0))
        dtype = params[0].dtype if params else torch.float32
        cost = cls(
            body_params=body,
            head_params=head_params,
            layers=layers,
            q_heads=q_heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            weight_bytes=sum(p.numel() * p.element_size() for p in params),
            dtype=str(dtype).removeprefix("torch."),
        )
        with contextlib.suppress(TypeError):  # not weak-referenceable: computed again next time
            _COSTS[model] = cost
        return cost


_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _text_config(model: torch.nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None:  # a peft wrapper or a composed model: the wrapped model's config
        inner = getattr(model, "base_model", None) or getattr(model, "model", None)
        config = getattr(inner, "config", None)
    get_text = getattr(config, "get_text_config", None)
    return get_text() if callable(get_text) else config


@dataclass
class PhaseWork:
    tokens: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    seconds: float = 0.0
    calls: int = 0
    dtype: str = ""

    def minus(self, other: PhaseWork) -> PhaseWork:
        return PhaseWork(
            self.tokens - other.tokens,
            self.flops - other.flops,
            self.bytes - other.bytes,
            self.seconds - other.seconds,
            self.calls - other.calls,
            self.dtype,
        )


@dataclass
class Ledger:
    """Work per phase, accumulated by every model call in this process (see the module docstring)."""

    phases: dict[str, PhaseWork] = field(default_factory=lambda: {p: PhaseWork() for p in PHASES})

    def add(
        self, phase: str, cost: ModelCost, tokens: int, flops: float, bytes_: float, calls: int = 1
    ) -> None:
        work = self.phases[phase]
        work.tokens += tokens
        work.flops += flops
        work.bytes += bytes_
        work.calls += calls
        work.dtype = cost.dtype

    def add_seconds(self, phase: str, seconds: float) -> None:
        self.phases[phase].seconds += seconds

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add_seconds(phase, time.perf_counter() - t0)

    def snapshot(self) -> dict[str, PhaseWork]:
        return copy.deepcopy(self.phases)

    def since(self, snapshot: dict[str, PhaseWork]) -> dict[str, PhaseWork]:
        return {p: w.minus(snapshot.get(p, PhaseWork())) for p, w in self.phases.items()}


LEDGER = Ledger()


# ----- what the callers record -------------------------------------------------------------------------------
def record_blocks(
    phase: str,
    model: torch.nn.Module,
    blocks: list[tuple[int, int]],
    logits: int,
    calls: int,
    shared_context: int = 0,
) -> None:
    """Record a forward over rows that each append ``new`` tokens after ``context`` cached ones
    (``blocks = [(new, context), ...]``), ``logits`` LM-head positions, in ``calls`` model calls. The first
    ``shared_context`` tokens of every row's context are one shared prefix: its keys and values are read once
    per call."""
    cost = ModelCost.of(model)
    tokens = sum(n for n, _ in blocks)
    flops = sum(cost.forward_flops(n, c, 0) for n, c in blocks) + 2.0 * cost.head_params * logits
    own_kv = sum(max(c - shared_context, 0) + n for n, c in blocks)
    kv_tokens = own_kv + shared_context * calls
    LEDGER.add(
        phase, cost, tokens, flops, cost.weight_bytes * calls + cost.kv_bytes_per_token * kv_tokens, calls
    )


def record_training(model: torch.nn.Module, blocks: list[tuple[int, int]], logits: int) -> None:
    """Record a trainer's forward over ``blocks`` (as in :func:`record_blocks`) and ``logits`` LM-head
    positions. Under autograd with trainable weights its backward is counted too (input gradients, weight
    gradients of the trainable parameters, a recomputed forward under gradient checkpointing); under
    ``torch.no_grad`` (old or reference log-probs) one forward."""
    cost = ModelCost.of(model)
    # counted per call, not cached with the cost: a trainer freezes and unfreezes weights after loading
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad = torch.is_grad_enabled() and trainable > 0
    checkpointing = grad and any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    tokens = sum(n for n, _ in blocks)
    forward = sum(cost.forward_flops(n, c, 0) for n, c in blocks)
    head = 2.0 * cost.head_params * logits
    passes = 1
    if grad:
        frozen = max(cost.body_params - trainable, 0)
        passes = 4 if checkpointing else 3
        forward = forward * passes - 2.0 * frozen * tokens  # no weight gradient for frozen matmuls
        head *= 2  # its input gradient; a frozen head has no weight gradient
    kv_tokens = sum(c + n for n, c in blocks)
    calls = 1 if blocks else 0
    LEDGER.add(
        "train",
        cost,
        tokens,
        forward + head,
        passes * (cost.weight_bytes * calls + cost.kv_bytes_per_token * kv_tokens),
        calls,
    )


# ----- the machine ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MachinePeak:
    dtype: str
    flops_per_s: float  # best of a model-shaped linear layer at this dtype
    bytes_per_s: float  # best read bandwidth of a 256 MB tensor
    threads: int


def machine_peak(dtype: str = "float32", repeats: int = 5) -> MachinePeak:
    """This process's best measured matmul rate at ``dtype`` and read bandwidth with its current thread count
    (~1-2 s, once per dtype and thread count: one thread's peak is about half of two threads').

    The matmul is SmolLM2-135M's MLP up-projection on 1024 tokens (576 -> 1536): the shape that dominates the
    model's FLOPs; larger square matmuls run at about the same rate on CPU. Best of ``repeats``, so a core
    borrowed by another process during one try does not lower the peak."""
    return _measured_peak(dtype, repeats, torch.get_num_threads())


@functools.cache
def _measured_peak(dtype: str, repeats: int, threads: int) -> MachinePeak:
    dt = getattr(torch, dtype)
    x, w = torch.randn(1024, 576).to(dt), torch.randn(1536, 576).to(dt)
    torch.nn.functional.linear(x, w)  # warm-up: oneDNN picks its kernel on the first call
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(4):
            torch.nn.functional.linear(x, w)
        best = max(best, 4 * 2 * 1024 * 576 * 1536 / max(time.perf_counter() - t0, 1e-9))
    big = torch.ones(64 * 1024 * 1024, dtype=torch.float32)  # 256 MB: far past every cache
    big.sum()
    bandwidth = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        big.sum()
        bandwidth = max(bandwidth, big.numel() * 4 / max(time.perf_counter() - t0, 1e-9))
    return MachinePeak(dtype, best, bandwidth, threads)


# ----- the account -------------------------------------------------------------------------------------------
def account(work: dict[str, PhaseWork], wall_s: float, peak: MachinePeak | None = None) -> dict[str, Any]:
    """Per phase and in all: tokens, GFLOP, GB moved, seconds, lower bound and share of bound.

    ``wall_s`` is the stage's (or command's) wall time: what the phases do not cover is ``other``. ``peak``
    defaults to :func:`machine_peak` at the dtype the phases ran in."""
    ran = {p: w for p, w in work.items() if w.calls or w.seconds}
    if peak is None:
        dtype = next((w.dtype for w in ran.values() if w.dtype), "float32")
        peak = machine_peak(dtype)
    rows: dict[str, dict[str, Any]] = {}
    bound_total = 0.0
    for phase, w in ran.items():
        bound = max(w.flops / peak.flops_per_s, w.bytes / peak.bytes_per_s)
        bound_total += bound
        rows[phase] = {
            "tokens": w.tokens,
            "calls": w.calls,
            # per model call: a decode step's rows (its effective batch), a prefill's or training forward's tokens
            "tokens_per_call": round(w.tokens / w.calls, 2) if w.calls else None,
            "gflop": round(w.flops / 1e9, 3),
            "gbytes": round(w.bytes / 1e9, 3),
            "seconds": round(w.seconds, 3),
            "bound_s": round(bound, 3),
            "share_of_bound": _sig(bound / w.seconds) if w.seconds > 0 else None,
            "limited_by": "compute" if w.flops / peak.flops_per_s >= w.bytes / peak.bytes_per_s else "memory",
        }
    inside = sum(w.seconds for w in ran.values())
    rows["other"] = {"seconds": round(max(wall_s - inside, 0.0), 3), "bound_s": 0.0}
    return {
        "peak": asdict(peak)
        | {"gflop_per_s": round(peak.flops_per_s / 1e9, 1), "gb_per_s": round(peak.bytes_per_s / 1e9, 1)},
        "phases": rows,
        "wall_s": round(wall_s, 3),
        "bound_s": round(bound_total, 3),
        "share_of_bound": _sig(bound_total / wall_s) if wall_s > 0 else None,
    }


def _sig(x: float) -> float:
    """Four significant digits: a tiny test model's share is 1e-4, the demo's 0.3."""
    return float(f"{x:.4g}")


def format_account(acc: dict[str, Any]) -> str:
    """The account as a small fixed-width table (for terminals and logs)."""
    peak = acc["peak"]
    lines = [
        f"roofline ({peak['dtype']}, {peak['threads']} threads: {peak['gflop_per_s']} GFLOP/s, "
        f"{peak['gb_per_s']} GB/s measured)",
        f"{'phase':<8} {'tokens':>9} {'tok/call':>8} {'GFLOP':>9} {'GB':>8} {'seconds':>9} {'bound s':>9} "
        f"{'share':>7}  limit",
    ]
    for phase, r in acc["phases"].items():
        share = r.get("share_of_bound")
        per_call = r.get("tokens_per_call")
        lines.append(
            f"{phase:<8} {r.get('tokens', ''):>9} {'' if per_call is None else f'{per_call:.1f}':>8} "
            f"{r.get('gflop', ''):>9} {r.get('gbytes', ''):>8} "
            f"{r['seconds']:>9.1f} {r['bound_s']:>9.2f} {'' if share is None else f'{share:.3f}':>7}  "
            f"{r.get('limited_by', '')}"
        )
    total = acc["share_of_bound"]
    lines.append(
        f"{'all':<8} {'':>9} {'':>8} {'':>9} {'':>8} {acc['wall_s']:>9.1f} {acc['bound_s']:>9.2f} "
        f"{'' if total is None else f'{total:.3f}':>7}"
    )
    return "\n".join(lines)


def account_metrics(acc: dict[str, Any]) -> dict[str, float]:
    """The account as flat scalars for a metrics log: ``roofline_share`` and per phase seconds and share."""
    out = {"roofline_bound_s": acc["bound_s"], "roofline_share": acc["share_of_bound"] or 0.0}
    for phase, row in acc["phases"].items():
        out[f"roofline_{phase}_seconds"] = row["seconds"]
        if row.get("share_of_bound") is not None:
            out[f"roofline_{phase}_share"] = row["share_of_bound"]
    return out
