"""Evaluate issue 29's levels-spread SFT fit with `benchmarks/grpo_arms.py`'s own evaluation: the same 16 held-out
env tasks at the deepest start and the same 24 retail-v2 test tasks that need precise-arguments, greedy, 12 turns x
192 tokens, 24 episodes at once (the benchmark then played 16 at once; 24 is now its default).

The session-39 run of `command.sh` was stopped after the fit (`sft/adapter` written): its base evaluation and the
fixed arm on top would not have finished in the session. Usage: python evaluate_fit.py RUN_DIR POLICY
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import grpo_arms  # noqa: E402 - the benchmark's own task selection and env registration


def main(run_dir: Path, policy_dir: str) -> None:
    s = grpo_arms.parse_settings(
        [
            "--policy",
            policy_dir,
            "--out",
            str(run_dir),
            "--arms",
            "none",
            "--sft-episodes",
            "24",
            "--sft-levels",
            "1",
            "2",
            "3",
            "4",
        ]
    )
    env_id = grpo_arms.register_capability_env(s)
    specs = grpo_arms.target_test_specs(s.target, s.capability, s.target_eval, s.target_difficulty)
    started = time.time()
    env_success, target_rewards = grpo_arms.evaluate(
        "sft", policy_dir, str(run_dir / "sft" / "adapter"), env_id, s, specs
    )
    result = {
        "cpu": grpo_arms.cpu_name(),
        "env_id": env_id,
        "target_test_seeds": [spec.seed for spec in specs],
        "env_success": env_success,
        "target_rewards": target_rewards,
        "sft_summary": json.loads((run_dir / "sft" / "sft_summary.json").read_text()),
        "wall_s": round(time.time() - started, 1),
    }
    (run_dir / "sft_eval.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(
        f"env {sum(env_success)}/{len(env_success)}, "
        f"target {sum(x >= 1.0 for x in result['target_rewards'])}/{len(specs)}, {result['wall_s']} s"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
