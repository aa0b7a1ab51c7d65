"""The cached engine's prefill attention over a shared prefix: torch's flash attention against the bf16 prefill
kernel (issue 50).

    python benchmarks/bench_prefill_attention.py
    python benchmarks/bench_prefill_attention.py --out benchmarks/results/roofline/prefill_kernel.json

SmolLM2-135M's shapes (30 layers, 9 query heads over 3 K/V heads, head dim 64), bf16, a 2,700-token shared prefix
(the retail system prompt with its tools) and the prefill shapes of an evaluation: the first turn of many rows, one
row's long reply, and follow-up turns of a few rows over their own columns with holes. Each shape runs
``_with_prefix``'s inference prefill through ``attention.packed_gqa_attention`` over every layer (a K/V buffer per
layer), once with ``attention.use_decode_kernel = False`` (two flash calls, ``_cascade_prefill``) and once with the
kernel (``_kernel_prefill``: the prefix packed once per layer and session, as the engine does, the own columns
packed per call), alternating, with the attention FLOPs each must do and the GFLOP/s reached. The outputs are
compared too. Nothing else should run: the figures are wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import torch

from trace_train.engine import attention, decode_kernel

LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM = 30, 9, 3, 64
# rows, new tokens per row, own columns per row after them
SHAPES = [(32, 120, 120), (1, 300, 900), (8, 40, 600), (12, 150, 1200), (4, 60, 300)]


class _Layer:
    def __init__(self, index: int):
        self.layer_idx = index


def _case(rows: int, length: int, own: int, prefix_len: int, g: torch.Generator):
    dtype = torch.bfloat16
    prefix = [
        (
            torch.randn(1, KV_HEADS, prefix_len, HEAD_DIM, generator=g).to(dtype),
            torch.randn(1, KV_HEADS, prefix_len, HEAD_DIM, generator=g).to(dtype),
        )
        for _ in range(LAYERS)
    ]
    capacity = int(own * 1.3) + 8  # the engine's buffers grow by half: the used columns are a strided view
    layers = []
    for _ in range(LAYERS):
        k = torch.randn(rows, KV_HEADS, capacity, HEAD_DIM, generator=g).to(dtype)[:, :, :own]
        v = torch.randn(rows, KV_HEADS, capacity, HEAD_DIM, generator=g).to(dtype)[:, :, :own]
        layers.append((k, v))
    query = torch.randn(rows, Q_HEADS, length, HEAD_DIM, generator=g).to(dtype)
    causal = torch.ones(length, own, dtype=torch.bool).tril(own - length)
    earlier = torch.rand(rows, 1, 1, own, generator=g) > 0.2  # holes among the earlier turns' columns
    earlier[..., own - length :] = True
    mask = causal[None, None] & earlier
    return prefix, layers, query, mask


def _forward(prefix, layers, query, mask, kernel: bool) -> list[torch.Tensor]:
    attention.use_decode_kernel = kernel
    shared = attention.SharedPrefix(prefix)  # a new session: the kernel packs the prefix again
    try:
        outs = []
        for index, (k, v) in enumerate(layers):
            out, _ = attention.packed_gqa_attention(
                _Layer(index), query, k, v, mask, scaling=HEAD_DIM**-0.5, shared_prefix=shared
            )
            outs.append(out)
        return outs
    finally:
        attention.use_decode_kernel = True


def measure(prefix_len: int, repeats: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    results = []
    with torch.no_grad():
        for rows, length, own in SHAPES:
            case = _case(rows, length, own, prefix_len, g)
            flash_out, kernel_out = _forward(*case, False), _forward(*case, True)
            diff = max(
                float((a.float() - b.float()).abs().max()) for a, b in zip(flash_out, kernel_out, strict=True)
            )
            times = {False: [], True: []}
            for _ in range(repeats):
                for kernel in (False, True):
                    t0 = time.perf_counter()
                    _forward(*case, kernel)
                    times[kernel].append(time.perf_counter() - t0)
            flash_ms, kernel_ms = (1e3 * sorted(times[k])[repeats // 2] for k in (False, True))
            # score and value products over the prefix and the allowed own columns
            pairs = rows * Q_HEADS * length * prefix_len + Q_HEADS * int(
                case[3].expand(rows, 1, length, own).sum()
            )
            gflop = LAYERS * 4 * HEAD_DIM * pairs / 1e9
            results.append(
                {
                    "rows": rows,
                    "new_tokens_per_row": length,
                    "own_columns": own,
                    "attention_gflop": round(gflop, 2),
                    "flash_ms": round(flash_ms, 1),
                    "kernel_ms": round(kernel_ms, 1),
                    "speedup": round(flash_ms / kernel_ms, 2),
                    "flash_gflops": round(gflop / flash_ms * 1e3),
                    "kernel_gflops": round(gflop / kernel_ms * 1e3),
                    "max_abs_difference": diff,
                }
            )
            print(json.dumps(results[-1]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prefix", type=int, default=2700)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    module = decode_kernel.load()
    if module is None or not module.prefill_available():
        raise SystemExit(
            f"the prefill kernel is not available on this CPU ({decode_kernel.error or 'no AVX-512 bf16'})"
        )
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), ""
    )
    report = {
        "cpu": model,
        "threads": args.threads,
        "prefix": args.prefix,
        "load_average_at_start": os.getloadavg()[0],
        "shapes": measure(args.prefix, args.repeats),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
