"""Supervised warm start on oracle trajectories (the paper's SFT baseline, and how the demo gets a base agent).

Trajectories are produced by the same rollout code as GRPO with a "teacher" generator that emits the
oracle's assistant turns rendered in the policy's own output format (``<tool_call>`` text + end-of-turn
token). So the chat formatting and the token-id masks are exactly those of GRPO, and only the agent's
tokens are trained. Only trajectories that score 1.0 when the rendered text is replayed are kept.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import torch

from trace_gym.registration import make_env
from trace_gym.seeds import train_reset_seed
from trace_train.config import SFTArgs
from trace_train.engine.cached import common_prefix_length
from trace_train.grpo.logprobs import (
    PrefixKV,
    pad_batch,
    sequence_logprobs,
    shared_prefix_length,
    shared_prefix_logprobs,
)
from trace_train.metrics import peak_rss_mb
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy, ensure_lora
from trace_train.rollout import ResetSpec, Trajectory, collect
from trace_train.tool_text import assistant_text


def oracle_trajectories(
    policy: HFPolicy,
    env_id: str,
    seeds: list[int],
    max_turns: int = 12,
    difficulty: int | None | list[int | None] = None,
) -> tuple[list[Trajectory], int]:
    """Replay each env's oracle through the policy's renderer; returns (successful trajectories, failures).
    ``difficulty``: one for every seed, or a list with one per seed."""
    envs = [make_env(env_id) for _ in seeds]
    per_seed = difficulty if isinstance(difficulty, list) else [difficulty] * len(seeds)
    if len(per_seed) != len(seeds):
        raise ValueError(f"{len(per_seed)} difficulties for {len(seeds)} seeds")
    specs = [
        ResetSpec(seed=s, group=i, split="train", difficulty=d)
        for i, (s, d) in enumerate(zip(seeds, per_seed, strict=True))
    ]
    scripts: dict[int, list[Any]] = {}
    eos = policy.tokenizer.eos_token_id

    def teacher(_prompts: list[list[int]], active: list[int], turn: int) -> list[list[int]]:
        out = []
        for i in active:
            if i not in scripts:  # first call for this env: reset has happened inside collect
                scripts[i] = list(envs[i].unwrapped.oracle_actions())
            actions = scripts[i]
            text = assistant_text(actions[turn]) if turn < len(actions) else ""
            out.append(policy.renderer.encode(text) + [eos])
        return out

    # no token cap: oracle conversations of tool envs are long, and a cut one would be dropped as a failure
    trajs = collect(
        policy,
        envs,
        specs,
        SamplingConfig(temperature=0.0),
        max_turns,
        max_total_tokens=10**9,
        generator=teacher,
    )
    ok = [t for t in trajs if t.reward >= 1.0]
    return ok, len(trajs) - len(ok)


def token_micro_batches(
    batch: list[tuple[list[int], list[int]]], max_tokens: int, shared_prefix: bool = False
) -> list[list[tuple[list[int], list[int]]]]:
    """Split ``batch`` (in order) into runs of sequences of at most ``max_tokens`` tokens together; a longer
    sequence goes alone. ``shared_prefix``: a sequence costs only its tokens past the prefix it shares with the
    run's first sequence (the shared-prefix forward computes that prefix once per micro-batch)."""
    out: list[list[tuple[list[int], list[int]]]] = []
    size = 0
    for item in batch:
        cost = len(item[0])
        if out and shared_prefix:
            cost -= common_prefix_length([out[-1][0][0], item[0]])
        if out and size + cost <= max_tokens:
            out[-1].append(item)
            size += cost
        else:
            out.append([item])
            size = len(item[0])
    return out


def _agent_logprobs(
    model, policy: HFPolicy, micro, engine: str, prefix: PrefixKV | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    seqs, masks = [x for x, _ in micro], [m for _, m in micro]
    pad = policy.tokenizer.pad_token_id
    if engine == "simple":  # padded batch, one forward per sequence
        ids, attn, pmask = pad_batch(seqs, masks, pad)
        dev = policy.device  # the GPU when from_pretrained found one
        return sequence_logprobs(model, ids.to(dev), attn.to(dev), pmask.to(dev), share_prefix=False)
    # the shared system/tools prefix once, the rest packed, LM head on agent tokens only
    return shared_prefix_logprobs(model, seqs, masks, pad, prefix=prefix)


def backward_batch(
    model: torch.nn.Module,
    policy: HFPolicy,
    batch: list[tuple[list[int], list[int]]],
    micro_batch_tokens: int,
    engine: str = "cached",
) -> tuple[float, int, int]:
    """Backpropagate the token-level NLL of ``batch``'s agent tokens (the mean over all of them), one
    micro-batch of at most ``micro_batch_tokens`` tokens at a time: the gradients add up to the whole batch's.

    With the cached engine the prefix the whole batch shares (system prompt and tools) is computed once per
    batch (:class:`PrefixKV`) and does not count against ``micro_batch_tokens``: micro-batches hold only what
    follows it. Returns (loss, tokens seen, agent tokens trained)."""
    n_agent = sum(sum(m[1:]) for _, m in batch)  # the first token has no prediction
    prefix = None
    if engine != "simple":
        shared = shared_prefix_length([x for x, _ in batch], [m for _, m in batch])
        prefix = PrefixKV.compute(model, batch[0][0][:shared])
    rest = batch if prefix is None else [(x[len(prefix) :], m[len(prefix) :]) for x, m in batch]
    loss_value, seen, trained = 0.0, 0, 0
    for micro_rest in token_micro_batches(rest, micro_batch_tokens, shared_prefix=engine != "simple"):
        micro = (
            micro_rest
            if prefix is None
            else [(prefix.tokens + x, [0] * len(prefix) + m) for x, m in micro_rest]
        )
        logp, tmask = _agent_logprobs(model, policy, micro, engine, prefix)
        loss = -(logp * tmask).sum() / max(n_agent, 1)
        loss.backward()
        loss_value += loss.item()
        seen += sum(len(x) for x, _ in micro)
        trained += int(tmask.sum())
    if prefix is not None:
        prefix.backward()
    return loss_value, seen, trained


def run_sft(args: SFTArgs, policy: HFPolicy | None = None) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    policy = policy or HFPolicy.from_pretrained(args.model, lora=args.lora(), dtype=args.dtype)
    policy.model = ensure_lora(policy.model, args.lora())
    policy.configure(tool_format=args.tool_format)
    probe = make_env(args.env_id)
    seeds = [train_reset_seed(args.seed_offset + i, probe) for i in range(args.episodes)]  # never test seeds
    probe.close()
    trajs, failed = oracle_trajectories(
        policy, args.env_id, seeds, args.max_turns, args.episode_difficulties()
    )
    if not trajs:
        raise RuntimeError(f"no oracle trajectory of {args.env_id} scored 1.0 ({failed} failed)")
    data = [t.training_ids() for t in trajs]
    model = policy.model
    if args.gradient_checkpointing:
        from trace_train.grpo.trainer import enable_gradient_checkpointing

        enable_gradient_checkpointing(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    steps_total = args.epochs * math.ceil(len(data) / args.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / max(steps_total, 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "sft_metrics.jsonl", "w", encoding="utf-8")  # noqa: SIM115
    model.train()
    step, t0, cpu0 = 0, time.perf_counter(), time.process_time()
    rng = random.Random(args.seed)
    losses = []
    seen_tokens = trained_tokens = 0
    for epoch in range(args.epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for b in range(0, len(order), args.batch_size):
            batch = [data[i] for i in order[b : b + args.batch_size]]
            loss_value, seen, trained = backward_batch(
                model, policy, batch, args.micro_batch_tokens, args.engine
            )
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"non-finite SFT loss at step {step}")
            seen_tokens += seen
            trained_tokens += trained
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            losses.append(loss_value)
            log.write(json.dumps({"step": step, "epoch": epoch, "loss": loss_value}) + "\n")
            log.flush()
    log.close()
    train_seconds, train_cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    model.save_pretrained(out / "adapter")
    policy.tokenizer.save_pretrained(out / "adapter")
    summary = {
        "trajectories": len(trajs),
        "oracle_failures": failed,
        "steps": step,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "seconds": time.perf_counter() - t0,
        "train_seconds": train_seconds,
        "tokens_per_s": seen_tokens / max(train_seconds, 1e-9),  # all tokens of the trained sequences
        "agent_tokens_per_s": trained_tokens / max(train_seconds, 1e-9),
        "train_cpu_seconds": train_cpu_seconds,  # CPU time of this process (steadier than wall on a shared host)
        "tokens_per_cpu_s": seen_tokens / max(train_cpu_seconds, 1e-9),
        "engine": args.engine,
        "tool_format": args.tool_format,
        "peak_rss_mb": peak_rss_mb(),
        "adapter": str(out / "adapter"),
    }
    if args.merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(out / "merged")
        policy.tokenizer.save_pretrained(out / "merged")
        summary["merged"] = str(out / "merged")
    (out / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    return summary
