"""Isolation of the retail-derived capability envs, per start depth (issue 26, docs/derived.md).

    python benchmarks/derived_isolation.py --seeds 50            # all seven capabilities, levels 1-4
    python benchmarks/derived_isolation.py --seeds 20 --capabilities policy-adherence --levels 1,4

For each env ``DerivedCapabilityEnv(target_id="trace/retail-v2", capability=c)`` and level it prints

* the isolation row: success (and mean milestone reward) of the oracle continuation and of every "oracle
  minus one capability" agent from the start point on (``oracle_actions(without=...)``), the same agents
  ``trace_gym.synthesis.isolation`` plays (goodbye once the script ends);
* every ``trace check`` probe (degenerate policies and adversarial probes, played as ``validate_env`` plays
  them): success and mean milestone reward over the seeds it applies to, against the milestone reward of the
  agent lacking the env's own capability.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trace_gym.core.validation import (  # noqa: E402
    ADVERSARIAL_PROBES,
    DEGENERATE_POLICIES,
    ValidationConfig,
    play_probe,
    run_policy,
)
from trace_gym.derived.env import DerivedCapabilityEnv  # noqa: E402
from trace_gym.derived.shaped import SHAPED_KEY  # noqa: E402
from trace_gym.synthesis.isolation import ABBREVIATIONS, DIAGONAL_MAX, OFF_DIAGONAL_MIN, play  # noqa: E402
from trace_gym.targets.retail.tasks import CAPABILITIES  # noqa: E402

TARGET = "trace/retail-v2"


def recording(env: DerivedCapabilityEnv) -> DerivedCapabilityEnv:
    """Keep the last step's info on the env (the probes' runners return the reward only)."""
    step = env.step

    def recorded(action: Any):
        result = step(action)
        env.last_info = result[4]  # type: ignore[attr-defined]
        return result

    env.step = recorded  # type: ignore[method-assign]
    return env


def shaped(env: DerivedCapabilityEnv) -> float:
    return float(getattr(env, "last_info", {}).get("reward_components", {}).get(SHAPED_KEY, 0.0))


def exercised(env: DerivedCapabilityEnv) -> set[str]:
    """The capabilities the episode's continuation exercises (a decision point at or after the start)."""
    return {c for c, points in env.target.decision_points().items() if any(p >= env.prefix for p in points)}


def isolation_row(
    env: DerivedCapabilityEnv, level: int, seeds: int
) -> dict[str, tuple[float, float, float, int]]:
    """Agent -> (success, mean milestone reward, success on the seeds whose continuation does not exercise
    the lacking capability, how many those are) over train seeds 0..seeds-1."""
    row: dict[str, tuple[float, float, float, int]] = {}
    for lacking in [None, *env.ablatable_capabilities]:
        rewards, milestones, clean = [], [], []
        for seed in range(seeds):
            env.reset(seed=seed, options={"split": "train", "difficulty": level})
            env.last_info = {}  # type: ignore[attr-defined]
            needs = lacking in exercised(env)
            rewards.append(play(env, env.oracle_actions(without=lacking)) == 1.0)
            milestones.append(shaped(env))
            if not needs:
                clean.append(rewards[-1])
        row[lacking or "oracle"] = (
            float(np.mean(rewards)),
            float(np.mean(milestones)),
            float(np.mean(clean)) if clean else float("nan"),
            len(clean),
        )
    return row


def probe_rows(env: DerivedCapabilityEnv, other: DerivedCapabilityEnv, level: int, seeds: int):
    """Probe -> (success, mean milestone reward, seeds it applied to)."""
    env.difficulty = other.difficulty = level
    config = ValidationConfig(seeds=seeds, degenerate_seeds=seeds, adversarial_seeds=seeds)
    rows: dict[str, tuple[float, float, int]] = {}
    for name, policy in DEGENERATE_POLICIES.items():
        rewards, milestones = [], []
        for seed in range(seeds):
            env.last_info = {}  # type: ignore[attr-defined]
            rewards.append(run_policy(env, policy, seed, config) == 1.0)
            milestones.append(shaped(env))
        rows[f"degenerate/{name}"] = (float(np.mean(rewards)), float(np.mean(milestones)), seeds)
    for probe_type in ADVERSARIAL_PROBES:
        rewards, milestones = [], []
        for seed in range(seeds):
            env.last_info = {}  # type: ignore[attr-defined]
            reward, probe = play_probe(env, other, probe_type, seed, config)
            if probe is not None and probe.applies:
                rewards.append(reward == 1.0)
                milestones.append(shaped(env))
        if rewards:
            rows[f"adversarial/{probe_type.name}"] = (
                float(np.mean(rewards)),
                float(np.mean(milestones)),
                len(rewards),
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--probe-seeds", type=int, default=None, help="default: --seeds")
    parser.add_argument("--levels", default="1,2,3,4")
    parser.add_argument("--capabilities", default=",".join(CAPABILITIES))
    parser.add_argument("--no-probes", action="store_true")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    probe_seeds = args.probe_seeds or args.seeds
    for capability in args.capabilities.split(","):
        started = time.time()
        env = recording(DerivedCapabilityEnv(target_id=TARGET, capability=capability))
        other = DerivedCapabilityEnv(target_id=TARGET, capability=capability)
        agents = list(env.ablatable_capabilities)
        print(f"\n## {capability} ({args.seeds} train seeds per level)\n")
        print("| level | oracle | " + " | ".join(f"-{ABBREVIATIONS[a]}" for a in agents) + " | cells out |")
        print("|---|---|" + "---|" * len(agents) + "---|")
        own_shaped: dict[int, float | None] = {}
        for level in levels:
            row = isolation_row(env, level, args.seeds)
            out = []
            for agent in agents:
                success = row[agent][0]
                if agent == capability and success > DIAGONAL_MAX:
                    out.append(f"diag {ABBREVIATIONS[agent]}")
                elif agent != capability and success < OFF_DIAGONAL_MIN:
                    out.append(f"off {ABBREVIATIONS[agent]}")
            own_shaped[level] = row[capability][1] if capability in row else None
            cells = " | ".join(
                ("**{:.2f}** ({:.2f})" if a == capability else "{:.2f} ({:.2f}; {:.2f} n={})").format(*row[a])
                for a in agents
            )
            print(
                f"| {level} | {row['oracle'][0]:.2f} ({row['oracle'][1]:.2f}) | {cells} | {', '.join(out) or '-'} |"
            )
        print(
            "\nsuccess (mean milestone reward; off the diagonal also the success on the n seeds whose "
            "continuation does not exercise the lacking capability); bold: the agent lacking the env's own "
            "capability",
            flush=True,
        )
        if args.no_probes:
            continue
        print(
            f"\nprobes ({probe_seeds} seeds): success / mean milestones per level; own = agent lacking {capability}\n"
        )
        table: dict[str, dict[int, tuple[float, float, int]]] = {}
        for level in levels:
            for name, value in probe_rows(env, other, level, probe_seeds).items():
                table.setdefault(name, {})[level] = value
        print("| probe | " + " | ".join(f"L{level}" for level in levels) + " |")
        print("|---|" + "---|" * len(levels))
        worst = {level: (0.0, 0.0) for level in levels}
        for name, by_level in table.items():
            cells = []
            for level in levels:
                if level not in by_level:
                    cells.append("n/a")
                    continue
                success, milestones, n = by_level[level]
                worst[level] = (max(worst[level][0], success), max(worst[level][1], milestones))
                cells.append(f"{success:.2f} / {milestones:.2f} (n={n})")
            print(f"| {name} | " + " | ".join(cells) + " |")
        own = " | ".join(
            "n/a" if own_shaped[level] is None else f"{own_shaped[level]:.2f}" for level in levels
        )
        print(
            "| **max probe** | "
            + " | ".join(f"{worst[lv][0]:.2f} / {worst[lv][1]:.2f}" for lv in levels)
            + " |"
        )
        print(f"| agent lacking {capability} (milestones) | {own} |")
        print(f"\n{time.time() - started:.0f} s", flush=True)
        env.close()
        other.close()


if __name__ == "__main__":
    main()
