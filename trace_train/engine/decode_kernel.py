"""Attention kernels for the cached engine on CPU (issue 50): decode that reads every cached key and value once,
and prefill with bf16 dot products.

At evaluation's lengths a decode step's attention is four batched matmuls per layer (scores and values, over the
shared prefix and over each row's own columns) plus a float32 softmax between them. The own-column matmuls have
three columns (the three query heads of a K/V head), and oneDNN reads their operands at 11-14 GB/s, a third of
what this CPU reads: 54.5 ms of attention per step at 12 rows over a 2,700-token prefix and 1,230 own columns,
where reading the 402 MB of K/V needs about 10 ms (``benchmarks/bench_decode_attention.py``).

``csrc/decode_attention.cpp`` does one step the way llama.cpp and flash decoding do: each (row, K/V head) streams
its columns once, scores its query heads against each key in float32, keeps an online softmax, and accumulates the
values in float32; masked columns (the holes other rows' turns leave) are skipped; the columns of a row are split
across threads and merged by their log-sum-exps. It is built on first use with torch's C++ extension tooling for
this CPU (``-O3 -march=native``: AVX-512, AVX2+FMA, or plain C++), into a cache directory named after the CPU's
flags and torch's version, so a build never runs on a CPU it was not built for.

Numerics: the matmul path rounds scores and probabilities to the model's dtype (eager attention's numerics); the
kernel keeps them in float32 and rounds once at the end. In float32 both agree to ~1e-6; in bf16 outputs differ
in the last bits, and a greedy near-tie may resolve the other way.

With two rows or more over a shared prefix, the prefix is read once for all of them (``run_prefix``: work items
are (head, split of the prefix), each block of 64 keys is transposed into float32 once and scored against every
row's queries with broadcast FMAs) and only the rows' own columns per row; both sets of partial states merge by
their log-sum-exps. The per-row pass read the prefix once per row: at 8 rows over a 3,400-token prefix (float32,
2-core AVX2 EPYC, shipped base) decode attention took 70 ms a step, now 37 ms (the step 175 -> 134 ms).

``csrc/prefill_attention.cpp`` (the same module) is prefill's counterpart: torch's CPU flash attention computes
bf16 at the float32 rate on a CPU without AMX (124-168 GFLOP/s here, where oneDNN's bf16 GEMMs of the same shapes
reach 660-940), and prefill over the 2,700-token shared prefix spent two thirds of its time there. Keys and values
are packed in bf16 pairs (the prefix once per session and layer, ``SharedPrefix.packed``), tiles of 4 queries
score 32 keys per step with ``vdpbf16ps``, keep an online softmax in float32, and add the values with bf16
probabilities (as flash attention does on GPUs); each call returns the log-sum-exps that merge the prefix and own
parts. Built only where the CPU has AVX-512 bf16 (``prefill_available()``), for head dim 64; not used on a CPU with
AMX, where torch's flash attention has AMX tiles (not measured against this kernel).

``csrc/attention_backward.cpp`` (the same module) is training's: the gradients of attention from the forward's
output and log-sum-exp, recomputing P and dS per tile in a keys pass (dK, dV) and a queries pass (dQ), with
``vdpbf16ps`` over pairs packed by ``pack_kv`` (:func:`attention_backward`; ``attention.CascadeAttention`` and
``attention.CausalKernelAttention`` take it, the prefill kernel doing their forward).

``csrc/routed_lora.cpp`` (the same module) serves the composed model (``trace_train/compose/model.py``): at decode
sizes each token adds its own adapter's LoRA update only, where the masked stacked factors computed every adapter's
for every token (:func:`routed_lora_update`).

:func:`load` returns the built module or None (no compiler, a failed build, ``TRACE_DECODE_KERNEL=0``); the
callers then keep torch's paths. The first failure is reported once on stderr.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import torch

# the module's source: it binds the functions of the other files in csrc/ (prefill, routed LoRA)
SOURCE = Path(__file__).parent / "csrc" / "decode_attention.cpp"
# -fopenmp: at::parallel_for is inline OpenMP code (sequential without it); the module then shares torch's own
# libgomp.so.1, already loaded under that name, so there is one thread pool
CFLAGS = ["-O3", "-march=native", "-fopenmp"]
ENV_SWITCH = "TRACE_DECODE_KERNEL"  # "0" turns every kernel of the module off
PREFILL_SWITCH = "TRACE_PREFILL_KERNEL"  # "0" turns the prefill kernel off (decode keeps its kernel)

_lock = threading.Lock()
_module: ModuleType | None = None
_tried = False
error: str | None = None  # why the last load failed
calls = 0  # calls into any of the module's kernels (tests check that a path was taken)


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


@functools.cache
def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _sources() -> list[Path]:
    return [SOURCE, *sorted(p for p in SOURCE.parent.glob("*.cpp") if p != SOURCE)]


def _has_amx() -> bool:
    """Whether the CPU has AMX bf16 tiles: torch's flash attention computes bf16 with them (its brgemm path), where
    this kernel has only been measured against torch on a CPU without AMX, so there torch's path stays."""
    return "amx_bf16" in _cpu_flags().split()


def build_directory() -> Path:
    """Where the built module lives: keyed by the sources, the flags, torch's and Python's versions and the CPU."""
    files = [*_sources(), *sorted(SOURCE.parent.glob("*.h"))]
    key = hashlib.sha256(
        b"".join(f.read_bytes() for f in files)
        + " ".join(CFLAGS).encode()
        + torch.__version__.encode()
        + _cpu_flags().encode()
        + sys.version.encode()
    ).hexdigest()[:16]
    root = Path(os.environ.get("TRACE_EXTENSIONS_DIR", Path.home() / ".cache" / "trace" / "extensions"))
    return root / f"decode_attention_{key}"


def _import(name: str, library: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(library))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _build(directory: Path, name: str) -> ModuleType:
    """Compiles into a private directory and moves it into place in one rename. torch's own build directory takes a
    lock file that a process killed mid-build leaves behind (every later build then waits on it forever), and two
    checkouts sharing one directory rebuild each other's objects; a private directory has neither problem, and a
    finished one is only ever imported."""
    from torch.utils import cpp_extension

    directory.parent.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        module = cpp_extension.load(
            name=name,
            sources=[str(p) for p in _sources()],
            extra_cflags=CFLAGS,
            extra_ldflags=["-fopenmp"],
            build_directory=str(private),
            verbose=False,
        )
        private.chmod(0o755)  # mkdtemp's 0700 would keep other users of a shared cache out
        try:
            private.rename(directory)
        except OSError:  # another process published first: use its build
            shutil.rmtree(private, ignore_errors=True)
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise
    return module


def load() -> ModuleType | None:
    """The built kernel, building it on first call (tens of seconds, once per CPU and torch version), or None."""
    global _module, _tried, error
    if not enabled():
        return None
    if _tried:
        return _module
    with _lock:
        if _tried:
            return _module
        try:
            directory = build_directory()
            name = f"trace_decode_attention_{directory.name.rsplit('_', 1)[1]}"
            library = directory / f"{name}.so"
            _module = _import(name, library) if library.exists() else _build(directory, name)
        except Exception as exc:  # no compiler, no ninja, a failed build: keep the matmul path
            error = f"{type(exc).__name__}: {exc}".strip()
            print(
                f"[trace] CPU kernels (decode and prefill attention, routed LoRA) unavailable, using torch: {error.splitlines()[0][:300]}",
                file=sys.stderr,
            )
            _module = None
        _tried = True
    return _module


def supports(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether the kernel can take this step: CPU, bf16 or float32, no gradients, a head shape it was built for."""
    if query.device.type != "cpu" or query.dtype not in (torch.bfloat16, torch.float32):
        return False
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad):
        return False
    module = load()
    if module is None:
        return False
    groups = query.shape[1] // key.shape[1]
    dim = query.shape[-1]
    return groups <= 8 and dim <= 256 and dim % module.vector_width() == 0 and key.stride(-1) == 1


def supports_prefill(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether the bf16 prefill kernel can take this forward: CPU, bf16, head dim 64, no gradients, and a build
    with AVX-512 bf16 (elsewhere torch's flash attention stays)."""
    if os.environ.get(PREFILL_SWITCH, "1") == "0" or _has_amx():
        return False
    if query.device.type != "cpu" or query.dtype != torch.bfloat16 or key.dtype != torch.bfloat16:
        return False
    if query.shape[-1] != 64 or key.stride(-1) != 1:
        return False
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad):
        return False
    module = load()
    return module is not None and module.prefill_available()


def pack(key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``key``/``value`` ``[R, H, T, 64]`` bf16 (a strided view of a cache is fine), packed for :func:`prefill`."""
    kp, vp = load().pack_kv(key, value)  # a list from C++
    return kp, vp


def prefill(
    query: torch.Tensor,
    kp: torch.Tensor,
    vp: torch.Tensor,
    length: int,
    heads: int,
    mask: torch.Tensor | None,
    mask_queries: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``query`` ``[N, M, 64]`` (N = rows x heads) over ``length`` packed keys: the output
    ``[N, M, 64]`` and each query's log-sum-exp ``[N, M]`` (float32; -inf with zeros where a query may see no key).
    ``mask`` ``[R|1, L, length]`` bool gives query m of row n the mask line ``(n // heads, m % L)``; None allows
    every key. Call :func:`supports_prefill` first."""
    global calls
    calls += 1
    empty = torch.empty(0, dtype=torch.bool)
    mask = empty if mask is None else mask.contiguous()
    out, lse = load().prefill_attention(
        query.contiguous(), kp, vp, length, heads, mask, mask_queries, float(scale)
    )
    return out, lse


def attention_backward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    grad_out: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    heads: int,
    mask: torch.Tensor | None,
    mask_queries: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of :func:`prefill`'s attention: ``query``/``grad_out`` ``[N, M, 64]``, ``key``/``value``
    ``[N, T, 64]`` (bf16), the forward's log-sum-exp ``lse`` and ``delta`` = rowsum(grad_out * output) ``[N, M]``
    (float32), ``mask`` as :func:`prefill` takes it. Returns float32 (dq ``[N, M, 64]``, dk, dv ``[N, T, 64]``).
    Call :func:`supports_prefill` first (the same build and CPU)."""
    global calls
    calls += 1
    empty = torch.empty(0, dtype=torch.bool)
    dq, dk, dv = load().attention_backward(
        query.contiguous(),
        key,
        value,
        grad_out.contiguous(),
        lse.float().contiguous(),
        delta.float().contiguous(),
        heads,
        empty if mask is None else mask.contiguous(),
        mask_queries,
        float(scale),
    )
    return dq, dk, dv


def supports_routed_lora(x: torch.Tensor, out: torch.Tensor, stacked_a: torch.Tensor) -> bool:
    """Whether the composed model's per-token LoRA update can run in the kernel: CPU, one dtype (bf16 or float32)
    for input, output and factors, no gradients, and an output the kernel can add to in place."""
    if x.device.type != "cpu" or x.dtype not in (torch.bfloat16, torch.float32):
        return False
    if out.dtype != x.dtype or stacked_a.dtype != x.dtype or out.stride(-1) != 1:
        return False
    if torch.is_grad_enabled() and (x.requires_grad or out.requires_grad or stacked_a.requires_grad):
        return False
    return load() is not None


def routed_lora_update(
    x: torch.Tensor,
    stacked_a: torch.Tensor,
    stacked_bt: torch.Tensor,
    slots: torch.Tensor,
    out: torch.Tensor,
    rank: int,
) -> None:
    """``out[t] += B_s (A_s x[t])`` for each token t of slot s >= 1 (slot 0, the base, adds nothing): ``x``
    ``[T, in]``, ``stacked_a`` ``[N*r, in]`` (adapter s at rows ``(s-1)*r ...``), ``stacked_bt`` ``[N*r, out]`` (each
    B transposed, its scaling folded in), ``slots`` ``[T]``, ``out`` ``[T, out]`` updated in place, in float32
    with one rounding. Call :func:`supports_routed_lora` first."""
    global calls
    calls += 1
    load().routed_lora_update(x.contiguous(), stacked_a, stacked_bt, slots.contiguous(), out, int(rank))


def worth_it(rows: int, prefix: int, own: int) -> bool:
    """Whether the kernel beats the matmul path for this step. It streams the shared prefix once per row, where one
    matmul reads it once for all rows: at 32 rows over a 2,700-token prefix with 50 own columns the matmuls win
    (0.9x), from 300 own columns the kernel (1.16x), and at up to 12 rows it wins everywhere measured (1.2-4.4x;
    ``benchmarks/bench_decode_attention.py``)."""
    return rows <= 16 or own * 10 >= prefix


def splits_for(rows: int, kv_heads: int, columns: int) -> int:
    """Column splits per (row, head): enough work items for every thread, each at least 256 columns long."""
    threads = torch.get_num_threads()
    items = rows * kv_heads
    wanted = max(1, -(-4 * threads // items))
    return max(1, min(wanted, columns // 256))


def decode_attention(
    query: torch.Tensor,
    prefix_k: torch.Tensor,
    prefix_v: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """``query`` ``[B, Hkv, G, D]``, ``prefix_k``/``prefix_v`` ``[Hkv, P, D]`` (P may be 0), ``key``/``value``
    ``[B, Hkv, T, D]`` (a strided view of a cache is fine), ``mask`` ``[B|1, T]`` bool. Returns ``[B, Hkv, G, D]``.
    Call :func:`supports` first."""
    global calls
    module = load()
    assert module is not None
    calls += 1
    rows, kv_heads = query.shape[0], query.shape[1]
    splits = splits_for(rows, kv_heads, prefix_k.shape[1] + key.shape[2])
    return module.decode_attention(
        query.contiguous(),
        prefix_k.contiguous(),
        prefix_v.contiguous(),
        key,
        value,
        mask.contiguous(),
        float(scale),
        splits,
    )
