"""Issue 47's scaling curve of the warm start: one ``trace sft`` fit evaluated after N distinct oracle episodes.

The fit (``trace sft ... --snapshot-steps``) keeps its adapter after some optimiser steps; with batch B, step s
has seen s x B distinct episodes (one epoch). Each point is merged into the model exactly as the pipeline's base
stage merges its warm start, then played greedily

* on a validation slice of the train split (``--val-offset``: tasks no fit and no pipeline stage uses), which is
  what chooses between points and settings, and
* for the points named by ``--test-points``, on the demo's test tasks (test split 0..``--test-episodes``-1).

Per point: N, steps, train loss (mean of the last 4 steps), success with a 95% Wilson interval, mean turns, the
share cut by the turn cap (``cut == "max_turns"``) and by the token budget, and the wall time of each evaluation.
Every evaluation is resumable (its JSONL keeps finished episodes); a rerun skips finished ones. Writes
``<out>/curve.json`` and ``<out>/curve.png``.

    trace sft trace/retail-v2 --episodes 256 --epochs 1 --lr 1e-3 --batch-size 4 --difficulty 1 \\
        --seed-offset 500000 --dtype auto --snapshot-steps 8 16 32 --out runs/base256
    python benchmarks/base_curve.py --fit runs/base256 --out benchmarks/results/base_curve
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from trace_train.config import EvalSettings
from trace_train.metrics import cpu_name
from trace_train.stats import wilson_interval

ENV = "trace/retail-v2"


def merged_point(model: str, adapter: Path, work: Path, dtype: str) -> Path:
    """``adapter`` merged into ``model`` (as the base stage does), cached in ``work``."""
    out = work / "merged"
    if (out / "config.json").is_file():
        return out
    from trace_train.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(model, adapter=adapter, dtype=dtype, device="cpu")
    merged = policy.model.merge_and_unload()
    merged.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    return out


def play(model: Path, split: str, offset: int, episodes: int, args: argparse.Namespace, path: Path) -> dict:
    from trace_train.evaluate import evaluate
    from trace_train.policy_factory import make_policy

    policy = make_policy(str(model), dtype=args.dtype, engine="cached", tool_format=args.tool_format)
    settings = EvalSettings(
        episodes=episodes,
        seed_offset=offset,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )
    started = time.time()
    result = evaluate(
        policy, ENV, settings, split=split, difficulty=args.difficulty, out_jsonl=path, resume=True
    )
    records = result.trajectories
    wins = sum(r["reward"] >= 1.0 for r in records)
    n = len(records)
    return {
        "split": split,
        "tasks": [offset, offset + episodes - 1],
        "successes": wins,
        "episodes": n,
        "rate": wins / n,
        "ci95": list(wilson_interval(wins, n)),
        "mean_turns": sum(r["turns"] for r in records) / n,
        "cut_by_turn_cap": sum(r.get("cut") == "max_turns" for r in records) / n,
        "cut_by_token_budget": sum(r.get("cut") == "max_total_tokens" for r in records) / n,
        "failed_cut_by_turn_cap": sum(r.get("cut") == "max_turns" and r["reward"] < 1.0 for r in records),
        "wall_s": round(time.time() - started, 1),  # this call's: 0-ish when every episode was kept
        "settings": {
            "max_turns": args.max_turns,
            "max_new_tokens": args.max_new_tokens,
            "batch_size": args.batch_size,
            "difficulty": args.difficulty,
            "tool_format": args.tool_format,
            "dtype": args.dtype,
        },
        "outcomes": [int(r["reward"] >= 1.0) for r in records],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", required=True, help="the trace sft OUT directory (finished or with snapshots)")
    p.add_argument("--out", default="benchmarks/results/base_curve")
    p.add_argument("--work", default=None, help="merged models and episodes (default: FIT/curve)")
    p.add_argument("--val-offset", type=int, default=900_000)
    p.add_argument("--val-episodes", type=int, default=32)
    p.add_argument("--test-episodes", type=int, default=128)
    p.add_argument("--test-points", nargs="*", default=["final"], help="points also played on the test tasks")
    p.add_argument(
        "--points", nargs="*", default=None, help="points to evaluate (default: every snapshot, final)"
    )
    p.add_argument("--max-turns", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--difficulty", type=int, default=1)
    p.add_argument("--tool-format", default="json")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--model", default="smollm2-135m", help="the model the fit started from")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--tag", default="", help="suffix of the result keys (e.g. t16 for --max-turns 16)")
    args = p.parse_args()

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    fit, out = Path(args.fit), Path(args.out)
    work = Path(args.work) if args.work else fit / "curve"
    out.mkdir(parents=True, exist_ok=True)
    losses = [json.loads(line)["loss"] for line in (fit / "sft_metrics.jsonl").read_text().splitlines()]
    summary = (
        json.loads((fit / "sft_summary.json").read_text()) if (fit / "sft_summary.json").is_file() else {}
    )
    batch = summary.get("settings", {}).get("batch_size", 4)
    points: dict[str, tuple[int, Path]] = {
        f"step-{int(d.name.split('-')[1])}": (int(d.name.split("-")[1]), d)
        for d in sorted((fit / "snapshots").glob("step-*"))
    }
    if summary:
        points["final"] = (summary["steps"], fit / "adapter")
    wanted = args.points or list(points)
    curve_path = out / "curve.json"
    curve: dict[str, Any] = json.loads(curve_path.read_text()) if curve_path.is_file() else {"points": {}}
    curve["cpu"] = cpu_name()
    curve["fit"] = {k: summary.get(k) for k in ("trajectories", "steps", "train_seconds", "peak_rss_mb")}
    curve["settings"] = summary.get("settings")
    for name in wanted:
        steps, adapter = points[name]
        row = curve["points"].setdefault(name, {})
        row.update(
            steps=steps,
            episodes_seen=steps * batch,
            train_loss_last4=sum(losses[max(steps - 4, 0) : steps]) / len(losses[max(steps - 4, 0) : steps]),
        )
        model = merged_point(args.model, adapter, work / name, args.dtype)
        tag = f"-{args.tag}" if args.tag else ""
        if args.val_episodes:
            val = play(
                model, "train", args.val_offset, args.val_episodes, args, work / name / f"val{tag}.jsonl"
            )
            row[f"val{tag}"] = val
            print(f"{name} (N={steps * batch}) val{tag}: {val['successes']}/{val['episodes']}", flush=True)
            curve_path.write_text(json.dumps(curve, indent=2) + "\n")
        if name in args.test_points:
            test = play(model, "test", 0, args.test_episodes, args, work / name / f"test{tag}.jsonl")
            row[f"test{tag}"] = test
            print(f"{name} (N={steps * batch}) test{tag}: {test['successes']}/{test['episodes']}", flush=True)
            curve_path.write_text(json.dumps(curve, indent=2) + "\n")
    plot(curve, out / "curve.png")


def plot(curve: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in curve["points"].values() if "val" in r), key=lambda r: r["episodes_seen"])
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("val", "validation (train split, held out)"), ("test", "test (demo's tasks)")):
        pts = [r for r in rows if key in r]
        if not pts:
            continue
        xs = [r["episodes_seen"] for r in pts]
        ys = [r[key]["rate"] for r in pts]
        lo = [r[key]["rate"] - r[key]["ci95"][0] for r in pts]
        hi = [r[key]["ci95"][1] - r[key]["rate"] for r in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.axhline(0.039, color="grey", ls=":", label="demo's base (64 episodes x 2 epochs): 3.9% test")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("distinct oracle episodes seen (1 epoch, batch 4)")
    ax.set_ylabel("greedy task success")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(f"retail-v2 warm start, SmolLM2-135M ({curve['cpu']})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
