"""Evaluate issue 29's levels-spread SFT fit as `benchmarks/grpo_arms.py` evaluates every row: the same 16 held-out
env tasks at the deepest start and the same 24 retail-v2 test tasks that need precise-arguments, greedy, 12 turns x
192 tokens; one batch per env (the benchmark's batch of 16 plays the target's 24 tasks in two waves).

The session-39 run of `command.sh` was stopped after the fit (`sft/adapter` written): its base evaluation and the
fixed arm on top would not have finished in the session. Usage: python evaluate_fit.py RUN_DIR POLICY
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import grpo_arms  # noqa: E402 - the benchmark's own task selection and env registration

from trace_gym.derived.levels import DEFAULT_LADDER, ladder_levels  # noqa: E402
from trace_train.episodes import run_episodes  # noqa: E402
from trace_train.policy_factory import make_policy  # noqa: E402
from trace_train.rollout import ResetSpec, SamplingConfig  # noqa: E402


def main(run_dir: Path, policy_dir: str) -> None:
    s = grpo_arms.Settings(
        policy=policy_dir,
        capability="precise-arguments",
        target="trace/retail-v2",
        target_difficulty=1,
        arms=[],
        budget=24,
        group_size=4,
        groups_per_step=2,
        level=1,
        max_turns=12,
        max_new_tokens=192,
        env_eval=16,
        target_eval=24,
        lr=1e-4,
        temperature=1.0,
        sft_episodes=24,
        sft_epochs=1,
        sft_seed_offset=100_000,
        sft_levels=[1, 2, 3, 4],
        micro_batch_tokens=1024,
        ladder=DEFAULT_LADDER,
        out=run_dir,
        dtype="auto",
    )
    env_id = grpo_arms.register_capability_env(s)
    specs = grpo_arms.target_test_specs(s.target, s.capability, s.target_eval, s.target_difficulty)
    started = time.time()
    policy = make_policy(s.policy, adapter=str(run_dir / "sft" / "adapter"), dtype=s.dtype)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=s.max_new_tokens)
    deepest = max(ladder_levels(s.ladder))
    env_specs = [ResetSpec(seed=i, group=i, split="test", difficulty=deepest) for i in range(s.env_eval)]
    env_records = run_episodes(policy, env_id, env_specs, sampling, max_turns=s.max_turns, batch_size=24)
    target_records = run_episodes(policy, s.target, specs, sampling, max_turns=s.max_turns, batch_size=24)
    result = {
        "cpu": grpo_arms.cpu_name(),
        "env_id": env_id,
        "target_test_seeds": [spec.seed for spec in specs],
        "env_success": [r["reward"] >= 1.0 for r in env_records],
        "target_rewards": [float(r["reward"]) for r in target_records],
        "target_records": [
            {k: r[k] for k in ("seed", "reward", "turns", "requirements") if k in r} for r in target_records
        ],
        "sft_summary": json.loads((run_dir / "sft" / "sft_summary.json").read_text()),
        "wall_s": round(time.time() - started, 1),
    }
    (run_dir / "sft_eval.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(
        f"env {sum(result['env_success'])}/{len(env_records)}, "
        f"target {sum(x >= 1.0 for x in result['target_rewards'])}/{len(specs)}, {result['wall_s']} s"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
