"""The composed model's routed LoRA update at decode size, kernel against the masked stacked matmuls.

One decoder layer's seven routed linears of SmolLM2-135M (q, k, v, o, gate, up, down), 16 decode tokens spread over
N = 4 adapters of rank 16: ``decode_kernel.routed_lora_update`` (each token's own adapter only) against the path it
replaced (every adapter's A and B for every token, masked to the token's own block: four ops a linear), timed in
alternation in one process. The ratio kernel / matmuls is the figure to compare across builds and machines.

    python benchmarks/bench_routed_lora.py                       # float32, 1 thread
    python benchmarks/bench_routed_lora.py --dtype bfloat16 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from trace_train.engine import decode_kernel

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--dtype", default="float32")
ap.add_argument("--threads", type=int, default=1)
ns = ap.parse_args()
torch.set_num_threads(ns.threads)
dtype = getattr(torch, ns.dtype)
shapes = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
T, N, r = 16, 4, 16
g = torch.Generator().manual_seed(0)
cases = []
for i, o in shapes:
    x = torch.randn(T, i, generator=g).to(dtype)
    a = (torch.randn(N * r, i, generator=g) * 0.05).to(dtype)
    b = (torch.randn(o, N * r, generator=g) * 0.05).to(dtype)
    bt = b.t().contiguous()
    slots = torch.randint(1, N + 1, (T,), generator=g)
    out = torch.randn(T, o, generator=g).to(dtype)
    own = slots[:, None] == torch.arange(1, N + 1)[None, :]
    mask = own.repeat_interleave(r, dim=1).to(dtype)
    cases.append((x, a, b, bt, slots, out, mask))


def kernel() -> None:
    for x, a, _b, bt, slots, out, _mask in cases:
        decode_kernel.routed_lora_update(x, a, bt, slots, out, r)


def matmuls() -> None:
    for x, a, b, _bt, _slots, out, mask in cases:
        out.add_(F.linear(F.linear(x, a) * mask, b))


if decode_kernel.load() is None:
    raise SystemExit(f"the CPU kernels did not build here: {decode_kernel.error}")
for fn in (kernel, matmuls):  # warm-up
    for _ in range(200):
        fn()
res = {"kernel": [], "matmuls": []}
for _ in range(7):
    for name, fn in (("kernel", kernel), ("matmuls", matmuls)):
        t = time.perf_counter()
        for _ in range(500):
            fn()
        res[name].append((time.perf_counter() - t) / 500 * 1e6)
k, m = statistics.median(res["kernel"]), statistics.median(res["matmuls"])
print(
    f"{ns.dtype}, {ns.threads} thread(s): one layer's 7 updates: kernel {k:.1f} us, masked matmuls {m:.1f} us, "
    f"kernel / matmuls {k / m:.2f} (kernel rounds {[round(v, 1) for v in res['kernel']]})"
)
