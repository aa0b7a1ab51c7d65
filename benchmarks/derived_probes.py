"""The derived-env probes of ``trace check`` on every derived env (issue 52).

    python benchmarks/derived_probes.py --seeds 50 --levels 1,4

Per env and level: the oracle continuation without its last tool call, and another source task's
continuation (``trace_gym.core.validation``: ``OracleWithoutLastCall``, ``OtherSourceOracle``), played as
``trace check`` plays them on the train split. Each must fail: the row shows the mean reward over the seeds the
probe applies to, how many of those it passed, the suite's verdict (mean <= ``adversarial_max_mean``) and the
seconds the probe took. Writes benchmarks/results/derived_probes.json.
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
from trace_gym.core.validation import (  # noqa: E402
    ADVERSARIAL_PROBES,
    ValidationConfig,
    play_probe,
)
from trace_gym.derived.pool import DEFAULT_WINDOW  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from derived_instances import derived_ids  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "derived_probes.json"
PROBES = [p for p in ADVERSARIAL_PROBES if p.derived_only]


def measure(env_id: str, level: int, seeds: int) -> dict[str, Any]:
    config = ValidationConfig(adversarial_seeds=seeds)
    env = gym.make(env_id, disable_env_checker=True, difficulty=level).unwrapped
    other = gym.make(env_id, disable_env_checker=True, difficulty=level).unwrapped
    env.reset(seed=0, options={"split": "train"})  # the pool is read (or scanned) outside the timing
    rows = {}
    for probe_type in PROBES:
        started = time.perf_counter()
        rewards, passed_on = [], []
        for seed in range(seeds):
            reward, probe = play_probe(env, other, probe_type, seed, config)
            if probe is not None and probe.applies:
                rewards.append(reward)
                if reward == 1.0:
                    passed_on.append({"probe_seed": seed, **env.source_info()})
        mean = sum(rewards) / len(rewards) if rewards else None
        rows[probe_type.name] = {
            "applies": len(rewards),
            "mean_reward": mean,
            "passed": len(passed_on),
            "probe_fails_as_it_must": mean is None or mean <= config.adversarial_max_mean,
            "seconds": round(time.perf_counter() - started, 1),
            "passed_on": passed_on[:10],
        }
    env.close()
    other.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--levels", default="1")
    parser.add_argument("--ids", default="", help="comma-separated env ids (default: every derived env)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    ids = [i for i in args.ids.split(",") if i] or derived_ids()
    levels = [int(x) for x in args.levels.split(",")]
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    data.setdefault("seeds", args.seeds)
    data.setdefault("window", DEFAULT_WINDOW)
    results = data.setdefault("envs", {})
    print(f"{'env':52} {'lvl':>3} {'probe':26} {'applies':>7} {'mean':>6} {'passed':>6} {'ok':>4} {'s':>6}")
    for env_id in ids:
        for level in levels:
            rows = measure(env_id, level, args.seeds)
            results.setdefault(env_id, {})[str(level)] = rows
            for name, row in rows.items():
                mean = "-" if row["mean_reward"] is None else f"{row['mean_reward']:.3f}"
                ok = "pass" if row["probe_fails_as_it_must"] else "FAIL"
                print(
                    f"{env_id:52} {level:>3} {name:26} {row['applies']:>7} {mean:>6} {row['passed']:>6} "
                    f"{ok:>4} {row['seconds']:>6}",
                    flush=True,
                )
            args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
