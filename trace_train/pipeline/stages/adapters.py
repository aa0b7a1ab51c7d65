"""Stage ``adapters``: step 3, one LoRA adapter per capability env, seed-grouped GRPO on its train split.

Each capability trains in ``<stage>/<capability>/`` with :class:`trace_train.grpo.trainer.GRPOTrainer` at the
difficulty calibration chose. With ``[adapters.sft]`` ``episodes`` the adapter is first fitted to that many
oracle episodes of its env (train tasks from its ``seed_offset``, apart from the GRPO tasks; ``<capability>/sft/``) and
GRPO continues from it: a base that never succeeds on the env gives every group equal rewards, from which GRPO
learns nothing. Finished adapters are kept when the stage resumes; an unfinished one continues
from its last checkpoint (``adapters.save_every``). The rollouts each adapter spent are counted for the
report and for the fair baseline (GRPO directly on the target with the same budget).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trace_gym.seeds import train_seeds
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import read_metrics, set_threads, use_run_envs


def grpo_args(
    ctx: StageContext,
    env_id: str,
    out: Path,
    difficulty: int | None,
    steps: int,
    init_adapter: str | None = None,
):
    """``[adapters]`` (GRPO's settings, whole) and ``[base]`` (engine, LoRA, dtype) for one adapter's run."""
    from trace_train.config import EngineArgs, GRPOArgs, GRPOSettings, settings_of

    cfg = ctx.config
    return GRPOArgs(
        **{**settings_of(cfg.adapters, GRPOSettings), "steps": steps},
        **settings_of(cfg.base, EngineArgs),
        env_id=env_id,
        target_env_id=cfg.target.env_id,  # the groups [adapters] target_share draws from the target's train split
        model=ctx.upstream["base"]["model"],
        out=str(out),
        difficulty=difficulty,
        seed=cfg.seed,
        lora_rank=cfg.base.lora_rank,
        lora_alpha=cfg.base.lora_alpha,
        dtype=cfg.base.dtype,
        init_adapter=init_adapter,
        # [generation]: the rollouts sample on the server, the adapter hot-loaded there after every step
        vllm_url=cfg.generation.server_url,
        vllm_model=cfg.generation.served_model,
        vllm_adapter_dir=str(out / "served_adapters") if cfg.generation.server_url else None,
        vllm_lora_name=f"trace-{out.name}",  # one name per adapter run: two runs never share a served name
        vllm_timeout=cfg.generation.server_timeout,
        vllm_retries=cfg.generation.server_retries,
        tensorboard=False,
        progress=False,  # the stage prints its own progress lines (readable in logs)
    )


def train_adapter(
    ctx: StageContext,
    label: str,
    env_id: str,
    out: Path,
    difficulty: int | None,
    steps: int,
    rollout_budget: int | None = None,
    sft_episodes: int | None = None,
    sft_levels: list[int] | None = None,
    flop_budget: float | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train (or finish) one adapter in ``out``; returns its summary, also written to ``out/summary.json``.

    With ``rollout_budget``, training spends at most that many rollouts (dynamic sampling's refills included;
    the last step takes only the groups that fit): the fair baseline gets the same rollouts, not the same steps,
    and never more than the adapters had. ``sft_levels`` overrides ``[adapters.sft] levels`` (the start depths
    of a capability env's oracle fit; a target has none, so the fit on the target passes ``[]``). With
    ``flop_budget``, the oracle fit's model FLOPs and GRPO's together stay within it (the equal-compute baseline):
    GRPO gets what the fit left. The summary's ``flops`` and ``tokens`` count both. ``overrides``: GRPO settings
    that differ from ``[adapters]`` for this run (what the env cannot take, e.g. a shaped reward it does not declare).
    """
    from trace_train.config import GRPOArgs
    from trace_train.grpo.trainer import GRPOTrainer

    summary_path = out / "summary.json"
    if summary_path.is_file():  # finished before an interruption of the stage
        return json.loads(summary_path.read_text())
    a = ctx.config.adapters
    # the trainer draws train-split tasks 0, 1, ...: one per group, refills included
    refills = a.dynamic_sampling * GRPOArgs.max_refill_rounds
    train_seeds("adapters", env_id, 0, steps * a.groups_per_step * (1 + refills))
    if a.target_share > 0:  # mixed-in groups draw the target's train tasks 0, 1, ... the same way
        train_seeds("adapters", ctx.config.target.env_id, 0, steps * a.groups_per_step * (1 + refills))
    sft_episodes = a.sft.episodes if sft_episodes is None else sft_episodes
    levels = a.sft.levels if sft_levels is None else sft_levels
    sft = (
        _sft_warmup(ctx, label, env_id, out / "sft", difficulty, sft_episodes, levels)
        if sft_episodes
        else None
    )
    args = grpo_args(ctx, env_id, out, difficulty, steps, init_adapter=sft["adapter"] if sft else None)
    for key, value in (overrides or {}).items():
        setattr(args, key, value)
    if rollout_budget is not None:
        args.rollout_budget = rollout_budget
    sft_flops = sft["flops"] if sft else 0.0
    if flop_budget is not None:
        if flop_budget <= sft_flops:
            raise ValueError(
                f"{label}: a FLOP budget of {flop_budget:.3g} is spent by the oracle fit alone ({sft_flops:.3g}): "
                "GRPO would get nothing"
            )
        args.flop_budget = flop_budget - sft_flops
    if (out / "checkpoints" / "latest").exists():
        args.resume = str(out / "checkpoints")
        ctx.log(f"{label}: resuming from {args.resume}")
    started = time.time()
    trainer = GRPOTrainer(args)
    with ctx.bar(label, steps) as bar:
        bar.update(trainer.state["step"])
        while trainer.state["step"] < steps:
            # in chunks of save_every steps: a checkpoint ends each chunk
            done_before = trainer.state["step"]
            args.steps = min(done_before + a.save_every, steps)
            metrics = trainer.train()
            if trainer.state["step"] == done_before:  # the rollout budget has no room for another group
                break
            bar.update(trainer.state["step"], status=f"reward {metrics.get('reward_mean', float('nan')):.3f}")
    if trainer.state["step"] < steps and not (out / "adapter").is_dir():
        trainer.policy.model.save_pretrained(out / "adapter")
    if trainer.remote is not None:
        trainer.remote.release()  # its last hot-loaded step leaves the server
    steps = trainer.state["step"]
    metrics = read_metrics(out / "metrics.jsonl")
    rollouts = trainer.state["rollouts"]  # every rollout sampled: refills, rescues and target groups included
    summary = {
        "env_id": env_id,
        "difficulty": difficulty,
        "adapter": str(out / "adapter"),
        "steps": steps,
        "rollouts": rollouts,
        # training compute, oracle fit included (trace_train.roofline's count): the equal-compute baseline's budget
        "flops": sft_flops + trainer.state["flops"],
        "tokens": (sft["tokens"] if sft else 0) + trainer.state["tokens"],
        "wall_s": round(time.time() - started, 1),
        "reward_curve": [m.get("reward_mean") for m in metrics],
        "first_reward": metrics[0].get("reward_mean") if metrics else None,
        "last_reward": metrics[-1].get("reward_mean") if metrics else None,
        "sft": sft,
    }
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _sft_warmup(
    ctx: StageContext,
    label: str,
    env_id: str,
    out: Path,
    difficulty: int | None,
    episodes: int,
    levels: list[int],
) -> dict[str, Any]:
    """Fit a fresh adapter to ``episodes`` oracle episodes of ``env_id`` (train split); reused when done."""
    from trace_train.config import EngineArgs, SFTArgs, SFTSettings, settings_of
    from trace_train.sft import run_sft

    cfg, fit = ctx.config, ctx.config.adapters.sft
    seeds = train_seeds("adapters", env_id, fit.seed_offset, episodes)  # refuses test seeds
    done = out / "sft_summary.json"
    if done.is_file() and (out / "adapter").is_dir():
        summary = json.loads(done.read_text())
    else:
        ctx.log(f"{label}: SFT on {episodes} oracle episodes before GRPO")
        started = time.time()
        summary = run_sft(
            SFTArgs(
                **{
                    **settings_of(fit, SFTSettings),
                    "episodes": episodes,
                    # levels, when set, say where each oracle episode starts instead of calibration's choice
                    "levels": levels,
                    "difficulty": None if levels else difficulty,
                },
                **settings_of(cfg.base, EngineArgs),
                env_id=env_id,
                model=ctx.upstream["base"]["model"],
                out=str(out),
                seed=cfg.seed,
                lora_rank=cfg.base.lora_rank,
                lora_alpha=cfg.base.lora_alpha,
                dtype=cfg.base.dtype,
                resume=True,  # an interrupted stage continues the fit from its last checkpoint
            )
        )
        summary["wall_s"] = round(time.time() - started, 1)
        done.write_text(json.dumps(summary, indent=2) + "\n")
    phases = (summary.get("roofline") or {}).get("phases", {})
    return {
        "adapter": summary["adapter"],
        "episodes": episodes,
        "epochs": fit.epochs,
        "levels": levels or [difficulty],
        "task_indices": [fit.seed_offset, fit.seed_offset + episodes - 1],
        "seeds": [seeds[0], seeds[-1]],
        "first_loss": summary.get("first_loss"),
        "final_loss": summary.get("final_loss"),
        "wall_s": summary.get("wall_s"),
        # its model compute (a fit resumed in another process counts only the part this process ran)
        "flops": sum(r.get("gflop", 0.0) for r in phases.values()) * 1e9,
        "tokens": sum(r.get("tokens", 0) for r in phases.values()),
    }


def run(ctx: StageContext) -> dict[str, Any]:
    set_threads(ctx.config.threads)
    envs = ctx.upstream["calibration"]["envs"]
    use_run_envs(ctx.config, [env["env_id"] for env in envs])
    adapters = {}
    for i, env in enumerate(envs):
        cap = env["capability"]
        label = f"{cap} ({i + 1}/{len(envs)})"
        adapters[cap] = train_adapter(
            ctx, label, env["env_id"], ctx.dir / cap, env.get("difficulty"), ctx.config.adapters.steps
        )
    total = sum(s["rollouts"] for s in adapters.values())
    return {
        "adapters": adapters,
        "rollouts_total": total,
        "flops_total": sum(s.get("flops", 0.0) for s in adapters.values()),
        "tokens_total": sum(s.get("tokens", 0) for s in adapters.values()),
        "summary": f"{len(adapters)} adapter(s), {total} training rollouts"
        if adapters
        else "no capability to train",
    }
