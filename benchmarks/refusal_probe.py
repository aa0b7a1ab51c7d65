"""The refusal-without-read probe of ``trace check`` on retail-v2 and the retail derived envs (issue 52).

    python benchmarks/refusal_probe.py --label before --seeds 200

``adversarial/refusal_without_read`` (``trace_gym.core.validation.RefusalWithoutRead``): the oracle's first
refusal ("cannot be cancelled", "not available", "not enough") said before the reads that justify it, those
reads made right after it. Per env (and level for a derived env): the seeds the probe applies to (its control,
the same reads moved just before the refusal, scores 1.0), the mean reward, how many passed, and per passing
seed what the refusal was about; also the suite's verdict (mean <= ``adversarial_max_mean``). Results go under
``--label`` in benchmarks/results/refusal_probe.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym  # noqa: E402

import trace_gym  # noqa: E402, F401 - registers the ids
from trace_gym.core.validation import REFUSAL, RefusalWithoutRead, ValidationConfig, play_probe  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "refusal_probe.json"
ENVS = ("trace/retail-v2", "trace/retail-precondition-checking-v0")


def measure(env_id: str, level: int | None, seeds: int) -> dict[str, Any]:
    config = ValidationConfig(adversarial_seeds=seeds)
    kwargs = {} if level is None else {"difficulty": level}
    env = gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped
    other = gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped
    started = time.perf_counter()
    rewards, passed_on, kinds = [], [], {}
    for seed in range(seeds):
        reward, probe = play_probe(env, other, RefusalWithoutRead, seed, config)
        if probe is None or not probe.applies:
            continue
        rewards.append(reward)
        refusal = next(
            a["content"]
            for a in probe.oracle
            if isinstance(a, dict) and REFUSAL.search(a.get("content") or "")
        )
        kind = "status" if "cancelled" in refusal else "balance" if "gift card" in refusal else "unavailable"
        row = kinds.setdefault(kind, {"applies": 0, "passed": 0})
        row["applies"] += 1
        row["passed"] += reward == 1.0
        if reward == 1.0 and len(passed_on) < 10:
            passed_on.append({"seed": seed, "refusal": refusal[:160]})
    mean = sum(rewards) / len(rewards) if rewards else None
    return {
        "applies": len(rewards),
        "mean_reward": mean,
        "passed": sum(r == 1.0 for r in rewards),
        "by_refusal": kinds,
        "probe_fails_as_it_must": mean is None or mean <= config.adversarial_max_mean,
        "seconds": round(time.perf_counter() - started, 1),
        "passed_on": passed_on,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--label", required=True, help="before / after")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--levels", default="1,2,4")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    runs = data.setdefault(args.label, {"seeds": args.seeds, "split": "train", "envs": {}})
    for env_id in ENVS:
        levels: list[int | None] = (
            [None] if env_id == "trace/retail-v2" else [int(x) for x in args.levels.split(",")]
        )
        for level in levels:
            row = measure(env_id, level, args.seeds)
            runs["envs"].setdefault(env_id, {})["all" if level is None else str(level)] = row
            mean = "-" if row["mean_reward"] is None else f"{row['mean_reward']:.3f}"
            print(
                f"{env_id:42} {level or '-':>3} applies {row['applies']:4d} mean {mean} passed {row['passed']:3d} "
                f"{row['by_refusal']} {row['seconds']}s",
                flush=True,
            )
            args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
