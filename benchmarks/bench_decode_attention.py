"""Where a decode step's attention time goes at evaluation's context lengths (issue 50).

    python benchmarks/bench_decode_attention.py                       # 12 rows, 2,700-token prefix, 50/300/1,230 own
    python benchmarks/bench_decode_attention.py --rows 32 --own 1230 --out benchmarks/results/roofline/attn32.json

The cached engine's decode attention (``trace_train/engine/attention.py``, ``_with_prefix``) over SmolLM2-135M's
shapes (30 layers, 9 query heads over 3 K/V heads, head dim 64), with a buffer per layer as the engine keeps them
(so the K/V come from memory, not from a cache warmed by the previous call): the whole attention of a step at each
own-column count by the matmul path and by the decode kernel (``trace_train/engine/decode_kernel.py``), then the
matmul path's pieces at the longest (own scores, own values, prefix scores, prefix values, softmax),
each with the bytes it must read and the GB/s it reaches. Nothing else should run: the figures are wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from trace_train.engine import attention, decode_kernel

LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM = 30, 9, 3, 64


class _Layer:
    def __init__(self, index: int):
        self.layer_idx = index


def _ms(fn, repeats: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return 1e3 * (time.perf_counter() - t0) / repeats


def _holes(rows: int, width: int, g: torch.Generator) -> torch.Tensor:
    """``[rows, 1, 1, width]``: runs of 20-200 real columns, three in four followed by a run of 5-80 holes (the
    engine's holes are runs: the columns that other rows' turns wrote); about a fifth of the columns are holes."""
    mask = torch.ones(rows, width, dtype=torch.bool)
    for r in range(rows):
        col = 0
        while col < width:
            col += int(torch.randint(20, 201, (1,), generator=g))
            hole = int(torch.randint(5, 81, (1,), generator=g))
            if float(torch.rand(1, generator=g)) < 0.75:
                mask[r, col : col + hole] = False
            col += hole
    return mask[:, None, None, :]


def measure(rows: int, own: list[int], prefix_len: int, repeats: int) -> dict:
    dtype, g = torch.bfloat16, torch.Generator().manual_seed(0)
    groups, longest = Q_HEADS // KV_HEADS, max(own)
    capacity = int(longest * 1.3)  # the engine's buffers grow by half: used columns are a strided view

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    prefix_kv = [
        (rand(1, KV_HEADS, prefix_len, HEAD_DIM), rand(1, KV_HEADS, prefix_len, HEAD_DIM))
        for _ in range(LAYERS)
    ]
    prefix = attention.SharedPrefix(prefix_kv)
    keys = [rand(rows, KV_HEADS, capacity, HEAD_DIM) for _ in range(LAYERS)]
    values = [rand(rows, KV_HEADS, capacity, HEAD_DIM) for _ in range(LAYERS)]
    query = rand(rows, Q_HEADS, 1, HEAD_DIM)
    mask = _holes(rows, longest, g)
    layers = [_Layer(i) for i in range(LAYERS)]

    def step(width: int) -> None:
        prefix.layers_used = 0
        for i in range(LAYERS):
            k, v = keys[i][:, :, :width], values[i][:, :, :width]
            attention._with_prefix(layers[i], query, k, v, mask[..., :width], None, prefix)

    def timed(kernel: bool) -> dict[int, float]:
        attention.use_decode_kernel = kernel
        try:
            return {w: round(_ms(lambda w=w: step(w), repeats), 2) for w in own}
        finally:
            attention.use_decode_kernel = True

    whole = timed(kernel=False)
    kernel = timed(kernel=True) if decode_kernel.load() is not None else None
    w = longest
    own_bytes = rows * KV_HEADS * w * HEAD_DIM * 2 * LAYERS  # one of K or V, all layers
    prefix_bytes = KV_HEADS * prefix_len * HEAD_DIM * 2 * LAYERS
    q_own = query.reshape(rows, KV_HEADS, groups, HEAD_DIM).transpose(-1, -2)
    p_own = rand(rows * KV_HEADS, groups, w)
    q_all = (
        query.reshape(rows, KV_HEADS, groups, HEAD_DIM)
        .transpose(0, 1)
        .reshape(KV_HEADS, rows * groups, HEAD_DIM)
    )
    p_prefix = rand(KV_HEADS, rows * groups, prefix_len)
    scores = torch.randn(KV_HEADS, rows * groups, prefix_len + w)
    pieces = {
        "own scores (K @ q)": (
            lambda: [torch.matmul(keys[i][:, :, :w], q_own) for i in range(LAYERS)],
            own_bytes,
        ),
        "own values (p @ V)": (
            lambda: [
                torch.bmm(p_own, values[i][:, :, :w].reshape(rows * KV_HEADS, w, HEAD_DIM))
                for i in range(LAYERS)
            ],
            own_bytes,
        ),
        "prefix scores": (
            lambda: [torch.matmul(q_all, prefix.keys_t(i)) for i in range(LAYERS)],
            prefix_bytes,
        ),
        "prefix values": (
            lambda: [torch.matmul(p_prefix, prefix_kv[i][1][0]) for i in range(LAYERS)],
            prefix_bytes,
        ),
        "softmax (float32) to bf16": (lambda: [scores.softmax(-1).to(dtype) for _ in range(LAYERS)], 0),
    }
    parts = {}
    for name, (fn, nbytes) in pieces.items():
        ms = _ms(fn, repeats)
        parts[name] = {
            "ms_per_step": round(ms, 2),
            "gb_per_s": round(nbytes / ms / 1e6, 1) if nbytes else None,
        }
    return {
        "rows": rows,
        "prefix": prefix_len,
        "own_columns": own,
        "attention_ms_per_step": whole,
        "kernel_ms_per_step": kernel,
        "kernel_speedup": {w: round(whole[w] / kernel[w], 2) for w in own} if kernel else None,
        f"pieces_at_{w}_own_columns": parts,
        "kv_bytes_per_step_at_longest": 2 * own_bytes + 2 * prefix_bytes,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=12)
    p.add_argument("--own", default="50,300,1230", help="own-column counts, comma-separated")
    p.add_argument("--prefix", type=int, default=2700)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="write the figures here as JSON")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    result = measure(a.rows, [int(x) for x in a.own.split(",")], a.prefix, a.repeats)
    result.update(threads=a.threads, load_average_at_start=os.getloadavg())
    print(json.dumps(result, indent=2))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
