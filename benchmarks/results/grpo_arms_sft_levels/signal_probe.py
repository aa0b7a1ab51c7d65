"""Where the all-together arm's signal went: per-task success of the agent that trains, per start depth.

Plays G samples (the arms' temperature) on each of S train tasks of the capability env at each level, with the
arms' start adapter (the SFT fit), and prints per level: per-task success counts, the informative share of
groups of G and of the groups of 4 the arms train on (each task's first 4 samples), and the share of tasks
that are all-success or all-fail. Keeps every episode's record (``<out>/probe-level<L>.jsonl``) to read the
failures. Train tasks from ``--first-task`` (apart from GRPO's, which start at 0, and the fit's at 100,000).

    python benchmarks/results/grpo_arms_sft_levels/signal_probe.py /work/runs/arms-levels \
        /work/runs/demo/01-base/sft-0/merged --levels 1 --tasks 12 --group 8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run", type=Path, help="the grpo_arms --out (its sft/adapter is the agent)")
    p.add_argument("policy", help="the base agent (the demo's warm start, merged)")
    p.add_argument("--levels", type=int, nargs="+", default=[1])
    p.add_argument("--tasks", type=int, default=12)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--first-task", type=int, default=200_000)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=32)
    ns = p.parse_args()

    spec = importlib.util.spec_from_file_location("grpo_arms", REPO / "benchmarks" / "grpo_arms.py")
    arms = importlib.util.module_from_spec(spec)
    sys.modules["grpo_arms"] = arms
    spec.loader.exec_module(arms)
    from trace_gym.derived.levels import DEFAULT_LADDER
    from trace_gym.registration import make_env
    from trace_gym.seeds import reset_seed
    from trace_train.episodes import run_episodes
    from trace_train.policy_factory import make_policy
    from trace_train.rollout import ResetSpec, SamplingConfig

    settings = argparse.Namespace(
        target="trace/retail-v2", capability="precise-arguments", target_difficulty=1, ladder=DEFAULT_LADDER
    )
    env_id = arms.register_capability_env(settings)
    probe = make_env(env_id)
    seeds = [reset_seed("train", ns.first_task + i, probe) for i in range(ns.tasks)]
    probe.close()
    policy = make_policy(ns.policy, adapter=str(ns.run / "sft" / "adapter"), dtype="auto")
    summary = {
        "cpu": arms.cpu_name(),
        "env_id": env_id,
        "settings": vars(ns) | {"run": str(ns.run)},
        "levels": {},
    }
    for level in ns.levels:
        specs = [
            ResetSpec(seed=seed, group=i, split="train", difficulty=level)
            for i, seed in enumerate(seeds)
            for _ in range(ns.group)
        ]
        started = time.time()
        with open(
            ns.run / f"probe-level{level}.jsonl", "w"
        ) as f:  # each episode as it ends: a stopped probe keeps them

            def keep(record: dict) -> None:
                f.write(json.dumps(record, default=str) + "\n")
                f.flush()

            records = run_episodes(
                policy,
                env_id,
                specs,
                SamplingConfig(temperature=ns.temperature, max_new_tokens=192),  # the arms' caps
                max_turns=12,
                batch_size=ns.batch_size,
                on_record=keep,
            )
        wins = [
            [r["reward"] >= 1.0 for r in records[i * ns.group : (i + 1) * ns.group]] for i in range(ns.tasks)
        ]
        counts = [sum(w) for w in wins]
        mixed = lambda ws: 0 < sum(ws) < len(ws)  # noqa: E731
        row = {
            "successes_per_task": counts,
            "success": sum(counts) / (ns.tasks * ns.group),
            f"informative_share_G{ns.group}": sum(map(mixed, wins)) / ns.tasks,
            "informative_share_G4": sum(mixed(w[:4]) for w in wins) / ns.tasks,
            "all_success_tasks": sum(c == ns.group for c in counts),
            "all_fail_tasks": sum(c == 0 for c in counts),
            "turns_mean": sum(r["turns"] for r in records) / len(records),
            "wall_s": round(time.time() - started, 1),
        }
        summary["levels"][str(level)] = row
        print(f"level {level}: {json.dumps(row)}", flush=True)
    (ns.run / "signal_probe.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
