"""The cached engine against the simple one, every figure measured side by side in one run (issue 9).

    python benchmarks/bench_engine.py                         # the issue's sizes (hours on 2 busy cores)
    python benchmarks/bench_engine.py --preset reduced        # the reduced sizes of the committed results
    python benchmarks/bench_engine.py --figures 1,5,6 --set equiv_episodes=8 --set equiv_turns=3
    tox -e bench -- --preset reduced

Figures (each side runs in its own subprocess, one after the other, so each reports its own peak RSS):

1. ``evaluate`` on retail test episodes (difficulty 2, greedy, ``--dtype``): wall time simple / cached, and in float32 the
   share of episodes whose token ids are identical under both engines (same seeds);
2. one GRPO step on retail (seeds x rollouts), ``--engine simple`` vs ``--engine cached``: seconds and peak RSS;
3. SFT on retail oracle episodes: trained tokens/s, padded (simple) vs shared prefix + packed (cached), and the
   FLOPs per episode of each path counted from the batches' token lengths (``flop_model``: the ratio the
   arithmetic allows, since every own token must still attend to the whole prefix);
4. the long-prompt GRPO step against TRL (SmolLM2 fp32, LoRA r16, 4 prompts x 8 completions x 64 tokens,
   ~355-token prompts): trace s/step / TRL s/step and peak RSS per side (TRL last, skipped without ``trl``);
5. roofline: the engine's prefill and decode tokens/s as achieved FLOP/s against this machine's measured matmul
   peak in the run's dtype (``--dtype auto``: bf16 where the CPU computes it natively, else float32), and the
   cached evaluation's full account (``trace_train/roofline.py``: per phase FLOPs, bytes, bound, share of bound);
6. the compact tool rendering: prompt tokens of a retail episode, JSON vs compact;
7. its effect on learning: SFT warm starts on the same retail oracle episodes rendered with JSON and with compact
   tools, each evaluated on the same test tasks (success, paired McNemar test);
8. continuous batching: retail test episodes on the cached engine, one batch after another vs streamed (a finished
   episode's slot starts the next at once): wall time and the share of identical trajectories;
9. finished rows leaving the decode steps: the streamed run of figure 8 with every row kept to the end of each
   turn vs rows dropped as they finish (``CachedEngine.min_idle_fraction``): decode seconds, wall time, share
   of identical trajectories;
10. concurrency: the same retail test episodes streamed with each of ``concurrency_batches`` conversations at once
   (the demo's ``evaluation.batch_size`` is 40): wall and CPU seconds per episode, peak RSS, and the share of
   trajectories identical to the first batch size's (greedy; bf16 kernels may round differently at another
   batch). Pass the agent being evaluated (``--model runs/demo/01-base/sft-0/merged``): episode lengths decide it.

Reduced sizes are written into the results (``sizes``), so ratios are never read without them. Every side
reports wall seconds and CPU seconds of its process: on a machine shared with other jobs the CPU-time ratio
is the steadier one (the load average at the start is recorded too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PRESETS: dict[str, dict[str, Any]] = {
    "issue": dict(
        ab_sft_episodes=32,
        ab_eval_episodes=64,
        ab_difficulty=1,
        eval_episodes=32,
        eval_turns=10,
        eval_tokens=96,
        equiv_episodes=32,
        equiv_turns=10,
        equiv_tokens=96,
        grpo_seeds=4,
        grpo_group=4,
        grpo_micro_simple=1,
        grpo_micro_cached=4,
        grpo_turns=10,
        grpo_tokens=96,
        sft_episodes=32,
        sft_batch=8,  # one optimiser step per 8 episodes: the prefix is computed once per batch
        sft_micro_tokens=2048,  # both sides (fp32 cached: 8,192 OOM-killed at 24 GB, 4,096 peaked at 21.7 GB)
        stream_episodes=64,
        stream_batch=16,
        trl_prompts=4,
        trl_group=8,
        trl_tokens=64,
        trl_micro=[8, 32],
        # the demo's evaluation: 128 retail-v2 test tasks at difficulty 1, 12 turns x 192 tokens
        concurrency_episodes=128,
        concurrency_batches=[40, 128],
        concurrency_difficulty=1,
        concurrency_turns=12,
        concurrency_tokens=192,
    ),
    "smoke": dict(
        ab_sft_episodes=2,
        ab_eval_episodes=2,
        ab_difficulty=1,
        eval_episodes=2,
        eval_turns=2,
        eval_tokens=8,
        equiv_episodes=2,
        equiv_turns=2,
        equiv_tokens=8,
        grpo_seeds=1,
        grpo_group=2,
        grpo_micro_simple=1,
        grpo_micro_cached=2,
        grpo_turns=2,
        grpo_tokens=8,
        sft_episodes=2,
        sft_batch=2,
        sft_micro_tokens=2048,
        stream_episodes=3,
        stream_batch=2,
        trl_prompts=2,
        trl_group=2,
        trl_tokens=4,
        trl_micro=[4],
        concurrency_episodes=4,
        concurrency_batches=[2, 4],
        concurrency_difficulty=1,
        concurrency_turns=2,
        concurrency_tokens=8,
    ),
    "reduced": dict(  # what 2 cores shared with 7 other jobs allowed (the committed results)
        ab_sft_episodes=8,
        ab_eval_episodes=16,
        ab_difficulty=1,
        eval_episodes=4,
        eval_turns=3,
        eval_tokens=32,
        equiv_episodes=2,
        equiv_turns=3,
        equiv_tokens=32,
        grpo_seeds=1,
        grpo_group=2,
        grpo_micro_simple=2,
        grpo_micro_cached=2,
        grpo_turns=2,
        grpo_tokens=32,
        sft_episodes=2,
        sft_batch=2,
        sft_micro_tokens=2048,
        stream_episodes=16,
        stream_batch=4,
        trl_prompts=4,
        trl_group=8,
        trl_tokens=64,
        trl_micro=[32],
        concurrency_episodes=32,
        concurrency_batches=[8, 32],
        concurrency_difficulty=1,
        concurrency_turns=12,
        concurrency_tokens=192,
    ),
}


# ----- sides (each runs in a fresh process) --------------------------------------------------------------------
def _rss() -> float:
    from trace_train.metrics import peak_rss_mb

    return peak_rss_mb()


def side_eval(engine: str, dtype: str, episodes: int, turns: int, tokens: int, model: str) -> dict[str, Any]:
    from trace_train.config import EvalSettings
    from trace_train.evaluate import evaluate
    from trace_train.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(model, dtype=dtype).configure(engine=engine)
    t0, c0 = time.perf_counter(), time.process_time()
    res = evaluate(
        policy,
        "trace/retail-v2",
        EvalSettings(episodes=episodes, max_turns=turns, max_new_tokens=tokens, batch_size=8),
        split="test",
        difficulty=2,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {
        "engine": engine,
        "dtype": dtype,
        "seconds": wall,
        "cpu_seconds": cpu,
        "episodes": episodes,
        "generated_tokens": sum(r["generated_tokens"] for r in res.trajectories),
        "turns": sum(r["turns"] for r in res.trajectories),
        "success_rate": res.success_rate,
        "peak_rss_mb": _rss(),
        "roofline": res.roofline,  # trace_train/roofline.py: per phase against this machine's measured peak
    }
    if engine == "cached":
        st = policy._cached_engine.stats
        out["engine_stats"] = dict(st.__dict__)
        out["n_params"] = sum(p.numel() for p in policy.model.parameters())
    return out


def side_equiv(dtype: str, episodes: int, turns: int, tokens: int, model: str) -> dict[str, Any]:
    """Both engines on the same seeds (float32): which episodes have identical token ids."""
    from trace_gym.registration import make_env
    from trace_gym.seeds import reset_seed
    from trace_train.policies.base import SamplingConfig
    from trace_train.policies.hf import HFPolicy
    from trace_train.rollout import ResetSpec, collect

    policy = HFPolicy.from_pretrained(model, dtype=dtype)
    envs = [make_env("trace/retail-v2") for _ in range(episodes)]
    specs = [
        ResetSpec(seed=reset_seed("test", i, envs[0]), group=i, split="test", difficulty=2)
        for i in range(episodes)
    ]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=tokens)
    runs = {e: collect(policy, envs, specs, sampling, turns, engine=e) for e in ("simple", "cached")}
    same = [a.token_ids == b.token_ids for a, b in zip(runs["simple"], runs["cached"], strict=True)]
    first_diff = []
    for a, b in zip(runs["simple"], runs["cached"], strict=True):
        n = next((j for j, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=False)) if x != y), None)
        first_diff.append(n)
    return {
        "dtype": dtype,
        "episodes": episodes,
        "identical": sum(same),
        "identical_share": sum(same) / episodes,
        "first_difference_at": first_diff,
        "peak_rss_mb": _rss(),
    }


def side_grpo(
    engine: str, seeds: int, group: int, turns: int, tokens: int, model: str, dtype: str, micro: int
) -> dict:
    from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer

    args = GRPOArgs(
        env_id="trace/retail-v2",
        model=model,
        out=tempfile.mkdtemp(prefix=f"bench-grpo-{engine}-"),
        steps=1,
        groups_per_step=seeds,
        group_size=group,
        max_new_tokens=tokens,
        max_turns=turns,
        difficulty=2,
        micro_batch_size=micro,
        save_every=0,
        tensorboard=False,
        progress=False,
        dtype=dtype,
        engine=engine,
    )
    trainer = GRPOTrainer(args)
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = trainer.train()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    keep = (
        "gen_seconds",
        "train_seconds",
        "env_seconds",
        "reward_mean",
        "train_tokens_per_s",
        "zero_advantage_batch",
    )
    return {
        "engine": engine,
        "micro_batch_size": micro,
        "seconds": wall,
        "cpu_seconds": cpu,
        **{k: metrics.get(k) for k in keep},
        "peak_rss_mb": _rss(),
    }


def side_sft(
    engine: str, episodes: int, batch: int, micro_tokens: int, model: str, dtype: str
) -> dict[str, Any]:
    from trace_train.config import SFTArgs
    from trace_train.sft import run_sft

    args = SFTArgs(
        env_id="trace/retail-v2",
        model=model,
        out=tempfile.mkdtemp(prefix=f"bench-sft-{engine}-"),
        episodes=episodes,
        epochs=1,
        batch_size=batch,
        difficulty=2,
        max_turns=30,
        dtype=dtype,
        engine=engine,
        micro_batch_tokens=micro_tokens,
    )
    c0 = time.process_time()
    s = run_sft(args)
    s["cpu_seconds_total"] = time.process_time() - c0
    keep = (
        "trajectories",
        "steps",
        "train_seconds",
        "tokens_per_s",
        "agent_tokens_per_s",
        "train_cpu_seconds",
        "tokens_per_cpu_s",
        "final_loss",
        "cpu_seconds_total",
    )
    return {"engine": engine, **{k: s[k] for k in keep}, "peak_rss_mb": _rss()}


def side_sft_flops(episodes: int, batch: int, model: str) -> dict[str, Any]:
    """The arithmetic of figure 3's SFT batches, counted from their token lengths (no training): FLOPs per
    episode of the padded path, of the cached path before ``CascadeAttention`` (every own query against the
    concatenated prefix + own keys, masked) and of the least any exact shared-prefix computation needs (what the
    cached path does now for a row holding one sequence), so the measured tokens/s ratio can be read against
    the ratio the work allows.

    Per layer: a token costs 2 x (its linear weights) FLOPs forward; a (query, key) pair of attention
    4 x heads x head_dim. Backward with frozen base weights (LoRA) is ~1x forward for the linear layers
    (input gradients only) and ~2.5x for flash attention (recomputed scores, dQ, dK, dV). The LM head costs
    2 x hidden x vocab per predicted position, forward and backward alike."""
    import random

    from trace_gym.registration import make_env
    from trace_gym.seeds import train_reset_seed
    from trace_train.config import SFTArgs
    from trace_train.grpo.logprobs import shared_prefix_length
    from trace_train.policies.hf import HFPolicy
    from trace_train.sft import oracle_trajectories

    args = SFTArgs(env_id="trace/retail-v2", model=model, out="", episodes=episodes, batch_size=batch)
    policy = HFPolicy.from_pretrained(model, dtype="float32")
    probe = make_env(args.env_id)
    seeds = [train_reset_seed(args.seed_offset + i, probe) for i in range(episodes)]
    probe.close()
    trajs, _ = oracle_trajectories(policy, args.env_id, seeds, 30, 2)
    data = [t.training_ids() for t in trajs]
    c = policy.model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    q, kv = c.num_attention_heads * head_dim, c.num_key_value_heads * head_dim
    linear = 2 * (c.hidden_size * (2 * q + 2 * kv) + 3 * c.hidden_size * c.intermediate_size)  # per token
    pair = 4 * c.num_attention_heads * head_dim  # per (query, key) pair
    layers, head = c.num_hidden_layers, 2 * c.hidden_size * c.vocab_size

    def body(tokens: float, pairs: float) -> float:
        return layers * (2 * linear * tokens + 3.5 * pair * pairs)

    order = list(range(len(data)))
    random.Random(args.seed).shuffle(order)
    padded = concatenated = least = 0.0
    prefixes, owns = [], []
    for b in range(0, len(order), batch):
        items = [data[i] for i in order[b : b + batch]]
        p = shared_prefix_length([x for x, _ in items], [m for _, m in items])
        prefixes.append(p)
        concatenated += body(p, p * p / 2)  # the prefix predicts no agent token
        least += body(p, p * p / 2)
        for ids, mask in items:
            n, o = len(ids), len(ids) - p
            owns.append(o)
            first = next(j for j, x in enumerate(mask) if x)
            agent = sum(mask[1:])
            padded += body(n, n * n / 2) + 2 * head * (n - first)  # logits_to_keep from the first agent token
            concatenated += body(o, o * (p + o)) + 2 * head * agent  # masked: every own query x all keys
            least += body(o, o * p + o * o / 2) + 2 * head * agent
    n = len(data)
    return {
        "episodes": n,
        "tokens_mean": sum(len(x) for x, _ in data) / n,
        "prefix_tokens": prefixes,
        "own_tokens_min_mean_max": [min(owns), sum(owns) / n, max(owns)],
        "gflop_per_episode": {
            "padded": padded / n / 1e9,
            "cached_concatenated": concatenated / n / 1e9,
            "cached_least": least / n / 1e9,
        },
        "ratio_concatenated": padded / concatenated,
        "ratio_least": padded / least,
    }


def side_trace_long(
    engine: str, micro: int, prompts: int, group: int, tokens: int, model: str
) -> dict[str, Any]:
    from bench_rollout_and_grpo import bench_trace_grpo

    times = bench_trace_grpo(
        model,
        steps=1,
        groups=prompts,
        g=group,
        comp=tokens,
        rank=16,
        dtype="float32",
        env_id="bench/longprompt-v0",
        micro_batch=micro,
        engine=engine,
    )
    m = bench_trace_grpo.last_metrics
    return {
        "engine": engine,
        "micro_batch": micro,
        "s_per_step": times[-1],
        "gen_seconds": m.get("gen_seconds"),
        "train_seconds": m.get("train_seconds"),
        "peak_rss_mb": _rss(),
    }


def side_trl_long(prompts: int, group: int, tokens: int, model: str) -> dict[str, Any]:
    from bench_rollout_and_grpo import LONG_PROMPTS, bench_trl_grpo

    times = bench_trl_grpo(
        model, steps=1, groups=prompts, g=group, comp=tokens, rank=16, dtype="float32", prompts=LONG_PROMPTS
    )
    return {"s_per_step": times[-1], "peak_rss_mb": _rss()}


def side_matmul_peak() -> dict[str, Any]:
    import torch

    out = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        a = torch.randn(2048, 2048, dtype=dtype)
        b = torch.randn(2048, 2048, dtype=dtype)
        a @ b
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        out[name] = 2 * 2048**3 / best
    return {"matmul_flops_per_s": out}


def side_tool_tokens(model: str) -> dict[str, Any]:
    """Prompt tokens of a retail episode's first turn with the JSON and the compact tool rendering."""
    from trace_gym.registration import make_env, tools_of
    from trace_gym.seeds import reset_seed
    from trace_train.models import load_model
    from trace_train.policies.base import as_conversation
    from trace_train.policies.hf import HFPolicy

    base, tok = load_model(model)
    env = make_env("trace/retail-v2")
    obs, info = env.reset(seed=reset_seed("test", 0, env), options={"split": "test", "difficulty": 2})
    out = {}
    for fmt in ("json", "compact"):
        policy = HFPolicy(base, tok).configure(tool_format=fmt)
        head, rest = policy.renderer.prompt_segments(as_conversation(obs), tools_of(env, info))
        out[fmt] = {"system_tokens": len(head), "prompt_tokens": len(head) + len(rest)}
    out["system_ratio_json_over_compact"] = out["json"]["system_tokens"] / out["compact"]["system_tokens"]
    return out


def side_tool_ab(
    fmt: str, episodes: int, eval_episodes: int, difficulty: int, model: str, dtype: str
) -> dict[str, Any]:
    """SFT warm start with one tool rendering, then greedy evaluation on retail test tasks with the same one."""
    from trace_train.config import EvalSettings, SFTArgs
    from trace_train.evaluate import evaluate
    from trace_train.policies.hf import HFPolicy
    from trace_train.sft import run_sft

    out = tempfile.mkdtemp(prefix=f"bench-tools-{fmt}-")
    t0 = time.perf_counter()
    summary = run_sft(
        SFTArgs(
            env_id="trace/retail-v2",
            model=model,
            out=out,
            episodes=episodes,
            epochs=2,
            batch_size=4,
            difficulty=difficulty,
            max_turns=30,
            dtype=dtype,
            tool_format=fmt,
            merge=True,
        )
    )
    sft_seconds = time.perf_counter() - t0
    policy = HFPolicy.from_pretrained(summary["merged"], dtype=dtype).configure(tool_format=fmt)
    res = evaluate(
        policy,
        "trace/retail-v2",
        EvalSettings(episodes=eval_episodes, max_turns=10, max_new_tokens=96, batch_size=16),
        split="test",
        difficulty=difficulty,
    )
    episodes_ = res.trajectories
    components: dict[str, list[float]] = {}
    for r in episodes_:
        for name, value in (r.get("reward_components") or {}).items():
            components.setdefault(name, []).append(float(value >= 1.0))
    return {
        "tool_format": fmt,
        # what the agent got right even where it failed: each verifier component's pass rate, malformed actions
        "component_pass_rates": {k: sum(v) / len(v) for k, v in sorted(components.items())},
        "episodes_with_components": max(
            (len(v) for v in components.values()), default=0
        ),  # those the env ended
        "invalid_actions_mean": sum(r["invalid_actions"] for r in episodes_) / max(len(episodes_), 1),
        "turns_mean": sum(r["turns"] for r in episodes_) / max(len(episodes_), 1),
        "sft_episodes": summary["trajectories"],
        "sft_final_loss": summary["final_loss"],
        "sft_seconds": sft_seconds,
        "success_rate": res.success_rate,
        "success_ci": res.success_ci,
        "successes": [bool(r["success"]) for r in res.trajectories],
        "seeds": [r["seed"] for r in res.trajectories],
        "peak_rss_mb": _rss(),
    }


def side_batching(
    mode: str,
    episodes: int,
    batch: int,
    turns: int,
    tokens: int,
    model: str,
    dtype: str,
    min_idle: float = 0.25,
    difficulty: int = 2,
) -> dict[str, Any]:
    """Retail test episodes on the cached engine (greedy): one batch after another (``chunked``, what
    ``trace evaluate`` did) or continuously batched (``stream``: a finished episode's slot starts the next).
    ``min_idle``: the engine's ``min_idle_fraction`` (above 1: finished rows stay in the decode steps)."""
    from trace_gym.registration import make_env
    from trace_gym.seeds import reset_seed
    from trace_train.engine import engine_for
    from trace_train.policies.base import SamplingConfig
    from trace_train.policies.hf import HFPolicy
    from trace_train.rollout import ResetSpec, collect, stream_collect

    policy = HFPolicy.from_pretrained(model, dtype=dtype)
    engine_for(policy).min_idle_fraction = min_idle
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=tokens)
    envs = [make_env("trace/retail-v2") for _ in range(batch)]
    specs = [
        ResetSpec(seed=reset_seed("test", i, envs[0]), group=i, split="test", difficulty=difficulty)
        for i in range(episodes)
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "stream":
        trajs = stream_collect(policy, envs, specs, sampling, turns, max_total_tokens=32768)
    else:
        trajs = []
        for b in range(0, episodes, batch):
            chunk = specs[b : b + batch]
            trajs += collect(policy, envs[: len(chunk)], chunk, sampling, turns, max_total_tokens=32768)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "mode": mode,
        "min_idle_fraction": min_idle,
        "seconds": wall,
        "cpu_seconds": cpu,
        "episodes": episodes,
        "batch": batch,
        "turns": sum(t.turns for t in trajs),
        "generated_tokens": sum(t.generated_tokens for t in trajs),
        "success_rate": sum(t.reward >= 1.0 for t in trajs) / len(trajs),
        "token_ids_digest": [hash(tuple(t.token_ids)) % 10**9 for t in trajs],
        "engine_stats": dict(policy._cached_engine.stats.__dict__),
        "peak_rss_mb": _rss(),
    }


SIDES = {
    "tool_ab": side_tool_ab,
    "tool_tokens": side_tool_tokens,
    "eval": side_eval,
    "equiv": side_equiv,
    "grpo": side_grpo,
    "sft": side_sft,
    "sft_flops": side_sft_flops,
    "trace_long": side_trace_long,
    "trl_long": side_trl_long,
    "matmul": side_matmul_peak,
    "batching": side_batching,
}


def run_side(name: str, timeout: float, **kw) -> dict[str, Any]:
    """One side in a fresh process (its own peak RSS); a failure is recorded, not fatal."""
    cmd = [sys.executable, __file__, "--side", name, "--side-args", json.dumps(kw)]
    print(f"  {name} {kw} ...", flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", **kw}
    if p.returncode != 0:
        return {
            "error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}",
            **kw,
        }
    res = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"    -> {json.dumps(res)[:300]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return res


def _identical_share(a: dict, b: dict) -> float | None:
    """The share of episodes whose token ids are the same on two ``batching`` sides (their digests are
    removed from the results); None when a side failed."""
    if "error" in a or "error" in b:
        return None
    pairs = zip(a.pop("token_ids_digest"), b.pop("token_ids_digest"), strict=True)
    return sum(x == y for x, y in pairs) / a["episodes"]


def _ratio(a: dict, b: dict, key: str) -> float | None:
    if "error" in a or "error" in b or not a.get(key) or not b.get(key):
        return None
    return a[key] / b[key]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="issue")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tiny", action="store_true", help="a tiny random model (smoke test of the script)")
    p.add_argument("--figures", default="1,2,3,4,5,6,7,8,9,10", help="comma-separated figure numbers to run")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per side")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="weights dtype of figures 1-3 and 5 (auto: bf16 only where this CPU computes it natively)",
    )
    p.add_argument("--json-out", default=str(HERE / "results" / "engine.json"))
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=N",
        help="override one size of the preset (e.g. --set equiv_episodes=8); repeatable",
    )
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--side-args", help=argparse.SUPPRESS)
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    if a.side:
        import torch

        torch.set_num_threads(a.threads)
        print(json.dumps(SIDES[a.side](**json.loads(a.side_args))))
        return
    z = dict(PRESETS[a.preset])
    for item in a.set:
        key, _, value = item.partition("=")
        if key not in z or not value:
            p.error(f"--set {item!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(z))}")
        z[key] = json.loads(value)
    if a.tiny:
        from trace_train.models import save_tiny_model

        a.model = str(save_tiny_model(Path(tempfile.mkdtemp()) / "tiny"))
    figures = {int(f) for f in a.figures.split(",")}
    import torch

    from trace_train.models import resolve_dtype

    torch.set_num_threads(a.threads)
    dtype = str(resolve_dtype(a.dtype)).removeprefix("torch.")
    report: dict[str, Any] = {
        "dtype": dtype,
        "preset": a.preset,
        "sizes": z,
        "model": a.model,
        "threads": a.threads,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "load_average_at_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    t = a.timeout
    if 1 in figures or 5 in figures:
        print(f"1. evaluate on retail ({dtype}), simple vs cached", flush=True)
        kw = dict(episodes=z["eval_episodes"], turns=z["eval_turns"], tokens=z["eval_tokens"], model=a.model)
        s = run_side("eval", t, engine="simple", dtype=dtype, **kw)
        c = run_side("eval", t, engine="cached", dtype=dtype, **kw)
        eq_kw = dict(episodes=z["equiv_episodes"], turns=z["equiv_turns"], tokens=z["equiv_tokens"])
        eq = run_side("equiv", t, **{**kw, **eq_kw}, dtype="float32")
        report["evaluate"] = {
            "simple": s,
            "cached": c,
            "speedup": _ratio(s, c, "seconds"),
            "cpu_speedup": _ratio(s, c, "cpu_seconds"),
            "greedy_fp32": eq,
        }
        if "error" not in c:
            report["evaluate"]["projected_200_episodes_min"] = c["seconds"] / c["episodes"] * 200 / 60
    if 2 in figures:
        print("2. one GRPO step on retail, simple vs cached", flush=True)
        kw = dict(
            seeds=z["grpo_seeds"],
            group=z["grpo_group"],
            turns=z["grpo_turns"],
            tokens=z["grpo_tokens"],
            model=a.model,
        )
        # each side at the largest micro-batch that fits 24 GB: a padded retail sequence (~5k tokens) takes ~6 GB
        # of activations in bf16, so the simple trainer goes one at a time; the cached one shares the prefix
        s = run_side("grpo", t, engine="simple", dtype=dtype, micro=z["grpo_micro_simple"], **kw)
        c = run_side("grpo", t, engine="cached", dtype=dtype, micro=z["grpo_micro_cached"], **kw)
        report["grpo_step"] = {
            "simple": s,
            "cached": c,
            "speedup": _ratio(s, c, "seconds"),
            "cpu_speedup": _ratio(s, c, "cpu_seconds"),
        }
    if 3 in figures:
        print("3. SFT on retail oracle episodes, simple vs cached", flush=True)
        sizes = dict(
            episodes=z["sft_episodes"],
            batch=z["sft_batch"],
            micro_tokens=z["sft_micro_tokens"],
            model=a.model,
            dtype=dtype,
        )
        s = run_side("sft", t, engine="simple", **sizes)
        c = run_side("sft", t, engine="cached", **sizes)
        flops = run_side("sft_flops", t, episodes=z["sft_episodes"], batch=z["sft_batch"], model=a.model)
        report["sft"] = {
            "simple": s,
            "cached": c,
            "tokens_per_s_ratio": _ratio(c, s, "tokens_per_s"),
            "tokens_per_cpu_s_ratio": _ratio(c, s, "tokens_per_cpu_s"),
            # the ratio the arithmetic allows: what an exact shared-prefix computation cannot avoid
            "flop_model": flops,
        }
    if 8 in figures:
        print(f"8. continuous batching vs one batch after another (cached engine, {dtype})", flush=True)
        kw = dict(
            episodes=z["stream_episodes"],
            batch=z["stream_batch"],
            turns=z["eval_turns"],
            tokens=z["eval_tokens"],
        )
        chunked = run_side("batching", t, mode="chunked", model=a.model, dtype=dtype, **kw)
        stream = run_side("batching", t, mode="stream", model=a.model, dtype=dtype, **kw)
        same = _identical_share(chunked, stream)
        report["batching"] = {
            "chunked": chunked,
            "stream": stream,
            "speedup": _ratio(chunked, stream, "seconds"),
            "identical_trajectories": same,  # bf16: batch composition may flip a near-tied greedy token
        }
    if 9 in figures:
        print(f"9. finished rows leave the decode steps (streamed, cached engine, {dtype})", flush=True)
        kw = dict(
            episodes=z["stream_episodes"],
            batch=z["stream_batch"],
            turns=z["eval_turns"],
            tokens=z["eval_tokens"],
            mode="stream",
            model=a.model,
        )
        kept = run_side("batching", t, min_idle=1.01, dtype=dtype, **kw)
        dropped = run_side("batching", t, min_idle=0.25, dtype=dtype, **kw)
        same = _identical_share(kept, dropped)
        decode = [v.get("engine_stats", {}).get("decode_seconds") for v in (kept, dropped)]
        report["decode_row_drop"] = {
            "kept": kept,
            "dropped": dropped,
            "speedup": _ratio(kept, dropped, "seconds"),
            "decode_speedup": decode[0] / decode[1] if all(decode) else None,
            "identical_trajectories": same,
        }
    if 10 in figures:
        print(f"10. conversations at once (streamed, cached engine, {dtype})", flush=True)
        kw = dict(
            episodes=z["concurrency_episodes"],
            turns=z["concurrency_turns"],
            tokens=z["concurrency_tokens"],
            difficulty=z["concurrency_difficulty"],
            mode="stream",
            model=a.model,
            dtype=dtype,
        )
        runs = [run_side("batching", t, batch=b, **kw) for b in z["concurrency_batches"]]
        first = runs[0]
        for r in runs:
            if "seconds" in r:
                r["seconds_per_episode"] = r["seconds"] / r["episodes"]
                r["cpu_seconds_per_episode"] = r["cpu_seconds"] / r["episodes"]
        speedups = [_ratio(first, r, "seconds") for r in runs]
        ref = first.get("token_ids_digest")
        identical = [
            None
            if ref is None or "token_ids_digest" not in r
            else sum(x == y for x, y in zip(ref, r["token_ids_digest"], strict=True)) / len(ref)
            for r in runs
        ]
        for r in runs:
            r.pop("token_ids_digest", None)
        report["concurrency"] = {"runs": runs, "speedup_vs_first": speedups, "identical_to_first": identical}
    if 5 in figures:
        print("5. roofline", flush=True)
        mm = run_side("matmul", 600)
        roof: dict[str, Any] = {**mm}
        c = report.get("evaluate", {}).get("cached", {})
        if "engine_stats" in c and "matmul_flops_per_s" in mm:
            st, n = c["engine_stats"], c["n_params"]
            peak = mm["matmul_flops_per_s"][dtype]
            pre = st["prefill_tokens"] / max(st["prefill_seconds"], 1e-9)
            dec = st["decode_tokens"] / max(st["decode_seconds"], 1e-9)
            roof.update(
                prefill_tokens_per_s=pre,
                decode_tokens_per_s=dec,
                peak_dtype=dtype,
                prefill_fraction_of_peak=2 * n * pre / peak,
                decode_fraction_of_peak=2 * n * dec / peak,
                note="achieved FLOP/s = 2 x parameters x tokens/s (attention not counted)",
            )
        if c.get("roofline"):  # the full account: attention, the LM head where it runs, bytes, share of bound
            from trace_train.roofline import format_account

            roof["account"] = c["roofline"]
            print(format_account(c["roofline"]), flush=True)
        report["roofline"] = roof
    if 4 in figures:
        print("4. long-prompt GRPO step: trace vs TRL (fp32, LoRA r16)", flush=True)
        kw = dict(prompts=z["trl_prompts"], group=z["trl_group"], tokens=z["trl_tokens"], model=a.model)
        sides = {}
        for micro in z["trl_micro"]:
            sides[f"trace_cached_micro{micro}"] = run_side(
                "trace_long", t, engine="cached", micro=micro, **kw
            )
        sides["trace_simple_micro8"] = run_side("trace_long", t, engine="simple", micro=8, **kw)
        try:
            import trl  # noqa: F401

            have_trl = True
        except ImportError:
            have_trl = False
        if have_trl and not a.skip_trl:
            sides["trl"] = run_side("trl_long", t, **kw)  # last and alone: ~14.5 GB
        else:
            sides["trl"] = {
                "skipped": "trl not installed (pip install -e .[bench])" if not have_trl else "--skip-trl"
            }
        trl_s = sides["trl"].get("s_per_step")
        for k, v in sides.items():
            if k.startswith("trace") and trl_s and v.get("s_per_step"):
                v["over_trl"] = v["s_per_step"] / trl_s
        report["long_prompt_vs_trl"] = sides
    if 6 in figures:
        print("6. tool rendering: prompt tokens, json vs compact", flush=True)
        report["tool_rendering"] = run_side("tool_tokens", 600, model=a.model)
    if 7 in figures:
        print("7. tool rendering A/B: SFT warm start, then test success, json vs compact", flush=True)
        kw = dict(
            episodes=z["ab_sft_episodes"],
            eval_episodes=z["ab_eval_episodes"],
            difficulty=z["ab_difficulty"],
            model=a.model,
        )
        sides = {fmt: run_side("tool_ab", t, fmt=fmt, dtype=dtype, **kw) for fmt in ("json", "compact")}
        ab: dict[str, Any] = {"sizes": kw, **sides}
        if (
            all("error" not in v for v in sides.values())
            and sides["json"]["seeds"] == sides["compact"]["seeds"]
        ):
            from trace_train.stats import mcnemar_exact

            test = mcnemar_exact(sides["compact"]["successes"], sides["json"]["successes"])
            ab["compact_minus_json"] = sides["compact"]["success_rate"] - sides["json"]["success_rate"]
            ab["only_compact"], ab["only_json"], ab["mcnemar_p"] = (
                test["only_a"],
                test["only_b"],
                test["p_value"],
            )
        report["tool_rendering_ab"] = ab
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    print(json.dumps(report, indent=2))
    Path(a.json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json_out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
