"""Issue 49's first check: does the planted base lack exactly the planted capability?

A planted base (``trace sft --teacher oracle-without:CAP``, shipped in trace_train/bases) is played on the demo's
test tasks exactly as the shipped base was (benchmarks/base_curve.py: merged as the pipeline's base stage merges
its warm start, greedy, difficulty 1, 12 turns, 192 tokens, batch 64). Each task is then labelled by whether it
needs the capability: the oracle without it (a deterministic scripted agent) fails there. The planted base is
compared with the shipped base's recorded per-task outcomes (its recipe's evaluation, task order 0..N-1), paired,
on all tasks, on those that need the capability and on those that do not. What a clean plant looks like: the
planted base close to the shipped base where the capability is not needed, far below it where it is.

Every evaluation is resumable (its JSONL keeps finished episodes). Writes ``<out>/known_answer.json``.

    python benchmarks/known_answer.py --planted retail-v2-smollm2-135m-without-policy-adherence
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from trace_train.bases import BASES_DIR, by_name, materialise
from trace_train.bases.commands import cpu_name
from trace_train.config import EvalSettings
from trace_train.stats import mcnemar_exact, wilson_interval

ENV = "trace/retail-v2"


def play(model: str, args: argparse.Namespace, path: Path, **overrides: Any) -> list[dict[str, Any]]:
    """``model`` greedily on test tasks 0..N-1, resumable; the records in task order."""
    from trace_train.evaluate import evaluate
    from trace_train.policy_factory import make_policy

    policy = make_policy(model, dtype=args.dtype, engine="cached", tool_format="json")
    settings = EvalSettings(
        episodes=args.test_episodes,
        seed_offset=0,
        max_turns=overrides.get("max_turns", args.max_turns),
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    result = evaluate(
        policy, ENV, settings, split="test", difficulty=args.difficulty, out_jsonl=path, resume=True
    )
    return result.trajectories


def rate(outcomes: list[int]) -> dict[str, Any]:
    n, wins = len(outcomes), sum(outcomes)
    return {
        "successes": wins,
        "episodes": n,
        "rate": wins / n if n else 0.0,
        "ci95": list(wilson_interval(wins, n)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--planted", default="retail-v2-smollm2-135m-without-policy-adherence")
    p.add_argument(
        "--reference", default="retail-v2-smollm2-135m", help="the shipped base it is compared with"
    )
    p.add_argument("--work", default="runs/known-answer")
    p.add_argument("--out", default="benchmarks/results/known_answer")
    p.add_argument("--test-episodes", type=int, default=128)
    p.add_argument("--max-turns", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--difficulty", type=int, default=1)
    p.add_argument("--dtype", default="bfloat16", help="the shipped base's evaluation ran in bfloat16")
    args = p.parse_args()

    planted = json.loads((BASES_DIR / args.planted / "recipe.json").read_text())
    reference = json.loads((BASES_DIR / args.reference / "recipe.json").read_text())
    teacher = planted["sft"].get("teacher", "oracle")
    if not teacher.startswith("oracle-without:"):
        raise SystemExit(
            f"error: {args.planted} was fitted on {teacher!r}, not oracle-without:CAP: nothing planted"
        )
    capability = teacher.removeprefix("oracle-without:")
    ref_eval = reference.get("evaluation", {})
    if ref_eval.get("settings", {}).get("max_turns") != args.max_turns:
        raise SystemExit(
            f"error: {args.reference}'s evaluation used other settings: {ref_eval.get('settings')}"
        )
    ref_outcomes = [int(x) for x in ref_eval["test_outcomes"][: args.test_episodes]]

    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the scripted agents need more turns than the model's cap: the label is a property of the task, not of a cap
    ablated = play(teacher, args, work / f"{teacher.replace(':', '-')}.jsonl", max_turns=30)
    oracle = play("oracle", args, work / "oracle.jsonl", max_turns=30)
    needs = [int(r["reward"] < 1.0) for r in ablated]
    started = time.time()
    model = materialise(by_name(args.planted), work / args.planted, args.dtype)  # verified, merged, cached
    records = play(str(model), args, work / args.planted / "test.jsonl")
    wall = time.time() - started
    mine = [int(r["reward"] >= 1.0) for r in records]

    def split(which: int | None) -> dict[str, Any]:
        idx = [i for i in range(len(mine)) if which is None or needs[i] == which]
        a, b = [ref_outcomes[i] for i in idx], [mine[i] for i in idx]
        # the target's own label of the capability in the planted base's episodes (its milestone): PRESENT,
        # LACKING, or absent where the episode never reached a point that exercises it
        labels = [records[i].get("requirements", {}).get(capability, "not exercised") for i in idx]
        # what the target blames first in each failed episode (step 1 reads these labels, not the plant)
        blamed = [
            (records[i].get("first_failure") or {}).get("capability") or "none" for i in idx if not mine[i]
        ]
        return {
            "tasks": len(idx),
            "reference": rate(a),
            "planted": rate(b),
            "mcnemar": mcnemar_exact([bool(x) for x in a], [bool(x) for x in b]),
            "planted_capability_label": {label: labels.count(label) for label in sorted(set(labels))},
            "planted_first_failure": {
                c: blamed.count(c) for c in sorted(set(blamed), key=blamed.count, reverse=True)
            },
        }

    report = {
        "cpu": cpu_name(),
        "capability": capability,
        "planted": args.planted,
        "reference": args.reference,
        "settings": {
            k: getattr(args, k) for k in ("test_episodes", "max_turns", "max_new_tokens", "batch_size")
        }
        | {"difficulty": args.difficulty, "dtype": args.dtype},
        "oracle_solves": sum(r["reward"] >= 1.0 for r in oracle),
        "ablated_oracle_solves": len(needs) - sum(needs),
        "all": split(None),
        "needs_capability": split(1),
        "does_not_need": split(0),
        "planted_cut_by_turn_cap": sum(r.get("cut") == "max_turns" for r in records),
        "planted_wall_s": round(wall, 1),  # 0-ish when every episode was already kept
        "needs": needs,
        "planted_outcomes": mine,
        "reference_outcomes": ref_outcomes,
    }
    (out / "known_answer.json").write_text(json.dumps(report, indent=2) + "\n")
    for key in ("all", "needs_capability", "does_not_need"):
        row = report[key]
        print(
            f"{key:17s} {row['tasks']:4d} tasks: shipped {row['reference']['successes']:3d}  "
            f"planted {row['planted']['successes']:3d}  (only shipped {row['mcnemar']['only_a']}, "
            f"only planted {row['mcnemar']['only_b']}, exact McNemar p={row['mcnemar']['p_value']:.3g}); "
            f"planted's {capability} label: {row['planted_capability_label']}"
        )


if __name__ == "__main__":
    main()
