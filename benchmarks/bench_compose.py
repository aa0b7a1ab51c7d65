"""Cost of token-level top-1 composition, in one run on one machine (ratios against baselines of the same run).

Forward time of one batch (body only: ``logits_to_keep=1``, the LM head is the same for every variant) for:
  base              the plain model
  lora1_peft        the base with one LoRA through PEFT (unmerged; adapter cast to the model dtype)
  routed_N          the composed model, N adapters, every token routed top-1 to one adapter (worst case:
                    no token stays on the base; the gates are random over slots 1..N)
  routed_N_mixed    the same with the gates spreading tokens over base + N slots (about 1/(N+1) each)
  forced_1          the composed model forced to one adapter (trace's own single-LoRA path)
  dense_N           all N adapters computed for every token and mixed (what routing avoids)
  xlora_top1        peft X-LoRA with top_k_lora=1 (its scaling pass + the real pass), if it runs here

KV-cached decode tokens/s (16 prompts, fixed new-token count) for the single-LoRA policy exactly as trace
serves it (``HFPolicy``: LoRA merged into the weights for generation), the same policy unmerged, and the
composed model routed top-1.

Goals (issue 12): routed_N <= 1.2x lora1_peft at N = 4; composed decode within 1.3x of the single-LoRA
policy. The time split of the routed forward (gates, gather, adapter matmuls, scatter) comes from
torch.profiler regions that ``trace_train.compose.model`` labels when ``PROFILE`` is set.

    python benchmarks/bench_compose.py                        # 16 x 512 bf16 on SmolLM2-135M (issue's sizes)
    python benchmarks/bench_compose.py --batch 4 --seq 256    # what fits a shared 2-core CPU
    python benchmarks/bench_compose.py --tiny                 # smoke test
    python benchmarks/bench_compose.py --decode-only --threads 2 --out benchmarks/results/compose_decode.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import trace_train.compose.model as compose_model
from trace_train.compose.artefact import AdapterSpec, build_composition
from trace_train.engine import engine_for
from trace_train.engine.linears import available as linears_available
from trace_train.models import load_model, resolve_model, save_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy

TARGETS = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
]  # trace train's default


def make_adapters(model_dir: Path, out: Path, n: int, rank: int) -> list[Path]:
    from peft import LoraConfig, get_peft_model

    paths = []
    for i in range(n):
        base, _ = load_model(model_dir)
        torch.manual_seed(100 + i)
        cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS, init_lora_weights=False)
        model = get_peft_model(base, cfg)
        with torch.no_grad():  # realistic magnitudes: B of a trained adapter is small, not N(0, 1)
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.mul_(0.01)
        model.save_pretrained(out / f"a{i}")
        paths.append(out / f"a{i}")
    return paths


def spread_gates(comp, include_base: bool, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for gate in comp.gates:
            gate.proj.weight.copy_(torch.randn(gate.proj.weight.shape, generator=gen))
            gate.proj.bias.zero_()
            if not include_base:
                gate.proj.bias[0] = -1e4


def timed(fn) -> tuple[float, float]:
    """Wall seconds and CPU seconds of this process (all threads) for one call.

    On a CPU shared with other jobs the wall time mostly measures the neighbours; the process's CPU time
    measures the work, so the ratios are computed on it (with ``--threads 1`` no thread spins idle).
    """
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tiny", action="store_true", help="tiny random model (smoke test)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed rounds (variants interleaved), after 1 warm-up"
    )
    ap.add_argument("--decode-batch", type=int, default=16)
    ap.add_argument("--decode-prompt", type=int, default=64)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--no-xlora", action="store_true")
    ap.add_argument("--decode-only", action="store_true", help="only the KV-cached decode figures")
    ap.add_argument("--threads", type=int, default=1, help="1: CPU time = work (no idle spinning threads)")
    ap.add_argument("--out", default="benchmarks/results/bench_compose.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    tmp = Path(tempfile.mkdtemp(prefix="bench-compose-"))
    model_dir = save_tiny_model(tmp / "tiny") if a.tiny else resolve_model(a.model)
    paths = make_adapters(model_dir, tmp, a.adapters, a.rank)
    vocab = load_model(model_dir)[0].config.vocab_size
    x = torch.randint(10, vocab - 10, (a.batch, a.seq), generator=torch.Generator().manual_seed(0))

    # --- the models -----------------------------------------------------------------------------------
    from peft import PeftModel

    base, tokenizer = load_model(model_dir, dtype=dtype)
    base.eval()
    b1, _ = load_model(model_dir, dtype=dtype)
    lora1 = PeftModel.from_pretrained(b1, str(paths[0])).to(dtype).eval()
    bc, _ = load_model(model_dir, dtype=dtype)
    comp = build_composition(bc, [AdapterSpec(f"cap{i}", str(p)) for i, p in enumerate(paths)])
    comp.model.eval()
    if a.decode_only:
        decode = bench_decode(a, model_dir, paths[0], comp, tokenizer, dtype, vocab)
        result = {
            "model": "tiny-random" if a.tiny else a.model,
            "dtype": a.dtype,
            "adapters": a.adapters,
            "rank": a.rank,
            "threads": a.threads,
            "repeats": a.repeats,
            "decode": decode,
            "goals": {
                "composed decode slowdown vs single-LoRA policy <= 1.3": decode["slowdown_vs_lora1_merged"],
                "same, on the cached rollout engine": decode["cached_engine_slowdown_vs_lora1_merged"],
            },
        }
        print_decode(result)
        write_result(result, Path(a.out))
        return

    def fwd(model):
        return lambda: model(input_ids=x, logits_to_keep=1, use_cache=False)

    def routed(include_base: bool):
        def run():
            spread_gates(comp, include_base)
            comp.model(input_ids=x, logits_to_keep=1, use_cache=False)

        return run

    def forced():
        with comp.forced(1):
            comp.model(input_ids=x, logits_to_keep=1, use_cache=False)

    def dense():
        spread_gates(comp, include_base=False)
        with comp.dense():
            comp.model(input_ids=x, logits_to_keep=1, use_cache=False)

    n = a.adapters
    variants: dict[str, Any] = {
        "base": fwd(base),
        "lora1_peft": fwd(lora1),
        f"routed_{n}": routed(False),
        f"routed_{n}_mixed": routed(True),
        "forced_1": forced,
        f"dense_{n}": dense,
    }
    notes: dict[str, str] = {}
    if not a.no_xlora:
        try:
            variants["xlora_top1"] = fwd(build_xlora(model_dir, paths, dtype))
        except Exception as e:  # noqa: BLE001 - report why, keep the rest of the benchmark
            notes["xlora_top1"] = f"did not run: {type(e).__name__}: {e}"[:300]

    # --- forward timings (interleaved rounds, median) ---------------------------------------------------
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    with torch.no_grad():
        for k, fn in list(variants.items()):
            try:
                print(f"  warm-up {k}", flush=True)
                fn()  # warm-up (and a smoke test of the variant)
            except Exception as e:  # noqa: BLE001
                notes[k] = f"did not run: {type(e).__name__}: {e}"[:300]
                del variants[k], times[k], cpu[k]
        for r in range(a.repeats):
            for k, fn in variants.items():
                wall, used = timed(fn)
                times[k].append(wall)
                cpu[k].append(used)
                print(f"  round {r + 1} {k}: {wall:.3f} s wall, {used:.3f} s CPU", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    forward = {
        k: {
            "cpu_seconds_median": cmed[k],
            "cpu_seconds": cpu[k],
            "wall_seconds_median": med[k],
            "wall_seconds": times[k],
            "vs_lora1_peft": cmed[k] / cmed["lora1_peft"],
            "vs_base": cmed[k] / cmed["base"],
            "wall_vs_lora1_peft": med[k] / med["lora1_peft"],
        }
        for k in med
    }

    # --- time split of the routed forward ------------------------------------------------------------------
    split = profile_split(comp, x)

    # --- KV-cached decode ----------------------------------------------------------------------------------
    decode = bench_decode(a, model_dir, paths[0], comp, tokenizer, dtype, vocab)

    result = {
        "model": "tiny-random" if a.tiny else a.model,
        "dtype": a.dtype,
        "batch": a.batch,
        "seq": a.seq,
        "adapters": n,
        "rank": a.rank,
        "targets": TARGETS,
        "threads": a.threads,
        "repeats": a.repeats,
        "forward": forward,
        "routed_time_split": split,
        "decode": decode,
        "notes": notes,
        "goals": {
            f"routed_{n}/lora1_peft <= 1.2": forward[f"routed_{n}"]["vs_lora1_peft"],
            "composed decode slowdown vs single-LoRA policy <= 1.3": decode["slowdown_vs_lora1_merged"],
            "same, on the cached rollout engine": decode["cached_engine_slowdown_vs_lora1_merged"],
        },
    }
    print_report(result)
    write_result(result, Path(a.out))


def write_result(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {out}")


def build_xlora(model_dir: Path, paths: list[Path], dtype: torch.dtype):
    from peft import XLoraConfig, get_peft_model

    base, _ = load_model(model_dir, dtype=dtype)
    cfg = XLoraConfig(
        task_type="CAUSAL_LM",
        hidden_size=base.config.hidden_size,
        adapters={f"{i}": str(p) for i, p in enumerate(paths)},
        top_k_lora=1,
        xlora_depth=1,
    )
    base.config.use_cache = False
    return get_peft_model(base, cfg).to(dtype).eval()


def profile_split(comp, x: torch.Tensor) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    spread_gates(comp, include_base=False)
    compose_model.PROFILE = True
    try:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            comp.model(input_ids=x, logits_to_keep=1, use_cache=False)
            total = time.perf_counter() - t0
    finally:
        compose_model.PROFILE = False
    regions = {e.key: e.cpu_time_total / 1e6 for e in prof.key_averages() if e.key.startswith("compose.")}
    split = {"forward_seconds_profiled": total}
    for name in ("compose.gate", "compose.gather", "compose.lora_matmul", "compose.scatter"):
        split[name.removeprefix("compose.") + "_seconds"] = regions.get(name, 0.0)
        split[name.removeprefix("compose.") + "_share"] = regions.get(name, 0.0) / total
    return split


def bench_decode(a, model_dir, adapter0, comp, tokenizer, dtype, vocab) -> dict[str, Any]:
    from peft import PeftModel

    gen = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(10, vocab - 10, (a.decode_prompt,), generator=gen).tolist()
        for _ in range(a.decode_batch)
    ]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=a.decode_tokens, min_new_tokens=a.decode_tokens)
    b1, _ = load_model(model_dir, dtype=dtype)
    lora = PeftModel.from_pretrained(b1, str(adapter0)).to(dtype)
    policies = {
        "lora1_merged": HFPolicy(lora, tokenizer, name="lora1", merge_for_generation=True),
        "lora1_unmerged": HFPolicy(lora, tokenizer, name="lora1", merge_for_generation=False),
        "composed_routed": HFPolicy(comp.model, tokenizer, name="composed"),
    }
    spread_gates(comp, include_base=False)
    tps: dict[str, list[float]] = {k: [] for k in policies}  # tokens per CPU second (see timed)
    wall_tps: dict[str, list[float]] = {k: [] for k in policies}
    # the cached engine with its decode linears routed by row count (as trace runs it) and with torch's default
    # kernels (``_default``): the same comparison before and after that change, in the same run
    engine_tps: dict[str, list[float]] = {
        "lora1_merged": [],
        "composed_routed": [],
        "lora1_merged_default": [],
        "composed_routed_default": [],
    }
    for p in policies.values():
        p.generate_ids(prompts[:2], SamplingConfig(temperature=0.0, max_new_tokens=2))  # warm-up
    for _ in range(max(1, a.repeats - 1)):
        for k, p in policies.items():
            box: list = []
            wall, used = timed(lambda p=p, box=box: box.append(p.generate_ids(prompts, sampling)))
            n_tok = sum(len(o) for o in box[0])
            tps[k].append(n_tok / used)
            wall_tps[k].append(n_tok / wall)
            print(f"  decode {k}: {n_tok / used:.1f} tokens/CPU-s", flush=True)
        for k in engine_tps:  # the rollout engine trace uses (KV cache per conversation, shared prefix)
            engine = engine_for(policies[k.removesuffix("_default")])
            engine.linears.enabled = linears_available() and not k.endswith("_default")
            session = engine.session(sampling)
            box = []
            _, used = timed(lambda s=session, box=box: box.append(s(prompts, list(range(len(prompts))), 0)))
            engine_tps[k].append(sum(len(o) for o in box[0][0]) / used)
    med = {k: statistics.median(v) for k, v in tps.items()}
    engine_med = {k: statistics.median(v) for k, v in engine_tps.items()}
    return {
        "tokens_per_cpu_s": med,
        "runs": tps,
        "tokens_per_wall_s": {k: statistics.median(v) for k, v in wall_tps.items()},
        "batch": a.decode_batch,
        "prompt_tokens": a.decode_prompt,
        "new_tokens": a.decode_tokens,
        "slowdown_vs_lora1_merged": med["lora1_merged"] / med["composed_routed"],
        "slowdown_vs_lora1_unmerged": med["lora1_unmerged"] / med["composed_routed"],
        "cached_engine_tokens_per_cpu_s": engine_med,
        "cached_engine_slowdown_vs_lora1_merged": engine_med["lora1_merged"] / engine_med["composed_routed"],
        "cached_engine_default_linears_slowdown_vs_lora1_merged": engine_med["lora1_merged_default"]
        / engine_med["composed_routed_default"],
    }


def print_report(r: dict[str, Any]) -> None:
    print(
        f"\nforward {r['batch']} x {r['seq']} {r['dtype']} ({r['model']}, N={r['adapters']}, r={r['rank']}, "
        f"{r['threads']} threads, median of {r['repeats']}; ratios on CPU time)"
    )
    for k, v in r["forward"].items():
        print(
            f"  {k:18s} {v['cpu_seconds_median']:8.3f} CPU-s ({v['wall_seconds_median']:7.3f} wall)   "
            f"x{v['vs_lora1_peft']:.2f} vs lora1_peft   x{v['vs_base']:.2f} vs base"
        )
    for k, v in r["notes"].items():
        print(f"  {k:18s} {v}")
    s = r["routed_time_split"]
    print(f"\nrouted forward time split ({s['forward_seconds_profiled']:.3f} s profiled):")
    for part in ("gate", "gather", "lora_matmul", "scatter"):
        print(f"  {part:12s} {s[part + '_seconds']:7.3f} s  {100 * s[part + '_share']:5.1f}%")
    print_decode(r)


def print_decode(r: dict[str, Any]) -> None:
    d = r["decode"]
    print(f"\nKV-cached decode ({d['batch']} prompts x {d['prompt_tokens']} tokens, {d['new_tokens']} new):")
    for k, v in d["tokens_per_cpu_s"].items():
        print(f"  {k:16s} {v:8.1f} tokens/CPU-s  ({d['tokens_per_wall_s'][k]:.1f} tokens/wall-s)")
    print(
        f"  composed slowdown: x{d['slowdown_vs_lora1_merged']:.2f} vs merged single-LoRA policy, "
        f"x{d['slowdown_vs_lora1_unmerged']:.2f} vs unmerged"
    )
    for k, v in d["cached_engine_tokens_per_cpu_s"].items():
        print(f"  cached engine {k:16s} {v:8.1f} tokens/CPU-s")
    print(
        f"  cached engine slowdown: x{d['cached_engine_slowdown_vs_lora1_merged']:.2f} vs merged single-LoRA "
        f"(x{d['cached_engine_default_linears_slowdown_vs_lora1_merged']:.2f} with torch's default linears)"
    )
    print("\ngoals:", json.dumps(r["goals"], indent=2))


if __name__ == "__main__":
    main()
