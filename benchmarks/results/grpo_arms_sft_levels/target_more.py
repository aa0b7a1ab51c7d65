"""More target test tasks for issue 29's "not worse than the base": the base, the all-together arm and the fit on
the *next* retail-v2 test tasks that need precise-arguments (after the first 24 that ``grpo_arms.py`` plays),
with its own evaluation settings (greedy, 12 turns x 192 tokens, 24 episodes at once).

One task more or less on 24 cannot tell "not worse" from noise; this doubles the paired sample without touching
the train split (test tasks are only evaluated, never trained or tuned on). Each model's rewards are written as
soon as it finishes, so a stopped run keeps what it played.

Usage: python target_more.py RUN_DIR POLICY [N_MORE]   (RUN_DIR: a grpo_arms --out with sft/ and all/)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import grpo_arms  # noqa: E402 - the benchmark's own task selection and evaluation settings


def main(run_dir: Path, policy_dir: str, n_more: int = 24) -> None:
    from trace_train.policy_factory import make_policy

    first = 24  # grpo_arms.py's default --target-eval: those tasks are in <run_dir>/evals/
    s = grpo_arms.parse_settings(
        [
            "--policy",
            policy_dir,
            "--out",
            str(run_dir),
            "--arms",
            "none",
            "--target-eval",
            str(first + n_more),
        ]
    )
    specs = grpo_arms.target_test_specs(s.target, s.capability, first + n_more, s.target_difficulty)[first:]
    out = run_dir / "evals" / f"target_more_{n_more}.json"
    record = json.loads(out.read_text()) if out.is_file() else {}
    record.update({"cpu": grpo_arms.cpu_name(), "target_seeds": [spec.seed for spec in specs]})
    models = {"base": None, "all": str(run_dir / "all" / "adapter"), "sft": str(run_dir / "sft" / "adapter")}
    for label, adapter in models.items():
        if label in record.get("rewards", {}):
            continue
        started = time.time()
        policy = make_policy(policy_dir, adapter=adapter, dtype=s.dtype)
        rewards = [float(r["reward"]) for r in grpo_arms.episodes(policy, s.target, specs, s)]
        record.setdefault("rewards", {})[label] = rewards
        record.setdefault("wall_s", {})[label] = round(time.time() - started, 1)
        out.write_text(json.dumps(record, indent=2) + "\n")
        print(
            f"{label}: {sum(r >= 1.0 for r in rewards)}/{len(specs)} ({record['wall_s'][label]} s)",
            flush=True,
        )
        del policy
    base = record["rewards"]["base"]
    for label in ("all", "sft"):
        print(
            f"{label} vs base on these {len(specs)} tasks: {grpo_arms.paired(base, record['rewards'][label])}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *(int(x) for x in sys.argv[3:4]))
