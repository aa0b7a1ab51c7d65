"""Issue 29's arms: what keeps a small agent's GRPO groups informative on a target-derived capability env.

Each arm trains one LoRA adapter from the same base (the demo's warm-started agent) on the same capability env,
with the same seeds and the same rollout budget (refills and rescues included), and differs only in its
mechanism:

| arm | start depth | reward | rescue hints |
|---|---|---|---|
| fixed | ``--level`` (today's calibrated level) | success | off |
| adaptive | adaptive (reverse curriculum) | success | off |
| shaped | ``--level`` | the env's declared milestones | off |
| rescue | ``--level`` | success | on |
| all | adaptive | milestones | on |

With ``--sft-episodes N`` every arm starts from the same adapter, first fitted to N oracle episodes of the
capability env at ``--level`` (or spread over ``--sft-levels``; train tasks from ``--sft-seed-offset``, apart from GRPO's): the demo's own recipe
(``[adapters.sft]``), so the arms train the agent the demo trains. That adapter is evaluated as its own row.

Then, for the base (and the SFT adapter) and every arm:

* the env's success at the deepest start (level 4, or 7 on ``--ladder fine``: the whole target task) on held-out
  tasks (the capability env's own test split, itself inside the target's *train* split);
* success on the target's test tasks that need the capability (paired against the base, same tasks).

Prints the tables, writes ``<out>/arms.json`` and ``<out>/arms.png`` (informative-group share and reward per
step). A rerun in the same ``--out`` reuses the SFT fit (``<out>/sft``) and every evaluation whose inputs are
unchanged (``<out>/evals``). Slow on a CPU (tens of minutes at the defaults); CPU and sizes are printed with the figures.

    python benchmarks/grpo_arms.py --policy runs/demo/01-base/model --capability precise-arguments
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_train.metrics import cpu_name

ARMS: dict[str, dict[str, Any]] = {
    "fixed": {},
    "adaptive": {"curriculum": "adaptive"},
    "shaped": {"reward": "shaped"},
    "rescue": {"rescue_fraction": 0.5},
    "all": {"curriculum": "adaptive", "reward": "shaped", "rescue_fraction": 0.5},
}


@dataclass
class Settings:
    policy: str
    capability: str
    target: str
    target_difficulty: int | None
    arms: list[str]
    budget: int
    group_size: int
    groups_per_step: int
    level: int
    max_turns: int
    max_new_tokens: int
    env_eval: int
    target_eval: int
    lr: float
    temperature: float
    sft_episodes: int
    sft_epochs: int
    sft_seed_offset: int
    sft_levels: list[int]
    micro_batch_tokens: int
    eval_batch_size: int
    ladder: str
    out: Path
    dtype: str


def register_capability_env(s: Settings) -> str:
    """The target-derived env for the capability, on the target at ``--target-difficulty``, in this process."""
    import gymnasium as gym

    from trace_gym.derived.levels import DEFAULT_LADDER
    from trace_gym.derived.registration import ENTRY_POINT, derived_id
    from trace_gym.registration import register_env

    suffix = f"-arms-d{s.target_difficulty}" + ("" if s.ladder == DEFAULT_LADDER else f"-{s.ladder}")
    env_id = derived_id(s.target, s.capability).replace("-v0", f"{suffix}-v0")
    if env_id not in gym.registry:
        kwargs = {} if s.target_difficulty is None else {"difficulty": s.target_difficulty}
        register_env(
            env_id,
            entry_point=ENTRY_POINT,
            kwargs={
                "target_id": s.target,
                "capability": s.capability,
                "target_kwargs": kwargs,
                "ladder": s.ladder,
            },
        )
    return env_id


def target_test_specs(target: str, capability: str, n: int, difficulty: int | None) -> list[Any]:
    """The first ``n`` test tasks of ``target`` (at ``difficulty``) whose task exercises ``capability``."""
    from trace_gym.registration import make_env
    from trace_gym.seeds import reset_seed
    from trace_train.rollout import ResetSpec

    probe = make_env(target)
    specs, index = [], 0
    try:
        while len(specs) < n and index < 20 * n + 200:
            seed = reset_seed("test", index, probe)
            options: dict[str, Any] = {"split": "test"}
            if difficulty is not None:
                options["difficulty"] = difficulty
            probe.reset(seed=seed, options=options)
            if capability in probe.unwrapped.task_capabilities():
                specs.append(ResetSpec(seed=seed, group=len(specs), split="test", difficulty=difficulty))
            index += 1
    finally:
        probe.close()
    return specs


def episodes(policy: Any, env_id: str, specs: list[Any], s: Settings) -> list[dict[str, Any]]:
    from trace_train.episodes import run_episodes
    from trace_train.rollout import SamplingConfig

    sampling = SamplingConfig(temperature=0.0, max_new_tokens=s.max_new_tokens)
    return run_episodes(policy, env_id, specs, sampling, max_turns=s.max_turns, batch_size=s.eval_batch_size)


def evaluation_inputs(
    policy_dir: str, adapter: str | None, env_id: str, s: Settings, target_specs: list[Any]
) -> tuple[dict[str, Any], list[Any]]:
    """Everything that decides an evaluation, and the env's held-out specs (the deepest start)."""
    from trace_gym.derived.levels import ladder_levels
    from trace_train.rollout import ResetSpec

    deepest = max(ladder_levels(s.ladder))  # the whole target task on either ladder
    env_specs = [ResetSpec(seed=i, group=i, split="test", difficulty=deepest) for i in range(s.env_eval)]
    inputs = {
        "policy": policy_dir,
        "adapter": adapter,
        "env_id": env_id,
        "env_seeds": [spec.seed for spec in env_specs],
        "env_level": deepest,
        "target": s.target,
        "target_seeds": [spec.seed for spec in target_specs],
        "max_turns": s.max_turns,
        "max_new_tokens": s.max_new_tokens,
        "batch_size": s.eval_batch_size,  # batched bf16 kernels may round differently at another batch
        "dtype": s.dtype,
    }
    return inputs, env_specs


def evaluate(
    label: str, policy_dir: str, adapter: str | None, env_id: str, s: Settings, target_specs: list[Any]
) -> tuple[list[bool], list[float]]:
    """(successes at the deepest start on the env's held-out tasks, per-task target test rewards).

    Kept in ``<out>/evals/<label>.json`` with everything that decides it; a rerun in the same ``--out`` with the
    same inputs reuses it (the base's alone took 19 min here at 16 episodes at once); any difference plays it again."""
    from trace_train.policy_factory import make_policy

    inputs, env_specs = evaluation_inputs(policy_dir, adapter, env_id, s, target_specs)
    path = s.out / "evals" / f"{label}.json"
    half = path.with_suffix(".env.json")  # the env half, kept until the target half is done too
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept.get("inputs") == inputs:
            print(f"{label}: evaluation reused from {path}")
            return kept["env_success"], kept["target_rewards"]
    started = time.time()
    policy = make_policy(policy_dir, adapter=adapter, dtype=s.dtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept_half = json.loads(half.read_text()) if half.is_file() else {}
    if kept_half.get("inputs") == inputs:
        env_success = kept_half["env_success"]
    else:
        env_success = [r["reward"] >= 1.0 for r in episodes(policy, env_id, env_specs, s)]
        half.write_text(json.dumps({"inputs": inputs, "env_success": env_success}) + "\n")
    target_rewards = [float(r["reward"]) for r in episodes(policy, s.target, target_specs, s)]
    record = {
        "inputs": inputs,
        "env_success": env_success,
        "target_rewards": target_rewards,
        "wall_s": round(time.time() - started, 1),
        "cpu": cpu_name(),
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    half.unlink(missing_ok=True)
    return env_success, target_rewards


def fit_sft(env_id: str, s: Settings) -> dict[str, Any]:
    """The adapter every arm starts from: fitted to ``sft_episodes`` oracle episodes of the env at ``level``."""
    from trace_train.config import SFTArgs
    from trace_train.sft import run_sft

    out = s.out / "sft"
    done = out / "sft_summary.json"
    if (
        done.is_file() and (out / "adapter").is_dir()
    ):  # reused: a rerun of the arms trains from the same start
        return json.loads(done.read_text())
    started = time.time()
    summary = run_sft(
        SFTArgs(
            env_id=env_id,
            model=s.policy,
            out=str(out),
            episodes=s.sft_episodes,
            epochs=s.sft_epochs,
            lr=1e-3,  # the demo's [adapters.sft]
            batch_size=2,
            seed_offset=s.sft_seed_offset,
            max_turns=12,
            difficulty=None if s.sft_levels else s.level,
            levels=s.sft_levels,
            dtype=s.dtype,
            micro_batch_tokens=s.micro_batch_tokens,
            resume=True,  # an interrupted fit continues from its last step
        )
    )
    summary["wall_s"] = round(time.time() - started, 1)
    done.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def train_arm(name: str, env_id: str, s: Settings, init_adapter: str | None) -> dict[str, Any]:
    from trace_train.config import GRPOArgs
    from trace_train.grpo.trainer import GRPOTrainer
    from trace_train.pipeline.stages.common import read_metrics

    out = s.out / name
    done = out / "arm.json"
    if done.is_file():  # a rerun in the same --out keeps the arms that finished
        return json.loads(done.read_text())
    steps = -(-s.budget // (s.groups_per_step * s.group_size)) * 4  # the budget, not the steps, ends the run
    args = GRPOArgs(
        env_id=env_id,
        model=s.policy,
        out=str(out),
        steps=steps,
        rollout_budget=s.budget,
        groups_per_step=s.groups_per_step,
        group_size=s.group_size,
        difficulty=s.level,
        max_turns=s.max_turns,
        max_new_tokens=s.max_new_tokens,
        micro_batch_size=4,
        micro_batch_tokens=s.micro_batch_tokens,
        lr=s.lr,
        temperature=s.temperature,
        init_adapter=init_adapter,
        dtype=s.dtype,
        save_every=1,  # each step is minutes on a CPU: an interrupted arm resumes from its last step
        resume=str(out / "checkpoints") if (out / "checkpoints" / "latest").is_file() else None,
        seed=0,
        tensorboard=False,
        progress=False,
        **ARMS[name],
    )
    started = time.time()
    trainer = GRPOTrainer(args)
    trainer.train()
    adapter = out / "adapter"
    if not adapter.is_dir():
        trainer.policy.model.save_pretrained(adapter)
    metrics = read_metrics(out / "metrics.jsonl")  # a resumed arm logs the steps after its checkpoint again
    result = {
        "arm": name,
        "settings": ARMS[name],
        "adapter": str(adapter),
        "rollouts": trainer.state["rollouts"],
        "steps": trainer.state["step"],
        "train_wall_s": round(time.time() - started, 1),
        "informative": [m.get("informative_group_share") for m in metrics],
        "reward": [m.get("reward_mean") for m in metrics],
        "level": [m.get("level_mean") for m in metrics],
        "rescued": [m.get("rescue_success_rate") for m in metrics],
        "rollouts_total": [m.get("rollouts_total") for m in metrics],  # spent by the end of each step
    }
    done.write_text(json.dumps(result, indent=2) + "\n")
    return result


def paired(base: list[float], arm: list[float]) -> str:
    from trace_train.stats import mcnemar_exact

    test = mcnemar_exact([a >= 1.0 for a in arm], [b >= 1.0 for b in base])
    gained = sum(1 for b, a in zip(base, arm, strict=True) if a >= 1.0 > b)
    lost = sum(1 for b, a in zip(base, arm, strict=True) if b >= 1.0 > a)
    return f"+{gained}/-{lost} (exact McNemar p {test['p_value']:.3f})"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Informative-group share, training reward and mean start depth per step, against the rollouts spent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for r in results:
        # arms run before rollouts_total was recorded are drawn per step
        spent = r.get("rollouts_total") or list(range(1, len(r["informative"]) + 1))
        for ax, key in zip(axes, ("informative", "reward", "level"), strict=True):
            ax.plot(spent, r[key], marker="o", label=r["arm"])
    axes[0].axhline(0.5, color="grey", linestyle="--", linewidth=1, label="TRACE's band (>= 0.5)")
    xlabel = "rollouts spent" if all(r.get("rollouts_total") for r in results) else "step"
    axes[0].set(title="informative-group share", xlabel=xlabel, ylim=(-0.05, 1.05))
    axes[1].set(title="mean training reward", xlabel=xlabel, ylim=(-0.05, 1.05))
    axes[2].set(title="mean start depth (level)", xlabel=xlabel)
    axes[0].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_settings(argv: list[str] | None = None) -> Settings:
    """The benchmark's settings from its command line (also what the scripts beside its results build on)."""
    from trace_gym.derived.levels import DEFAULT_LADDER, LADDERS  # no imports of its own

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", required=True, help="the base agent (the demo's warm-started model directory)")
    p.add_argument("--capability", default="precise-arguments")
    p.add_argument("--target", default="trace/retail-v2")
    p.add_argument("--target-difficulty", type=int, default=1, help="the demo's target difficulty")
    p.add_argument(
        "--arms",
        default=",".join(ARMS),
        help=f"comma-separated, of {', '.join(ARMS)}; none: the SFT fit alone",
    )
    p.add_argument("--budget", type=int, default=24, help="rollouts per arm (refills and rescues included)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups-per-step", type=int, default=2)
    p.add_argument("--level", type=int, default=1, help="the fixed arms' start depth")
    p.add_argument(
        "--ladder",
        default=DEFAULT_LADDER,
        choices=list(LADDERS),
        help="the env's start-depth ladder (trace_gym/derived/levels.py): fine has a rung per oracle action "
        "near the decision, and its deepest level (7) is the whole task",
    )
    # caps the retail oracle fits (trace_train/ceiling.py); 96 / 8 cut its own episode on a third of the tasks
    p.add_argument("--max-turns", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--env-eval", type=int, default=16, help="held-out env tasks at the deepest start")
    p.add_argument("--target-eval", type=int, default=24, help="target test tasks that need the capability")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--temperature", type=float, default=1.0, help="the arms' sampling temperature")
    p.add_argument(
        "--sft-episodes", type=int, default=0, help="fit the arms' shared start adapter first (0: none)"
    )
    p.add_argument("--sft-epochs", type=int, default=1)
    p.add_argument("--sft-seed-offset", type=int, default=100_000, help="first train task of the SFT fit")
    p.add_argument(
        "--sft-levels",
        type=int,
        nargs="+",
        default=[],
        help="spread the SFT fit's oracle episodes over these levels in turn (default: all at --level), e.g. 1 2 3 4",
    )
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=1024,
        help="tokens per forward/backward in the SFT fit and GRPO (memory only: the gradients add up the same)",
    )
    p.add_argument(
        "--eval-batch-size",
        type=int,
        default=24,
        help="episodes at once in every evaluation (24 plays the default 24 target tasks in one batch)",
    )
    p.add_argument("--dtype", default="auto")
    p.add_argument("--out", default="benchmarks/results/grpo_arms")
    ns = p.parse_args(argv)
    arms = [] if ns.arms == "none" else ns.arms.split(",")  # none: the base and the SFT fit only
    s = Settings(**{**vars(ns), "arms": arms, "out": Path(ns.out)})
    unknown = [a for a in s.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arms {unknown}; known: {list(ARMS)}")
    return s


def main(argv: list[str] | None = None) -> None:
    s = parse_settings(argv)
    s.out.mkdir(parents=True, exist_ok=True)
    env_id = register_capability_env(s)
    specs = target_test_specs(s.target, s.capability, s.target_eval, s.target_difficulty)
    print(f"{cpu_name()}; env {env_id}; budget {s.budget} rollouts per arm; {len(specs)} target test tasks")
    started = time.time()
    base_env, base_target = evaluate("base", s.policy, None, env_id, s, specs)
    sft, init_adapter = None, None
    if s.sft_episodes:
        summary = fit_sft(env_id, s)
        init_adapter = summary["adapter"]
        print(
            f"sft: {s.sft_episodes} episodes, loss {summary.get('first_loss')} -> {summary.get('final_loss')}"
        )
    results = []
    for name in s.arms:
        r = train_arm(name, env_id, s, init_adapter)
        r["env_success"], r["target_rewards"] = evaluate(name, s.policy, r["adapter"], env_id, s, specs)
        results.append(r)
        print(
            f"{name}: {r['rollouts']} rollouts, {r['train_wall_s']} s, informative {r['informative']}",
            flush=True,
        )
    if s.sft_episodes:  # after the arms, the run's question: an interrupted run has their rows first
        sft_env, sft_target = evaluate("sft", s.policy, init_adapter, env_id, s, specs)
        sft = {**summary, "env_success": sft_env, "target_rewards": sft_target}
    print(
        f"\nbase: env (deepest start) {sum(base_env)}/{len(base_env)}, target {sum(x >= 1.0 for x in base_target)}/{len(specs)}"
    )
    print(
        "| arm | rollouts | steps | informative share per step | levels | env success (deepest) "
        "| target success | paired vs base |"
    )
    print("|---|---|---|---|---|---|---|---|")
    if sft is not None:
        print(
            f"| sft (every arm's start) | {s.sft_episodes} oracle | - | - | "
            f"{' '.join(map(str, s.sft_levels)) or s.level} | "
            f"{sum(sft['env_success'])}/{len(sft['env_success'])} | "
            f"{sum(x >= 1.0 for x in sft['target_rewards'])}/{len(specs)} | {paired(base_target, sft['target_rewards'])} |"
        )
    for r in results:
        fmt = ", ".join(f"{x:.2f}" if x is not None else "-" for x in r["informative"])
        levels = ", ".join(f"{x:.1f}" if x is not None else "-" for x in r["level"])
        print(
            f"| {r['arm']} | {r['rollouts']} | {r['steps']} | {fmt} | {levels} | "
            f"{sum(r['env_success'])}/{len(r['env_success'])} | "
            f"{sum(x >= 1.0 for x in r['target_rewards'])}/{len(specs)} | {paired(base_target, r['target_rewards'])} |"
        )
    document = {
        "cpu": cpu_name(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(s).items()},
        "env_id": env_id,
        "target_test_seeds": [spec.seed for spec in specs],
        "base": {"env_success": base_env, "target_rewards": base_target},
        "sft": sft,
        "arms": results,
        "wall_s": round(time.time() - started, 1),
    }
    (s.out / "arms.json").write_text(json.dumps(document, indent=2) + "\n")
    if results:
        plot(results, s.out / "arms.png")
    print(f"wrote {s.out / 'arms.json'}{' and arms.png' if results else ''} ({document['wall_s']} s)")


if __name__ == "__main__":
    main()
