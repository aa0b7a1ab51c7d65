"""``trace demo``: the main job on the embedded default model, end to end on a CPU.

1. SFT warm start on train-split oracle trajectories; the merged model is the base agent;
2. test-split success of the base agent (greedy, ``eval_episodes`` held-out seeds) with 95% CIs;
3. seed-grouped GRPO (DAPO loss, dynamic sampling) on the train split, evaluating on the test split every
   ``eval_every`` steps;
4. the curve and the paired before/after test on the same test seeds (exact McNemar for success, paired
   bootstrap for mean reward), printed and written to ``<out>/demo_log.jsonl``, ``<out>/summary.json`` and
   ``<out>/grpo/metrics.jsonl``; with ``grpo_seeds > 1``, one GRPO run per seed from the same SFT base and
   the spread of their final success.

SFT tasks are train-split indices from 500,000 up and GRPO's count up from 0, so the two never share a seed;
every training command goes through :func:`trace_gym.seeds.train_reset_seed`, so no test seed is reachable,
and the default env splits by content, so no test *question* occurs in training either.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trace_train.config import DemoArgs, EvalSettings, GRPOArgs, SFTArgs
from trace_train.stats import PairedComparison, compare_paired

SFT_SEED_OFFSET = 500_000


def run_demo(args: DemoArgs, console: Console | None = None) -> dict[str, Any]:
    from trace_train.grpo.trainer import set_reproducible

    console = console or Console()
    _check_env_available(args.env_id)
    set_reproducible(args.num_threads, deterministic=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    log_path = out / "demo_log.jsonl"
    log_path.write_text("")

    def record(**fields: Any) -> None:
        fields["elapsed_s"] = round(time.time() - started, 1)
        with log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")

    if args.sft_model:  # an earlier run's warm start (e.g. <out>/sft/merged): skip step 1
        if not (Path(args.sft_model) / "config.json").exists():
            raise FileNotFoundError(
                f"--sft-model {args.sft_model!r} is not a model directory (no config.json)"
            )
        sft = {"merged": args.sft_model}
        record(phase="sft", reused=args.sft_model)
        console.print(f"base agent: {args.sft_model} (SFT warm start reused)")
    else:
        sft = _warm_start(args, out, record, console)

    runs = []
    for r in range(args.grpo_seeds):
        seed = args.seed + r
        sub = out / ("grpo" if r == 0 else f"grpo-seed{seed}")
        runs.append(_grpo_run(args, sft["merged"], seed, sub, record, console, started))
    before = runs[0]["curve"][0]
    summary: dict[str, Any] = {
        "env_id": args.env_id,
        "model": args.model,
        "args": dataclasses.asdict(args),
        "before": before,
        "after": runs[0]["curve"][-1],
        "curve": runs[0]["curve"],
        "paired": runs[0]["paired"],
        "runs": runs,
    }
    if len(runs) > 1:  # bitwise reproducibility across machines is out of reach: report the spread
        finals = [run["curve"][-1]["success_rate"] for run in runs]
        summary["spread"] = {
            "seeds": len(runs),
            "success_min": min(finals),
            "success_max": max(finals),
            "success_mean": sum(finals) / len(finals),
        }
    summary["minutes"] = round((time.time() - started) / 60, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for run in runs:
        console.print(curve_table(run["curve"], f"{args.env_id} (GRPO seed {run['seed']})"))
        console.print(PairedComparison(**run["paired"]).line(), markup=False)
    if "spread" in summary:
        sp = summary["spread"]
        console.print(
            f"final test success over {sp['seeds']} GRPO seeds: {sp['success_min']:.3f}-"
            f"{sp['success_max']:.3f} (mean {sp['success_mean']:.3f})"
        )
    console.print(f"{summary['minutes']} min; details in {out}")
    return summary


def _warm_start(args: DemoArgs, out: Path, record, console: Console) -> dict[str, Any]:
    """Step 1: SFT on train-split oracle trajectories (task indices from SFT_SEED_OFFSET), merged."""
    from trace_train.sft import run_sft

    console.rule(f"1/3 SFT warm start: {args.model} on {args.sft_episodes} oracle episodes of {args.env_id}")
    sft = run_sft(
        SFTArgs(
            env_id=args.env_id,
            model=args.model,
            out=str(out / "sft"),
            episodes=args.sft_episodes,
            epochs=1,
            lr=2e-4,
            batch_size=16,
            merge=True,
            dtype=args.dtype,
            max_turns=max(args.max_turns, 8),
            seed=args.seed,
            seed_offset=SFT_SEED_OFFSET,
            resume=True,  # a rerun continues an interrupted warm start
        )
    )
    record(phase="sft", **{k: v for k, v in sft.items() if k != "adapter"})
    console.print(f"SFT loss {sft['first_loss']:.3f} -> {sft['final_loss']:.3f}; base agent: {sft['merged']}")
    return sft


def _grpo_run(
    args: DemoArgs, base_model: str, seed: int, out: Path, record, console: Console, started: float
) -> dict[str, Any]:
    """GRPO from the SFT base with one seed, test evaluations every ``eval_every`` steps, the paired test of
    the last evaluation against the first (same test seeds)."""
    from trace_train.evaluate import evaluate
    from trace_train.grpo.trainer import GRPOTrainer

    grpo = GRPOArgs(
        env_id=args.env_id,
        model=base_model,
        out=str(out),
        steps=args.steps,  # checked up front against the train split; trained in chunks below
        groups_per_step=args.groups_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        max_turns=args.max_turns,
        min_oracle_ceiling=args.min_oracle_ceiling,
        loss_type="dapo",
        lr=args.lr,
        dynamic_sampling=True,
        max_refill_rounds=1,
        micro_batch_size=32,
        dtype=args.dtype,
        save_every=args.eval_every,
        seed=seed,
        num_threads=args.num_threads,
        progress=True,
    )
    trainer = GRPOTrainer(grpo)
    settings = EvalSettings(
        episodes=args.eval_episodes,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        batch_size=50,
        min_oracle_ceiling=args.min_oracle_ceiling,
    )
    curve: list[dict[str, Any]] = []
    records: list[list[dict[str, Any]]] = []

    def test_eval() -> None:
        step = trainer.state["step"]
        result = evaluate(
            trainer.policy,
            args.env_id,
            settings,
            split="test",
            out_jsonl=out / f"eval-step{step}.jsonl",
        )
        point = {"step": step, **{k: v for k, v in result.summary().items() if k != "env_id"}}
        curve.append(point)
        records.append(result.trajectories)
        record(phase="eval", seed=seed, **point)
        console.print(f"step {step}: {result.line()}", markup=False)  # the line has [split, n=...]

    console.rule(f"2/3 test-split success of the base agent ({args.eval_episodes} held-out seeds)")
    test_eval()
    console.rule(
        f"3/3 GRPO seed {seed}: {args.steps} steps, {args.groups_per_step}x{args.group_size} rollouts"
    )
    budget = args.time_budget_min * 60
    while trainer.state["step"] < args.steps and not (budget and time.time() - started >= budget):
        grpo.steps = min(trainer.state["step"] + args.eval_every, args.steps)  # train in chunks, evaluate
        trainer.train()
        test_eval()
    paired = compare_paired(records[0], records[-1])
    record(phase="paired", seed=seed, **paired.to_json())
    return {"seed": seed, "curve": curve, "paired": paired.to_json()}


def _check_env_available(env_id: str) -> None:
    import trace_gym  # noqa: F401 - registers the built-in envs
    from trace_gym.adapters.reasoning_gym import reasoning_gym_available

    if env_id.startswith("trace/rg-") and not reasoning_gym_available():
        raise RuntimeError(
            f"{env_id} is a reasoning-gym task and reasoning-gym is not installed: "
            "pip install 'trace-agentic[rg]' (or pip install reasoning-gym)"
        )


def curve_table(curve: list[dict[str, Any]], env_id: str) -> Table:
    table = Table(title=f"{env_id}: test split, greedy")
    for column in ("GRPO step", "success", "95% CI", "mean reward", "95% CI "):
        table.add_column(column, justify="right")
    for point in curve:
        low, high = point["success_ci"]
        r_low, r_high = point["reward_ci"]
        table.add_row(
            str(point["step"]),
            f"{point['success_rate']:.3f}",
            f"{low:.3f}-{high:.3f}",
            f"{point['reward_mean']:.3f}",
            f"{r_low:.3f}-{r_high:.3f}",
        )
    return table
