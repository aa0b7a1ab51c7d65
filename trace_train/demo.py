"""``trace demo``: the main job on the embedded default model, end to end on a CPU.

1. SFT warm start on train-split oracle trajectories; the merged model is the base agent;
2. test-split success of the base agent (greedy, ``eval_episodes`` held-out seeds) with 95% CIs;
3. seed-grouped GRPO (DAPO loss, dynamic sampling) on the train split, evaluating on the test split every
   ``eval_every`` steps;
4. the curve and the before/after comparison, printed and written to ``<out>/demo_log.jsonl``,
   ``<out>/summary.json`` and ``<out>/grpo/metrics.jsonl``.

SFT tasks are train-split indices from 500,000 up and GRPO's count up from 0, so the two never share a task;
test seeds are never trained on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trace_train.config import DemoArgs, GRPOArgs, SFTArgs

SFT_SEED_OFFSET = 500_000


def run_demo(args: DemoArgs, console: Console | None = None) -> dict[str, Any]:
    from trace_train.evaluate import evaluate
    from trace_train.grpo.trainer import GRPOTrainer
    from trace_train.policies.base import SamplingConfig
    from trace_train.sft import run_sft

    console = console or Console()
    _check_env_available(args.env_id)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    log_path = out / "demo_log.jsonl"
    log_path.write_text("")

    def record(**fields: Any) -> None:
        fields["elapsed_s"] = round(time.time() - started, 1)
        with log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")

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
        )
    )
    record(phase="sft", **{k: v for k, v in sft.items() if k != "adapter"})
    console.print(f"SFT loss {sft['first_loss']:.3f} -> {sft['final_loss']:.3f}; base agent: {sft['merged']}")

    grpo = GRPOArgs(
        env_id=args.env_id,
        model=sft["merged"],
        out=str(out / "grpo"),
        steps=0,
        groups_per_step=args.groups_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        max_turns=args.max_turns,
        loss_type="dapo",
        lr=args.lr,
        dynamic_sampling=True,
        max_refill_rounds=1,
        micro_batch_size=32,
        dtype=args.dtype,
        save_every=args.eval_every,
        seed=args.seed,
        progress=True,
    )
    trainer = GRPOTrainer(grpo)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)
    curve: list[dict[str, Any]] = []

    def test_eval() -> None:
        step = trainer.state["step"]
        result = evaluate(
            trainer.policy,
            args.env_id,
            episodes=args.eval_episodes,
            split="test",
            sampling=greedy,
            max_turns=args.max_turns,
            batch_size=50,
            out_jsonl=out / f"eval-step{step}.jsonl",
        )
        point = {"step": step, **{k: v for k, v in result.summary().items() if k != "env_id"}}
        curve.append(point)
        record(phase="eval", **point)
        console.print(f"step {step}: {result.line()}", markup=False)  # the line has [split, n=...]

    console.rule(f"2/3 test-split success of the base agent ({args.eval_episodes} held-out seeds)")
    test_eval()
    console.rule(f"3/3 GRPO on the train split: {args.steps} steps, {args.groups_per_step}x{args.group_size}")
    while trainer.state["step"] < args.steps and time.time() - started < args.time_budget_min * 60:
        grpo.steps = min(trainer.state["step"] + args.eval_every, args.steps)  # train in chunks, evaluate
        trainer.train()
        test_eval()

    summary = {
        "env_id": args.env_id,
        "model": args.model,
        "before": curve[0],
        "after": curve[-1],
        "curve": curve,
    }
    summary["minutes"] = round((time.time() - started) / 60, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(curve_table(curve, args.env_id))
    before, after = curve[0], curve[-1]
    improved = after["success_ci"][0] > before["success_ci"][1]
    console.print(
        f"test success {before['success_rate']:.3f} -> {after['success_rate']:.3f} in {summary['minutes']} min "
        f"({'95% CIs do not overlap' if improved else '95% CIs overlap'}); details in {out}"
    )
    return summary


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
