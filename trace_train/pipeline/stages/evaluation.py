"""Stage ``evaluation``: every method on the same test-split tasks of the target, with paired tests.

Methods (``evaluation.methods``): ``base``; ``adapters`` (each capability adapter alone on the base);
``router`` (the paper's task-level router) and ``moe`` (the learned token-level gates) from step 4;
``direct_grpo``, the paper's fair baseline: GRPO directly on the target's train split with the same rollout
budget as all capability adapters together (trained here, in ``direct_grpo/``); ``direct_grpo_compute``, the same
with the same training compute instead (model FLOPs of the adapters' oracle fits and GRPO and of the gate data, as
``trace_train.roofline`` counts them; a derived-env rollout starts mid-task, so the two rows' rollout counts
differ), in ``direct_grpo_compute/``. Each row: success with a 95%
Wilson interval, mean reward, an exact McNemar test and a paired bootstrap against the base on the same seeds
(and against direct GRPO where it was measured), the share of the base's successes the method keeps (do no
harm), the training rollouts the method cost and the wall times. This is the only stage that touches the test split.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Sequence
from typing import Any

from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import read_jsonl, set_threads, write_json

DIRECT_ROWS = ("direct_grpo", "direct_grpo_compute")  # GRPO on the target: equal rollouts, equal compute


def _paired(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """Exact McNemar on success and a paired bootstrap on reward, on the same seeds (step 4's ``paired``)."""
    from trace_train.compose.compare import paired

    result = paired(base, other)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in result.items()}


def _evaluate(
    ctx: StageContext,
    label: str,
    policy,
    out_name: str,
    episodes: int | None = None,
    reuse: Sequence[dict[str, Any]] = (),
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``policy`` on the first ``episodes`` test tasks (default ``evaluation.episodes``; every method starts at
    the same task, so a shorter row is paired with the base on the tasks it shares). ``reuse``: episodes another
    row already played with the very policy this one would use on those tasks; they are kept, not played again."""
    from trace_train.config import EvalSettings, settings_of
    from trace_train.evaluate import evaluate

    cfg, e = ctx.config, ctx.config.evaluation
    episodes = episodes or e.episodes
    path = ctx.dir / f"{out_name}.jsonl"
    done = read_jsonl(path) if ctx.resume and path.is_file() else []
    if ctx.resume and len(done) == episodes:  # evaluated before an interruption
        summary = read_jsonl(ctx.dir / "methods.jsonl")
        previous = next((m for m in summary if m["method"] == label), None)
        if previous is not None:
            ctx.log(f"{label}: evaluated before the interruption, kept")
            return previous, done
    started = time.time()
    ctx.log(
        f"{label}: {episodes} test tasks"
        + (f" ({len(done)} finished before the interruption)" if done else "")
        + (f" ({len(reuse)} of them the base's episodes)" if reuse else "")
    )
    result = evaluate(
        policy,
        cfg.target.env_id,
        EvalSettings(**{**settings_of(e, EvalSettings), "episodes": episodes}),
        split="test",
        difficulty=cfg.target.difficulty,
        out_jsonl=path,
        resume=ctx.resume,  # an interrupted method keeps the episodes it finished
        reuse=reuse,
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
    from trace_train.pipeline.stages.common import base_policy as make_base_policy
    from trace_train.policy_factory import release

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

    def add(row, trajs, train_rollouts, train_wall_s, train_flops=None, train_tokens=None):
        row.update(
            train_rollouts=train_rollouts,
            train_wall_s=train_wall_s,
            train_flops=train_flops,  # model compute of the method's training (trace_train.roofline's count)
            train_tokens=train_tokens,
        )
        rows.append(row)
        trajectories[row["method"]] = trajs

    base_wall = ctx.upstream["base"].get("wall_s", 0.0)
    base_policy = make_base_policy(cfg, model)
    row, trajs = _evaluate(ctx, "base", base_policy, "base")
    add(row, trajs, 0, base_wall, 0.0, 0)
    release(base_policy)
    del base_policy

    def adapters_alone() -> None:
        for cap, info in adapters.items():
            policy = make_base_policy(cfg, model, info["adapter"])
            try:  # on a server, the adapter is hot-loaded for its row and unloaded after
                row, trajs = _evaluate(
                    ctx, f"adapter:{cap}", policy, f"adapter-{cap}", cfg.evaluation.adapter_episodes
                )
            finally:
                release(policy)
            add(row, trajs, info["rollouts"], info["wall_s"], info.get("flops"), info.get("tokens"))
            del policy

    gate_rollouts = int(gates.get("data_rollouts", 0) or 0)
    all_rollouts = ctx.upstream["adapters"]["rollouts_total"] + gate_rollouts
    all_wall = sum(a["wall_s"] for a in adapters.values()) + float(gates.get("wall_s", 0.0) or 0.0)

    def composed(method: str) -> None:
        if not adapters:
            not_run[method] = "no adapter was trained"
            return
        if cfg.generation.server_url:
            ctx.log(
                f"{method}: evaluated locally ([generation] serves plain adapters; vLLM cannot route them)"
            )
        policy, why = _composed_policy(method, model, adapters, gates, cfg)
        if policy is None:
            not_run[method] = why
            ctx.log(f"{method}: not evaluated: {why}")
            return
        reuse: list[dict[str, Any]] = []
        if method == "router":
            # the router picks a slot per task from the env's first prompt, the same whichever policy plays, so
            # the tasks it gives the base slot are the base's episodes: playing them again would cost as long and
            # differ only by the numerics of another batch (demo40: 58 of 128 parted, no outcome changed)
            from trace_train.compose.compare import router_reuse

            routes, reuse = router_reuse(policy, {"base": trajectories["base"]})
            write_json(ctx.dir / "router_routes.json", {str(seed): slot for seed, slot in routes.items()})
        row, trajs = _evaluate(ctx, method, policy, method, reuse=reuse)
        add(row, trajs, all_rollouts, all_wall, trace_flops or None, trace_tokens or None)
        if method == "moe" and getattr(policy, "choices", None):
            _routing_picture(ctx, policy)
        if method == "moe":
            _explain_changes(ctx, policy, trajectories["base"], trajs)
        if method == "router":
            row["routes"] = dict(collections.Counter(routes.values()).most_common())
            row["reused_base_episodes"] = len(reuse)
        del policy

    # TRACE's training compute: the adapters' oracle fits and GRPO, and the gate data (0 for a run made before
    # the count existed)
    trace_flops = ctx.upstream["adapters"].get("flops_total", 0.0) + float(gates.get("flops", 0.0) or 0.0)
    trace_tokens = ctx.upstream["adapters"].get("tokens_total", 0) + int(gates.get("tokens", 0) or 0)

    def direct_grpo(method: str) -> None:
        budget = ctx.upstream["adapters"]["rollouts_total"]
        if budget == 0:
            not_run[method] = "no adapter was trained, so there is no budget to match"
            return
        from trace_train.pipeline.stages.adapters import train_adapter

        a = cfg.adapters
        # and, when the adapters were first fitted to oracle episodes, as many of the target's in all
        n_adapters = len(ctx.upstream["adapters"]["adapters"])
        budgets: dict[str, Any] = {"rollout_budget": budget}
        if method == "direct_grpo_compute":
            if not trace_flops:
                not_run[method] = "the adapters' training compute was not recorded (a run from before it was)"
                return
            budgets = {"flop_budget": trace_flops}
            ctx.log(
                f"{method}: GRPO on {cfg.target.env_id} until {trace_flops / 1e12:.2f} TFLOP "
                "(the adapters' oracle fits and GRPO and the gate data)"
            )
        else:
            ctx.log(f"{method}: GRPO on {cfg.target.env_id} until {budget} rollouts (the adapters' total)")
        # at most this many steps; training spends at most the budget (the last step takes the groups that fit).
        # The compute budget may buy more rollouts than the adapters had (a rollout that ends early is cheap)
        steps = max(1, math.ceil(budget / (a.groups_per_step * a.group_size)))
        if "flop_budget" in budgets:
            steps *= 4
        try:
            info = train_adapter(
                ctx,
                f"direct GRPO on the target ({'equal compute' if 'flop_budget' in budgets else 'equal rollouts'})",
                cfg.target.env_id,
                ctx.dir / method,
                cfg.target.difficulty,
                steps,
                sft_episodes=a.sft.episodes * n_adapters,
                sft_levels=[],  # [adapters.sft] levels are capability envs' start depths; the target has none
                overrides=_direct_overrides(cfg),
                **budgets,
            )
        except ValueError as err:  # the oracle fit alone spends the compute budget
            not_run[method] = str(err)
            ctx.log(f"{method}: not trained: {err}")
            return
        policy = make_base_policy(cfg, model, info["adapter"])
        try:
            row, trajs = _evaluate(ctx, method, policy, f"{method}-eval")
        finally:
            release(policy)
        add(row, trajs, info["rollouts"], info["wall_s"], info.get("flops"), info.get("tokens"))

    # the rows the answer needs first (MoE and direct GRPO), then the router and each adapter alone: a run stopped
    # late keeps what matters most (each finished row is in methods.jsonl, and a resumed run skips it)
    run_method = {
        "moe": lambda: composed("moe"),
        "direct_grpo": lambda: direct_grpo("direct_grpo"),
        "direct_grpo_compute": lambda: direct_grpo("direct_grpo_compute"),
        "router": lambda: composed("router"),
        "adapters": adapters_alone,
    }
    for method in run_method:
        if method in methods:
            run_method[method]()
    if "direct_grpo" not in methods:
        not_run["direct_grpo"] = (
            "left out by the config (evaluation.methods); the fair baseline was not measured"
        )
    display = ["base", *(f"adapter:{cap}" for cap in adapters), "router", "moe", *DIRECT_ROWS]
    rows.sort(key=lambda r: display.index(r["method"]))

    from trace_gym.records import milestone_pass

    for row in rows:
        mine = trajectories[row["method"]]
        # the capability-level picture: was each trained capability exercised where the task needed it?
        row["milestones"] = {cap: list(milestone_pass(mine, cap)) for cap in adapters}
        if row["method"] != "base":
            row["vs_base"] = _paired(_same_tasks(trajectories["base"], mine), mine)
        for direct in DIRECT_ROWS:
            if direct in trajectories and row["method"] not in ("base", *DIRECT_ROWS):
                # the question a user asks first: better than training on the target directly?
                row[f"vs_{direct}"] = _paired(_same_tasks(trajectories[direct], mine), mine)
    write_json(ctx.dir / "table.json", {"rows": rows, "not_run": not_run, "env_id": cfg.target.env_id})
    best = max(rows, key=lambda r: r["success_rate"])
    return {
        "rows": rows,
        "not_run": not_run,
        "summary": f"base {rows[0]['success_rate']:.3f}; best {best['method']} {best['success_rate']:.3f} "
        f"on {rows[0]['episodes']} test tasks",
    }


def _direct_overrides(cfg) -> dict[str, Any]:
    """``[adapters]`` settings that GRPO on the target cannot take as they are. A target's levels are task
    difficulties, not start depths: an adaptive curriculum would climb to harder tasks than the ones evaluated, so
    direct GRPO trains at the evaluated difficulty. A shaped reward is used only where the target declares one.
    Everything else (group size, rescue hints, budgets' units) is the adapters'."""
    from trace_gym.registration import make_env

    env = make_env(cfg.target.env_id)
    try:
        declares_shaped = bool(getattr(env.unwrapped, "shaped_reward_key", None))
    finally:
        env.close()
    overrides: dict[str, Any] = {"curriculum": "fixed"}
    if cfg.adapters.reward != "success" and not declares_shaped:
        overrides["reward"] = "success"
    return overrides


def _same_tasks(reference: list[dict[str, Any]], other: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reference's episodes on the tasks ``other`` played (a per-adapter row may cover fewer tasks)."""
    seeds = {r["seed"] for r in other}
    return [r for r in reference if r["seed"] in seeds]


def _composed_policy(
    method: str, model: str, adapters: dict[str, Any], gates: dict[str, Any], cfg
) -> tuple[Any, str]:
    """The router or MoE policy from step 4 (``trace_train.compose``), or ``(None, why)`` when unavailable."""
    try:
        from trace_train.compose import compare
    except ImportError as err:
        return None, f"step 4's evaluation API is not available ({err})"
    from trace_train.config import EngineArgs, settings_of

    engine = settings_of(cfg.base, EngineArgs)  # the tool text and engine of every other row
    if method == "moe":
        if not gates.get("artefact"):
            return None, gates.get("summary") or "no gate artefact"
        policy = compare.moe_policy(gates["artefact"], dtype=cfg.base.dtype, record_choices=True)
        policy.context = cfg.target.env_id
        return policy.configure(**engine), ""
    router = compare.router_policy(
        model, {c: a["adapter"] for c, a in adapters.items()}, dtype=cfg.base.dtype
    )
    return router.configure(**engine), ""


def _explain_changes(ctx: StageContext, policy: Any, base: list[dict], moe: list[dict]) -> None:
    """Where the MoE's episode first leaves the base's on the tasks only one of them solved, and which slot the
    gates chose there (``explain.json``; ``trace explain`` replays any other task)."""
    from trace_train.compose.explain import explain_changes

    path = ctx.dir / "explain.json"
    if path.is_file():
        return
    entries = explain_changes(policy.composition, policy, base, moe)
    write_json(path, entries)
    ctx.log(f"moe: explained where it parts from the base on {len(entries)} tasks only one of them solved")


def _routing_picture(ctx: StageContext, policy: Any) -> None:
    """Which slot the gates chose on the target's test tasks, per turn type (``routing.png``/``.json``)."""
    from trace_train.compose.compare import gate_chart

    choices = [
        {"env": env, "turn": kind, "slot": slot, "count": n}
        for (env, kind, slot), n in policy.choices.items()
    ]
    slots = list(dict.fromkeys(c["slot"] for c in choices))
    write_json(ctx.dir / "routing.json", choices)
    gate_chart(choices, slots, ctx.dir / "routing.png")
