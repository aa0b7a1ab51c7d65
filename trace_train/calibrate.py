"""``trace calibrate``: measure an env's difficulty levels with the policy that will train on it.

The statistics and the bands live with the env spec they are written into
(:mod:`trace_gym.synthesis.calibration`); here the real policy gathers the reward groups: G samples on each of
S train seeds per level, all levels in one continuously batched stream.

    trace calibrate ENV_ID --model smollm2-135m       difficulty against TRACE's bands, written into spec.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.table import Table

from trace_gym.registration import make_env
from trace_gym.seeds import reset_seed
from trace_gym.synthesis.calibration import Bands, Calibration, choose_level, level_stats
from trace_train.config import DTYPES, EngineArgs, add_dataclass_flags

console = Console()
DEFAULT_BANDS = Bands()  # TRACE's: mean reward and success in [0.2, 0.6], informative groups >= 50%


def prompt_tokens(policy: Any, env_id: str, difficulty: int | None = None) -> int:
    """Tokens of the system prompt plus the tools, as the policy's chat template renders them (seed 0)."""
    env = gym.make(env_id, **({"difficulty": difficulty} if difficulty is not None else {}))
    obs, info = env.reset(seed=0, options={"split": "train"})
    renderer = policy.renderer
    text = renderer.render([obs[0]], list(info.get("tools") or []), add_generation_prompt=False)
    env.close()
    return len(renderer.encode(text))


def calibrate(
    env_id: str,
    policy: Any,
    *,
    model_name: str,
    seeds: int = 8,
    group_size: int = 4,
    levels: Sequence[int] | None = None,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    max_turns: int = 10,
    batch_size: int = 16,
    bands: Bands = DEFAULT_BANDS,
    first_seed: int = 0,
) -> Calibration:
    """G = ``group_size`` samples on each of ``seeds`` train seeds per level, with trace_train's rollouts."""
    from trace_train.policies.base import SamplingConfig
    from trace_train.rollout import ResetSpec, stream_collect

    probe = make_env(env_id)
    levels = list(levels or getattr(probe.unwrapped, "difficulty_levels", (1,)))
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens)
    specs = [
        ResetSpec(seed=reset_seed("train", first_seed + s, probe), group=s, split="train", difficulty=level)
        for level in levels
        for s in range(seeds)
        for _ in range(group_size)
    ]
    # every level in one continuously batched stream: a finished episode's slot starts the next one
    envs = [make_env(env_id) for _ in range(min(batch_size, len(specs)))]
    try:
        trajectories = stream_collect(policy, envs, specs, sampling, max_turns, max_total_tokens=32768)
    finally:
        for env in envs:
            env.close()
    results = []
    for level in levels:
        rewards: dict[int, list[float]] = {}
        turns: list[int] = []
        for trajectory in trajectories:
            if trajectory.spec.difficulty == level:
                rewards.setdefault(trajectory.spec.group, []).append(trajectory.reward)
                turns.append(trajectory.turns)
        results.append(level_stats(level, [rewards[g] for g in sorted(rewards)], turns))
    tokens = prompt_tokens(policy, env_id) if hasattr(policy, "renderer") else None
    probe.close()
    return Calibration(
        env_id, model_name, seeds, group_size, bands, results, choose_level(results, bands), tokens
    )


def cmd_calibrate(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401
    from trace_gym.registration import resolve_env_id
    from trace_gym.synthesis.calibration import spec_path, write_calibration
    from trace_train.policies.factory import make_policy

    env_id = resolve_env_id(ns.env_id)
    if ns.threads:
        import torch

        torch.set_num_threads(ns.threads)
    policy = make_policy(
        ns.model,
        adapter=ns.adapter,
        base_url=ns.base_url,
        dtype=ns.dtype,
        engine=ns.engine,
        tool_format=ns.tool_format,
    )
    result = calibrate(
        env_id,
        policy,
        model_name=ns.model + (f"+{ns.adapter}" if ns.adapter else ""),
        seeds=ns.seeds,
        group_size=ns.group_size,
        levels=ns.levels,
        temperature=ns.temperature,
        max_new_tokens=ns.max_new_tokens,
        max_turns=ns.max_turns,
        batch_size=ns.batch_size,
        bands=Bands(ns.band_low, ns.band_high, ns.informative),
    )
    table = Table(title=f"trace calibrate {env_id} ({ns.seeds} seeds x {ns.group_size} samples per level)")
    for column in (
        "level",
        "mean reward",
        "success",
        f"pass@{ns.group_size}",
        "all-success",
        "all-zero",
        "informative",
        "distance",
    ):
        table.add_column(column)
    for s in result.levels:
        chosen = " *" if s.level == result.chosen.level else ""
        table.add_row(
            f"{s.level}{chosen}",
            f"{s.mean_reward:.3f}",
            f"{s.success:.3f}",
            f"{s.pass_at_k[str(ns.group_size)]:.3f}",
            f"{s.all_success_share:.2f}",
            f"{s.all_zero_share:.2f}",
            f"{s.informative_share:.2f}",
            f"{result.bands.distance(s):.3f}",
        )
    console.print(table)
    console.print(
        f"chosen level {result.chosen.level}; prompt tokens (system + tools): {result.prompt_tokens}"
    )
    if ns.json:
        Path(ns.json).write_text(json.dumps(result.to_spec(), indent=2) + "\n")
    if not ns.no_write:
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
    ca.add_argument(
        "--model", default="smollm2-135m", help="alias, local HF dir, or served model (--base-url)"
    )
    ca.add_argument("--adapter", default=None, help="PEFT adapter (e.g. the warm-started base agent)")
    ca.add_argument("--base-url", default=None)
    ca.add_argument("--dtype", default="float32", choices=DTYPES)
    add_dataclass_flags(ca, EngineArgs)
    ca.add_argument("--seeds", type=int, default=8, help="S: train seeds per level")
    ca.add_argument("--group-size", type=int, default=4, help="G: samples per seed")
    ca.add_argument("--levels", type=int, nargs="*", default=None, help="default: every level of the env")
    ca.add_argument("--temperature", type=float, default=1.0)
    ca.add_argument("--max-new-tokens", type=int, default=256)
    ca.add_argument("--max-turns", type=int, default=10)
    ca.add_argument("--batch-size", type=int, default=16)
    ca.add_argument("--band-low", type=float, default=0.2)
    ca.add_argument("--band-high", type=float, default=0.6)
    ca.add_argument("--informative", type=float, default=0.5)
    ca.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ca.add_argument("--json", default=None)
    ca.add_argument("--no-write", action="store_true", help="do not write the chosen level into spec.json")
    ca.set_defaults(func=cmd_calibrate)
