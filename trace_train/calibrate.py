"""``trace calibrate``: measure an env's difficulty levels with the policy that will train on it.

The statistics and the bands live with the env spec they are written into
(:mod:`trace_gym.synthesis.calibration`); here the real policy gathers the reward groups: G samples on each of
S train seeds per level, all levels in one continuously batched stream.

    trace calibrate ENV_ID --model smollm2-135m       difficulty against TRACE's bands, written into spec.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
from rich.table import Table

from trace_gym.console import make_console
from trace_gym.registration import make_env
from trace_gym.seeds import reset_seed
from trace_gym.synthesis.calibration import Bands, Calibration, choose_level, level_stats
from trace_train.ceiling import OracleCeiling, fill_caps, oracle_ceiling, require_ceiling
from trace_train.config import (
    CalibrateArgs,
    CalibrationSettings,
    add_dataclass_flags,
    from_namespace,
    settings_of,
)

console = make_console()


def prompt_tokens(policy: Any, env_id: str, difficulty: int | None = None) -> int:
    """Tokens of the system prompt plus the tools, as the policy's chat template renders them (seed 0)."""
    env = gym.make(env_id, **({"difficulty": difficulty} if difficulty is not None else {}))
    obs, info = env.reset(seed=0, options={"split": "train"})
    renderer = policy.renderer
    text = renderer.render([obs[0]], list(info.get("tools") or []), add_generation_prompt=False)
    env.close()
    return len(renderer.encode(text))


def level_ceilings(
    policy: Any, env_id: str, levels: list[int], s: CalibrationSettings, first_seed: int
) -> dict[int, OracleCeiling]:
    """The oracle's ceiling under the caps on the tasks calibration measures, per level; a level below
    ``s.min_oracle_ceiling`` is refused before any episode runs (policies without a chat renderer, e.g. a
    served model, and envs without an oracle are not checked)."""
    renderer = getattr(policy, "renderer", None)
    if renderer is None:
        return {}
    ceilings = {}
    for level in levels:
        ceiling = oracle_ceiling(
            renderer,
            env_id,
            tasks=s.seeds,
            difficulty=level,
            max_new_tokens=s.max_new_tokens,
            max_turns=s.max_turns,
            first_task=first_seed,
        )
        require_ceiling(ceiling, s.min_oracle_ceiling, f"calibrating {env_id}")
        if ceiling is not None:
            ceilings[level] = ceiling
    return ceilings


def calibrate(
    env_id: str,
    policy: Any,
    settings: CalibrationSettings | None = None,
    *,
    model_name: str,
    first_seed: int = 0,
) -> Calibration:
    """G = ``group_size`` samples on each of ``seeds`` train seeds per level, every level in one continuously
    batched stream of the episode runner (any policy: local, HTTP, scripted)."""
    from trace_train.episodes import run_episodes
    from trace_train.policies.base import SamplingConfig
    from trace_train.rollout import ResetSpec

    s = settings or CalibrationSettings()
    bands = Bands(s.band_low, s.band_high, s.informative)
    probe = make_env(env_id)
    try:
        levels = list(s.levels or getattr(probe.unwrapped, "difficulty_levels", (1,)))
        # caps left out fit the oracle at the deepest level measured (the longest episodes)
        s = fill_caps(s, getattr(policy, "renderer", None), env_id, max(levels))
        ceilings = level_ceilings(policy, env_id, levels, s, first_seed)
        specs = [
            ResetSpec(
                seed=reset_seed("train", first_seed + i, probe), group=i, split="train", difficulty=level
            )
            for level in levels
            for i in range(s.seeds)
            for _ in range(s.group_size)
        ]
    finally:
        probe.close()
    records = run_episodes(
        policy,
        env_id,
        specs,
        SamplingConfig(temperature=s.temperature, max_new_tokens=s.max_new_tokens),
        max_turns=s.max_turns,
        batch_size=s.batch_size,
    )
    results = []
    for level in levels:
        rewards: dict[int, list[float]] = {}
        turns: list[int] = []
        for spec, record in zip(specs, records, strict=True):
            if spec.difficulty == level:
                rewards.setdefault(spec.group, []).append(record["reward"])
                turns.append(record["turns"])
        stats = level_stats(level, [rewards[g] for g in sorted(rewards)], turns)
        ceiling = ceilings.get(level)
        results.append(replace(stats, oracle_ceiling=None if ceiling is None else round(ceiling.share, 4)))
    tokens = prompt_tokens(policy, env_id) if hasattr(policy, "renderer") else None
    return Calibration(
        env_id, model_name, s.seeds, s.group_size, bands, results, choose_level(results, bands), tokens
    )


def cmd_calibrate(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401
    from trace_gym.registration import resolve_env_id, use_target_difficulty
    from trace_gym.synthesis.calibration import spec_path, write_calibration
    from trace_train.policies.remote_generation import RemoteGenerationError
    from trace_train.policy_factory import policy_from_args, release

    args = from_namespace(CalibrateArgs, ns)
    env_id = resolve_env_id(args.env_id)
    use_target_difficulty(env_id, args.target_difficulty)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        policy = policy_from_args(args)
        try:
            result = calibrate(
                env_id,
                policy,
                CalibrationSettings(**settings_of(args, CalibrationSettings)),
                model_name=args.model + (f"+{args.adapter}" if args.adapter else ""),
            )
        finally:
            release(policy)  # a hot-loaded adapter leaves the server
    except RemoteGenerationError as err:  # a generation server that is down or fails: one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    g = args.group_size
    table = Table(title=f"trace calibrate {env_id} ({args.seeds} seeds x {g} samples per level)")
    for column in ("level", "mean reward", "success", f"pass@{g}", "all-success", "all-zero", "informative"):
        table.add_column(column)
    table.add_column("distance")
    table.add_column("oracle fits caps")
    for st in result.levels:
        chosen = " *" if st.level == result.chosen.level else ""
        table.add_row(
            f"{st.level}{chosen}",
            f"{st.mean_reward:.3f}",
            f"{st.success:.3f}",
            f"{st.pass_at_k[str(g)]:.3f}",
            f"{st.all_success_share:.2f}",
            f"{st.all_zero_share:.2f}",
            f"{st.informative_share:.2f}",
            f"{result.bands.distance(st):.3f}",
            "-" if st.oracle_ceiling is None else f"{st.oracle_ceiling:.2f}",
        )
    console.print(table)
    console.print(
        f"chosen level {result.chosen.level}; prompt tokens (system + tools): {result.prompt_tokens}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_spec(), indent=2) + "\n")
    if not args.no_write:
        path = spec_path(env_id)
        if path is None:
            console.print(f"{env_id} has no spec.json (not a synthesised env): nothing written")
        else:
            write_calibration(path, result)
            console.print(f"calibration written to {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    ca = subparsers.add_parser("calibrate", help="step 2: pick an env's difficulty against TRACE's bands")
    ca.add_argument("env_id")
    add_dataclass_flags(ca, CalibrateArgs, skip={"env_id"})
    ca.set_defaults(func=cmd_calibrate)
