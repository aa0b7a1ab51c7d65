"""Replay of derived capability envs (issue 26): prefix + the target oracle's continuation scores 1.0.

    python benchmarks/derived_replay.py --seeds 200                    # retail's seven and BFCL's four
    python benchmarks/derived_replay.py --seeds 50 --targets trace/retail-v2

Per env and start depth: the share of train seeds where (a) the derived env's episode (prefix + oracle
continuation) scores 1.0 with milestone reward 1.0, and (b) the same actions replayed in a fresh target on the
source task (``info["source"]``) score 1.0; and the mean prefix length in oracle actions.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trace_gym  # noqa: E402,F401 - registers the targets
from trace_gym.derived.env import DerivedCapabilityEnv  # noqa: E402
from trace_gym.derived.levels import LEVELS  # noqa: E402
from trace_gym.derived.shaped import SHAPED_KEY  # noqa: E402
from trace_gym.targets.retail.tasks import CAPABILITIES  # noqa: E402

TARGETS = {
    "trace/retail-v2": CAPABILITIES,
    "trace/bfcl-multi-turn-v0": (
        "state-changing-calls",
        "information-retrieval",
        "missing-function-awareness",
        "missing-parameter-awareness",
    ),
}


def play(env, actions) -> tuple[float, dict]:
    result = None
    for action in actions:
        result = env.step(action)
        if result[2] or result[3]:
            return float(result[1]), result[4]
    return 0.0, {}


def replay(target_id: str, capability: str, seeds: int) -> list[str]:
    env = DerivedCapabilityEnv(target_id=target_id, capability=capability)
    target = gym.make(target_id, disable_env_checker=True).unwrapped
    rows = []
    for level in LEVELS:
        derived, fresh, milestones, prefixes = [], [], [], []
        for seed in range(seeds):
            _, info = env.reset(seed=seed, options={"split": "train", "difficulty": level})
            continuation = env.oracle_actions()
            reward, last = play(env, continuation)
            derived.append(reward == 1.0)
            milestones.append(last.get("reward_components", {}).get(SHAPED_KEY) == 1.0)
            source = info["source"]
            target.reset(seed=source["seed"], options={"split": source["split"]})
            prefix = target.oracle_actions()[: source["prefix_actions"]]
            fresh.append(play(target, [*prefix, *continuation])[0] == 1.0)
            prefixes.append(source["prefix_actions"])
        rows.append(
            f"| {capability} | {level} | {sum(derived)}/{seeds} | {sum(milestones)}/{seeds} | {sum(fresh)}/{seeds} "
            f"| {np.mean(prefixes):.1f} |"
        )
    env.close()
    target.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--targets", default=",".join(TARGETS))
    args = parser.parse_args()
    for target_id in args.targets.split(","):
        if "bfcl" in target_id and importlib.util.find_spec("bfcl_eval") is None:
            print(f"\n{target_id}: skipped (bfcl-eval not installed)")
            continue
        print(f"\n## {target_id} ({args.seeds} train seeds per env and level)\n")
        print("| capability | level | derived 1.0 | milestones 1.0 | fresh target 1.0 | mean prefix |")
        print("|---|---|---|---|---|---|")
        for capability in TARGETS[target_id]:
            started = time.time()
            for row in replay(target_id, capability, args.seeds):
                print(row, flush=True)
            print(f"<!-- {capability}: {time.time() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
