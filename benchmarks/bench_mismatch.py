"""Sampler/trainer log-prob mismatch on the embedded model, before and after the truncated IS correction.

Samples N single-turn episodes of an env with the rollout engine (recording the sampler's log-prob of every
generated token), then scores the same tokens as the GRPO trainer does:

* ``trainer@T=1``: the old trainer (logits not divided by the sampling temperature; issue 8 defect 3);
* ``trainer@T``: the current one (logits / T, the sampler's top-p);

and prints per-token |trainer - sampler| (mean, max), the k3 estimate of KL(sampler || trainer), and after
the correction min(exp(trainer - sampler), cap): the residual |log w - (trainer - sampler)|, the share of
truncated tokens and the mean weight.

    python benchmarks/bench_mismatch.py --dtype bfloat16 --adapter runs/demo/sft/adapter
"""

from __future__ import annotations

import argparse
import json

import torch

from trace_gym.registration import make_env
from trace_train.grpo.logprobs import pad_batch, sequence_logprobs
from trace_train.grpo.losses import truncated_is_weights
from trace_train.grpo.trainer import _scatter, mismatch_stats
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, collect


def measure(policy: HFPolicy, trajs, sampling: SamplingConfig, cap: float) -> dict[str, float]:
    seqs = [t.training_ids()[0] for t in trajs]
    masks = [t.training_ids()[1] for t in trajs]
    rows = [
        torch.tensor([lp for lp, m in zip(t.training_sampler_logprobs(), mk, strict=False) if m])
        for t, mk in zip(trajs, masks, strict=True)
    ]
    ids, attn, pmask = pad_batch(seqs, masks, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, tmask = sequence_logprobs(policy.model, ids, attn, pmask, sampling=sampling)
    sampler = _scatter(rows, tmask, fill=float("nan"))
    weights = truncated_is_weights(logp, sampler, tmask, cap)
    s = mismatch_stats(logp, sampler, tmask, weights)
    n = max(s["tokens"], 1.0)
    return {
        "tokens": s["tokens"],
        "abs_mean": s["abs_mean"] / n,
        "abs_max": s["abs_max"],
        "kl_k3": s["kl"] / n,
        "residual_abs_mean_after_is": s["residual_abs_mean"] / n,
        "truncated_fraction": s["truncated_fraction"] / n,
        "is_weight_mean": s["is_weight_mean"] / n,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--adapter", default=None, help="a PEFT adapter (e.g. the demo's SFT adapter)")
    p.add_argument("--env-id", default="trace/rg-arith2-v2")
    p.add_argument("--dtype", default="bfloat16", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--is-cap", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the figures to this file")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    policy = HFPolicy.from_pretrained(a.model, adapter=a.adapter, dtype=a.dtype)
    sampling = SamplingConfig(temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens)
    envs = [make_env(a.env_id) for _ in range(a.episodes)]
    specs = [ResetSpec(seed=i, group=i) for i in range(a.episodes)]
    trajs = collect(policy, envs, specs, sampling, max_turns=1)
    out = {
        "setup": vars(a),
        f"trainer@T=1 (old), sampler@T={a.temperature}": measure(
            policy, trajs, SamplingConfig(1.0), a.is_cap
        ),
        f"trainer@T={a.temperature} (now)": measure(policy, trajs, sampling, a.is_cap),
    }
    print(json.dumps(out, indent=2))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
