"""Supervised warm start on oracle trajectories (the paper's SFT baseline, and how the demo gets a base agent).

Trajectories are produced by the same rollout code as GRPO with a "teacher" generator that emits the
oracle's assistant turns rendered in the policy's own output format (``<tool_call>`` text + end-of-turn
token). So the chat formatting and the token-id masks are exactly those of GRPO, and only the agent's
tokens are trained. Only trajectories that score 1.0 when the rendered text is replayed are kept, except with the
teacher ``oracle-without:CAP`` (a base with a planted gap), whose every episode is kept.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trace_gym.registration import make_env, use_target_difficulty
from trace_gym.seeds import train_reset_seed
from trace_train.config import SFTArgs
from trace_train.engine.cached import common_prefix_length
from trace_train.grpo.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, settings_mismatch
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
from trace_train.roofline import LEDGER, account
from trace_train.tool_text import assistant_text

# What a resumed fit must share with its checkpoint: every setting that changes the data, its order or the
# updates (where it is written, how often it is saved and whether it is merged afterwards may change).
FREE_ON_RESUME = frozenset({"out", "resume", "save_every", "merge", "snapshot_steps"})
RESUME_KEYS = tuple(sorted(f.name for f in dataclasses.fields(SFTArgs) if f.name not in FREE_ON_RESUME))


def oracle_trajectories(
    policy: HFPolicy,
    env_id: str,
    seeds: list[int],
    max_turns: int = 12,
    difficulty: int | None | list[int | None] = None,
    without: str | None = None,
) -> tuple[list[Trajectory], int]:
    """Replay each env's oracle through the policy's renderer; returns (successful trajectories, failures).
    ``difficulty``: one for every seed, or a list with one per seed. ``without``: replay the oracle with that
    capability removed instead (``oracle_actions(without=...)``) and keep every trajectory, whatever it scores
    (the failures are the point: a base with a planted gap); failures then counts the episodes that scored
    below 1.0."""
    envs = [make_env(env_id) for _ in seeds]
    if without is not None:
        from trace_train.policies.scripted import ScriptedAgent

        ScriptedAgent(without).check(envs[0])  # names what the env can remove, before any episode runs
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
                oracle = envs[i].unwrapped.oracle_actions
                scripts[i] = list(oracle() if without is None else oracle(without=without))
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
    if without is not None:
        return trajs, len(trajs) - len(ok)
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


def resume_config(args: SFTArgs) -> dict[str, Any]:
    """The run's settings as its checkpoints record them (JSON round trip: lists and tuples compare equal)."""
    return json.loads(json.dumps({key: getattr(args, key) for key in RESUME_KEYS}, default=str))


def batch_plan(n_data: int, batch_size: int, epochs: int, seed: int) -> list[tuple[int, list[int]]]:
    """(epoch, data indexes) of every optimiser step, in the order any run with this seed takes them: a resumed
    run skips the steps its checkpoint has done."""
    rng = random.Random(seed)
    plan = []
    for epoch in range(epochs):
        order = list(range(n_data))
        rng.shuffle(order)
        plan += [(epoch, order[b : b + batch_size]) for b in range(0, n_data, batch_size)]
    return plan


def _keep_only(root: Path, newest: Path) -> None:
    """Drop every other step directory: each checkpoint holds the whole state, and a fit saves one per step."""
    for old in root.glob("step-*"):
        if old != newest:
            shutil.rmtree(old, ignore_errors=True)


def _finished_fit(args: SFTArgs) -> dict[str, Any] | None:
    """With ``resume``, the summary of the fit OUT already holds when it was made with these settings (and its
    adapter, and merged model where asked, are there); a finished fit of other settings is refused."""
    out = Path(args.out)
    done = out / "sft_summary.json"
    if not args.resume or not done.is_file() or not (out / "adapter").is_dir():
        return None
    summary = json.loads(done.read_text())
    settings, now = summary.get("settings"), resume_config(args)
    if settings is None or (args.merge and not (out / "merged").is_dir()):
        return None  # an older summary (no settings recorded), or the merged model is missing: fit again
    if settings != now:
        detail = settings_mismatch(settings, now, now, saved_as="fit")
        raise CheckpointError(f"{out} holds a finished fit of other settings ({detail}); give another --out")
    return summary


def run_sft(
    args: SFTArgs, policy: HFPolicy | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Fit ``args.episodes`` oracle episodes of ``args.env_id``'s train split; writes OUT/adapter (and
    OUT/merged with ``merge``), OUT/sft_metrics.jsonl and OUT/sft_summary.json.

    Every ``save_every`` steps the adapter, optimiser, schedule and RNG states go to OUT/checkpoints (the newest
    only); with ``resume`` a run continues from there and ends with the weights the uninterrupted run would
    have (same machine), or refuses a checkpoint of other settings with :class:`CheckpointError`; without
    ``resume`` a checkpoint there is refused too (an interrupted fit's progress is not overwritten). With
    ``resume``, a fit OUT already finished with these settings is returned as it is. ``progress`` receives a
    line per phase and per optimiser step (``trace sft`` shows it)."""
    use_target_difficulty(args.env_id, args.target_difficulty)  # before anything reads the env
    finished = _finished_fit(args)
    if finished is not None:
        return finished
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    policy = policy or HFPolicy.from_pretrained(args.model, lora=args.lora(), dtype=args.dtype)
    policy.model = ensure_lora(policy.model, args.lora())
    policy.configure(tool_format=args.tool_format)
    probe = make_env(args.env_id)
    seeds = [train_reset_seed(args.seed_offset + i, probe) for i in range(args.episodes)]  # never test seeds
    probe.close()
    say = progress or (lambda _line: None)
    say(f"replaying {len(seeds)} {args.teacher} episodes of {args.env_id} through the policy's renderer")
    trajs, failed = oracle_trajectories(
        policy, args.env_id, seeds, args.max_turns, args.episode_difficulties(), args.removed_capability()
    )
    if not trajs:
        raise RuntimeError(f"no oracle trajectory of {args.env_id} scored 1.0 ({failed} failed)")
    data = [t.training_ids() for t in trajs]
    model = policy.model
    if args.gradient_checkpointing:
        from trace_train.grpo.trainer import enable_gradient_checkpointing

        enable_gradient_checkpointing(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    plan = batch_plan(len(data), args.batch_size, args.epochs, args.seed)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / max(len(plan), 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoints, config = out / "checkpoints", resume_config(args)
    state: dict[str, Any] = {"step": 0, "losses": [], "seen_tokens": 0, "trained_tokens": 0}
    state.update(train_seconds=0.0, train_cpu_seconds=0.0)
    if (checkpoints / "latest").is_file():
        if not args.resume:  # an interrupted fit's progress is never thrown away unasked
            raise CheckpointError(
                f"{checkpoints} holds an interrupted run's checkpoint: pass --resume to continue it, or give "
                "another --out (or delete that directory) to start over"
            )
        state = load_checkpoint(checkpoints, model, opt, config, keys=RESUME_KEYS)
        sched.load_state_dict(state.pop("scheduler"))
    resumed_from = state["step"]
    metrics_path = out / "sft_metrics.jsonl"
    kept = []  # steps logged after the checkpoint was written are done again
    if resumed_from and metrics_path.is_file():
        for line in metrics_path.read_text().splitlines():
            try:
                step = json.loads(line)["step"]
            except (ValueError, KeyError, TypeError):  # a line cut by the kill: its step is done again
                continue
            if step <= resumed_from:
                kept.append(line)
    metrics_path.write_text("".join(line + "\n" for line in kept))
    log = open(metrics_path, "a", encoding="utf-8")  # noqa: SIM115
    model.train()
    t0, cpu0 = time.perf_counter(), time.process_time()
    work0 = LEDGER.snapshot()
    seconds_before, cpu_before = state["train_seconds"], state["train_cpu_seconds"]
    for epoch, indexes in plan[resumed_from:]:
        batch = [data[i] for i in indexes]
        with LEDGER.timed("train"):
            loss_value, seen, trained = backward_batch(
                model, policy, batch, args.micro_batch_tokens, args.engine
            )
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"non-finite SFT loss at step {state['step']}")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["losses"].append(loss_value)
        state["seen_tokens"] += seen
        state["trained_tokens"] += trained
        state["train_seconds"] = seconds_before + time.perf_counter() - t0
        state["train_cpu_seconds"] = cpu_before + time.process_time() - cpu0
        log.write(json.dumps({"step": state["step"], "epoch": epoch, "loss": loss_value}) + "\n")
        log.flush()
        per_step = (time.perf_counter() - t0) / (state["step"] - resumed_from)
        left = (len(plan) - state["step"]) * per_step
        say(
            f"step {state['step']}/{len(plan)}: loss {loss_value:.3f}, {per_step:.0f} s/step, ~{left / 60:.0f} min left"
        )
        if state["step"] in args.snapshot_steps:
            model.save_pretrained(out / "snapshots" / f"step-{state['step']}")
        if args.save_every and (state["step"] % args.save_every == 0 or state["step"] == len(plan)):
            newest = save_checkpoint(
                checkpoints, state["step"], model, opt, {**state, "scheduler": sched.state_dict()}, config
            )
            _keep_only(checkpoints, newest)
    log.close()
    train_seconds, train_cpu_seconds = state["train_seconds"], state["train_cpu_seconds"]
    model.save_pretrained(out / "adapter")
    policy.tokenizer.save_pretrained(out / "adapter")
    losses = state["losses"]
    summary = {
        "trajectories": len(trajs),
        "teacher": args.teacher,
        # with the full oracle, the episodes dropped; with oracle-without:CAP, the kept episodes that fail
        "oracle_failures": failed,
        "steps": state["step"],
        "resumed_from_step": resumed_from,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "seconds": seconds_before + time.perf_counter() - t0,  # with saving the adapter
        "train_seconds": train_seconds,
        # tokens_per_s counts all tokens of the trained sequences, agent_tokens_per_s the trained ones
        "tokens_per_s": state["seen_tokens"] / max(train_seconds, 1e-9),
        "agent_tokens_per_s": state["trained_tokens"] / max(train_seconds, 1e-9),
        "train_cpu_seconds": train_cpu_seconds,  # CPU time of this process (steadier than wall on a shared host)
        "tokens_per_cpu_s": state["seen_tokens"] / max(train_cpu_seconds, 1e-9),
        "engine": args.engine,
        "tool_format": args.tool_format,
        "peak_rss_mb": peak_rss_mb(),
        "adapter": str(out / "adapter"),
        "settings": config,  # what a --resume of a finished fit compares
        # this process's part of the fit (a resumed fit's earlier steps are not in it)
        "roofline": account(LEDGER.since(work0), time.perf_counter() - t0),
    }
    if args.merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(out / "merged")
        policy.tokenizer.save_pretrained(out / "merged")
        summary["merged"] = str(out / "merged")
    (out / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    shutil.rmtree(checkpoints, ignore_errors=True)  # the fit is done: its adapter is the state that matters
    return summary
