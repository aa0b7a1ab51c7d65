"""Stage ``evaluation``: every method on the same test-split tasks of the target, with paired tests.

Methods (``evaluation.methods``): ``base``; ``adapters`` (each capability adapter alone on the base);
``router`` (the paper's task-level router) and ``moe`` (the learned token-level gates) from step 4;
``direct_grpo``, the paper's fair baseline: GRPO directly on the target's train split with the same rollout
budget as all capability adapters together (trained here, in ``direct_grpo/``). Each row: success with a 95%
Wilson interval, mean reward, an exact McNemar test against the base on the same seeds, the training rollouts
the method cost and the wall times. This is the only stage that touches the test split.
"""

from __future__ import annotations

import math
import time
from typing import Any

from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import read_jsonl, set_threads, write_json


def mcnemar_exact(base: list[bool], other: list[bool]) -> dict[str, Any]:
    """Exact two-sided McNemar test on paired successes: (base fails, other wins) vs the reverse."""
    if len(base) != len(other):
        raise ValueError("paired test needs the same tasks for both methods")
    gained = sum(1 for b, o in zip(base, other, strict=True) if o and not b)
    lost = sum(1 for b, o in zip(base, other, strict=True) if b and not o)
    n = gained + lost
    k = min(gained, lost)
    p = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)
    return {"gained": gained, "lost": lost, "p_value": p}


def _paired(base: list[bool], other: list[bool]) -> dict[str, Any]:
    try:  # issue 8's paired statistics, where trace_train.stats has them
        from trace_train.stats import mcnemar as shared_mcnemar  # type: ignore[attr-defined]
    except ImportError:
        return mcnemar_exact(base, other)
    result = shared_mcnemar(base, other)
    return result if isinstance(result, dict) else {**mcnemar_exact(base, other), "p_value": float(result)}


def _evaluate(
    ctx: StageContext, label: str, policy, out_name: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from trace_train.evaluate import evaluate
    from trace_train.policies.base import SamplingConfig

    cfg, e = ctx.config, ctx.config.evaluation
    path = ctx.dir / f"{out_name}.jsonl"
    done = read_jsonl(path) if ctx.resume else []
    if ctx.resume and len(done) == e.episodes:  # evaluated before an interruption
        summary = read_jsonl(ctx.dir / "methods.jsonl")
        previous = next((m for m in summary if m["method"] == label), None)
        if previous is not None:
            ctx.log(f"{label}: evaluated before the interruption, kept")
            return previous, done
    started = time.time()
    ctx.log(f"{label}: {e.episodes} test tasks")
    result = evaluate(
        policy,
        cfg.target.env_id,
        episodes=e.episodes,
        split="test",
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=e.max_new_tokens),
        max_turns=e.max_turns,
        batch_size=e.batch_size,
        difficulty=cfg.target.difficulty,
        out_jsonl=path,
    )
    ctx.log(result.line())
    row = {
        "method": label,
        "episodes": result.episodes,
        "success_rate": result.success_rate,
        "success_ci": list(result.success_ci),
        "reward_mean": result.reward_mean,
        "reward_ci": list(result.reward_ci),
        "eval_wall_s": round(time.time() - started, 1),
        "trajectories": path.name,
    }
    with (ctx.dir / "methods.jsonl").open("a", encoding="utf-8") as f:
        import json

        f.write(json.dumps(row) + "\n")
    return row, result.trajectories


def run(ctx: StageContext) -> dict[str, Any]:
    from trace_train.policies.hf import HFPolicy

    cfg, methods = ctx.config, ctx.config.evaluation.methods
    set_threads(cfg.threads)
    if not ctx.resume:
        (ctx.dir / "methods.jsonl").unlink(missing_ok=True)
    model = ctx.upstream["base"]["model"]
    adapters = ctx.upstream["adapters"]["adapters"]
    gates = ctx.upstream.get("gates", {})
    rows: list[dict[str, Any]] = []
    trajectories: dict[str, list[dict[str, Any]]] = {}
    not_run: dict[str, str] = {}

    def add(row, trajs, train_rollouts, train_wall_s):
        row.update(train_rollouts=train_rollouts, train_wall_s=train_wall_s)
        rows.append(row)
        trajectories[row["method"]] = trajs

    base_wall = ctx.upstream["base"].get("wall_s", 0.0)
    base_policy = HFPolicy.from_pretrained(model, dtype=cfg.base.dtype)
    row, trajs = _evaluate(ctx, "base", base_policy, "base")
    add(row, trajs, 0, base_wall)
    del base_policy

    if "adapters" in methods:
        for cap, info in adapters.items():
            policy = HFPolicy.from_pretrained(model, adapter=info["adapter"], dtype=cfg.base.dtype)
            row, trajs = _evaluate(ctx, f"adapter:{cap}", policy, f"adapter-{cap}")
            add(row, trajs, info["rollouts"], info["wall_s"])
            del policy

    gate_rollouts = int(gates.get("data_rollouts", 0) or 0)
    all_rollouts = ctx.upstream["adapters"]["rollouts_total"] + gate_rollouts
    all_wall = sum(a["wall_s"] for a in adapters.values()) + float(gates.get("wall_s", 0.0) or 0.0)
    for method in ("router", "moe"):
        if method not in methods:
            continue
        if not adapters:
            not_run[method] = "no adapter was trained"
            continue
        policy, why = _composed_policy(method, model, adapters, gates, cfg)
        if policy is None:
            not_run[method] = why
            ctx.log(f"{method}: not evaluated: {why}")
            continue
        row, trajs = _evaluate(ctx, method, policy, method)
        add(row, trajs, all_rollouts, all_wall)
        del policy

    if "direct_grpo" in methods:
        budget = ctx.upstream["adapters"]["rollouts_total"]
        if budget == 0:
            not_run["direct_grpo"] = "no adapter was trained, so there is no budget to match"
        else:
            from trace_train.pipeline.stages.adapters import train_adapter

            a = cfg.adapters
            steps = max(1, math.ceil(budget / (a.groups_per_step * a.group_size)))
            ctx.log(f"direct_grpo: GRPO on {cfg.target.env_id} for {steps} steps (budget {budget} rollouts)")
            info = train_adapter(
                ctx,
                "direct GRPO on the target",
                cfg.target.env_id,
                ctx.dir / "direct_grpo",
                cfg.target.difficulty,
                steps,
            )
            policy = HFPolicy.from_pretrained(model, adapter=info["adapter"], dtype=cfg.base.dtype)
            row, trajs = _evaluate(ctx, "direct_grpo", policy, "direct_grpo-eval")
            add(row, trajs, info["rollouts"], info["wall_s"])
    else:
        not_run["direct_grpo"] = (
            "left out by the config (evaluation.methods); the fair baseline was not measured"
        )

    base_success = _successes(trajectories["base"])
    for row in rows:
        if row["method"] != "base":
            row["vs_base"] = _paired(base_success, _successes(trajectories[row["method"]]))
    write_json(ctx.dir / "table.json", {"rows": rows, "not_run": not_run, "env_id": cfg.target.env_id})
    best = max(rows, key=lambda r: r["success_rate"])
    return {
        "rows": rows,
        "not_run": not_run,
        "summary": f"base {rows[0]['success_rate']:.3f}; best {best['method']} {best['success_rate']:.3f} "
        f"on {rows[0]['episodes']} test tasks",
    }


def _successes(trajs: list[dict[str, Any]]) -> list[bool]:
    ordered = sorted(trajs, key=lambda t: t["seed"])
    return [bool(t.get("success", t["reward"] >= 1.0)) for t in ordered]


def _composed_policy(
    method: str, model: str, adapters: dict[str, Any], gates: dict[str, Any], cfg
) -> tuple[Any, str]:
    """The router or MoE policy from step 4 (``trace_train.compose``), or ``(None, why)`` when unavailable."""
    try:
        from trace_train.compose import compare
    except ImportError as err:
        return None, f"step 4's evaluation API is not available ({err})"
    if method == "moe":
        if not gates.get("artefact"):
            return None, "no gate artefact (gates disabled or not trained)"
        return compare.moe_policy(gates["artefact"], dtype=cfg.base.dtype), ""
    return compare.router_policy(
        model, {c: a["adapter"] for c, a in adapters.items()}, dtype=cfg.base.dtype
    ), ""
