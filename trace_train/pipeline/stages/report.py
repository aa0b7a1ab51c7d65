"""Stage ``report``: report.md + self-contained report.html from what the other stages wrote in this run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_train.pipeline import gain
from trace_train.pipeline.report import (
    Section,
    bar_plot,
    fmt,
    line_plot,
    p_value,
    read_json,
    write_report,
)
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import read_metrics
from trace_train.pipeline.stages.evaluation import DIRECT_ROWS


def _stage_state(directory: Path) -> dict[str, Any]:
    return read_json(directory / "stage.json") or {}


def base_section(ctx: StageContext) -> Section:
    cfg, base = ctx.config, ctx.upstream["base"]
    s = Section("Base agent")
    s.paragraphs.append(
        f"Model `{cfg.base.model}` ({cfg.base.dtype}); the base agent every stage starts from is `{base['model']}`."
    )
    if cfg.base.model == "tiny-random":
        s.paragraphs.append(
            "**Smoke test**: the model is a random 2-layer network; it cannot solve the task, so every success "
            "rate below is expected to be 0 and no comparison is meaningful. This run checks the pipeline, not TRACE."
        )
    if base["trained_on"]:
        rows = [
            [
                t["env_id"],
                t["split"],
                f"{t['task_indices'][0]}-{t['task_indices'][1]}",
                fmt(t["oracle_episodes_kept"]),
                fmt(t["first_loss"]),
                fmt(t["final_loss"]),
            ]
            for t in base["trained_on"]
        ]
        shipped = base.get("shipped")
        if shipped:
            made = shipped.get("made", {})
            s.paragraphs.append(
                f"The warm start is the **shipped base `{shipped['name']}`** (trace_train/bases; adapter sha256 "
                f"`{shipped['sha256']['adapter_model.safetensors'][:16]}`, checked before use), the fit this run's "
                f"`[base.warm_start]` asks for, made by `trace base build {shipped['name']}` in "
                f"{made.get('train_seconds', 0) / 60:.0f} min ({made.get('dtype', '?')} on {made.get('cpu', '?')}); "
                "`base.warm_start.shipped = false` fits it in the run instead."
            )
        s.paragraphs.append(
            "Warm start: supervised fine-tuning (LoRA, merged) on oracle trajectories of exactly these train-split tasks:"
        )
        s.tables.append(
            (["env", "split", "task indices", "oracle episodes kept", "first loss", "final loss"], rows)
        )
    else:
        s.paragraphs.append("No warm start: the base agent is the model as configured.")
    r = ctx.upstream["rollouts"]
    s.after.append(
        f"On {r['episodes']} train-split tasks of `{cfg.target.env_id}` the base agent passed {r['passed']} and failed {r['failed']} (success {r['passed'] / max(1, r['episodes']):.3f})."
    )
    return s


def analysis_section(ctx: StageContext) -> Section:
    a = ctx.upstream["analysis"]
    d = ctx.upstream_dirs["analysis"]
    selection = read_json(d / a["selection"])
    s = Section("Step 1: what failed and why")
    th = selection["thresholds"]
    s.paragraphs.append(
        f"Labels: the target's own requirement checks ({selection['labeller']}). A capability is kept when "
        f"Cov >= {th['rho']} and Delta >= {th['delta']} in at least {th['k']} of {th['n']} run(s). "
        f"Full analysis report: `{d.name}/report.html`."
    )
    rows = []
    for c in sorted(selection["capabilities"], key=lambda c: -c["mean_delta"]):
        rows.append(
            [
                c["name"],
                fmt(c["mean_cov"], 2),
                fmt(c["mean_er_minus"], 2),
                fmt(c["mean_er_plus"], 2),
                fmt(c["mean_delta"], 2),
                "yes" if c["selected"] else "no",
            ]
        )
    s.tables.append((["capability", "Cov", "ER-", "ER+", "Delta", "selected"], rows))
    chart = d / "chart.png"
    if chart.is_file():
        s.images.append(("analysis_chart.png", chart.read_bytes()))
    if a["forced"]:
        s.after.append(
            f"**Forced** (smoke test, `analysis.force_top_k`): {', '.join(a['forced'])} did not pass the thresholds and were trained anyway."
        )
    s.after.append(f"Capabilities trained: {', '.join(a['chosen']) or 'none'}.")
    return s


def synthesis_section(ctx: StageContext) -> Section:
    s = Section("Step 2: capability environments")
    syn, cal = ctx.upstream["synthesis"], ctx.upstream["calibration"]
    if not syn["envs"]:
        s.paragraphs.append("No environment was synthesised (no capability to train).")
        return s
    for env in syn["envs"]:
        s.paragraphs.append(
            f"**{env['env_id']}** ({env['capability']}, {env.get('generator', '?')}): "
            f"{env.get('card_summary', '')} Card: `{ctx.upstream_dirs['synthesis'].name}/{env.get('card_file', '')}`."
        )
    s.tables.append(
        (
            ["env", "isolates", "why it should transfer", "depends on"],
            [
                [
                    e["env_id"],
                    *(e.get("card", {}).get(k, "-") or "-" for k in ("isolates", "transfer", "depends_on")),
                ]
                for e in syn["envs"]
            ],
        )
    )
    if syn.get("rejected"):
        s.paragraphs.append(
            "Rejected: " + "; ".join(f"{r['env_id']} ({r['reason']})" for r in syn["rejected"]) + "."
        )
    rows = [
        [
            c["env_id"],
            fmt(c.get("difficulty")),
            fmt(c.get("mean_reward")),
            fmt(c.get("success_rate")),
            fmt(c.get("informative_share")),
            "yes" if c.get("in_band") else "no",
        ]
        for c in cal["envs"]
    ]
    s.tables.append(
        (["env", "difficulty chosen", "mean reward", "success", "informative groups", "in band"], rows)
    )
    if not cal.get("measured", True):
        s.after.append("Calibration was disabled by the config: the envs' default difficulties were used.")
    else:
        s.after.append("TRACE's band: mean reward and success in [0.2, 0.6], informative groups >= 50%.")
    return s


def _reward_curve(info: dict[str, Any]) -> list[float | None]:
    """Mean reward per GRPO step, read again from the run's metrics (one point per step even when the stage
    was resumed; summaries written before ``read_metrics`` existed listed redone steps twice)."""
    path = Path(info["adapter"]).parent / "metrics.jsonl"
    if path.is_file():
        return [m.get("reward_mean") for m in read_metrics(path)]
    return info["reward_curve"]


def adapters_section(ctx: StageContext) -> Section:
    s = Section("Step 3: one GRPO adapter per capability")
    adapters = ctx.upstream["adapters"]["adapters"]
    if not adapters:
        s.paragraphs.append("No adapter was trained.")
        return s
    curves = {cap: _reward_curve(info) for cap, info in adapters.items()}
    s.images.append(
        (
            "adapter_curves.png",
            line_plot(curves, "GRPO step", "mean reward of the step's rollouts", "training curves"),
        )
    )
    rows = [
        [
            cap,
            info["env_id"],
            fmt(info["difficulty"]),
            str(info["steps"]),
            str(info["rollouts"]),
            fmt(info["first_reward"]),
            fmt(info["last_reward"]),
            fmt(info["wall_s"], 0),
        ]
        for cap, info in adapters.items()
    ]
    s.tables.append(
        (
            ["capability", "env", "difficulty", "steps", "rollouts", "first reward", "last reward", "wall s"],
            rows,
        )
    )
    fitted = {cap: info["sft"] for cap, info in adapters.items() if info.get("sft")}
    for cap, sft in fitted.items():
        s.paragraphs.append(
            f"Before GRPO, the {cap} adapter was fitted by SFT to {sft['episodes']} oracle episodes of its env "
            f"(train tasks {sft['task_indices'][0]}-{sft['task_indices'][1]}, {sft['epochs']} epoch(s), loss "
            f"{fmt(sft['first_loss'])} -> {fmt(sft['final_loss'])}, {fmt(sft['wall_s'], 0)} s): the paper trains "
            "with GRPO alone; these oracle episodes are not rollouts and are not counted above."
        )
    return s


CURVES = (  # what a GRPO run's metrics say per step, and how the report names it
    ("reward_mean", "mean reward of the step's rollouts"),
    ("informative_group_share", "informative groups (unequal rewards)"),
    ("level_mean", "mean level (start depth) of the groups"),
)


def training_runs(ctx: StageContext) -> dict[str, list[dict[str, Any]]]:
    """Every GRPO run of the run, by name: each adapter, and direct GRPO on the target (each budget) where it was
    trained; per step, its metrics as the finished run saw them."""
    runs = {
        f"adapter:{cap}": read_metrics(Path(info["adapter"]).parent / "metrics.jsonl")
        for cap, info in ctx.upstream["adapters"]["adapters"].items()
    }
    evaluation_dir = ctx.upstream_dirs.get("evaluation")
    for method in DIRECT_ROWS:
        path = evaluation_dir / method / "metrics.jsonl" if evaluation_dir else None
        if path is not None and path.is_file():
            runs[method] = read_metrics(path)
    return {name: steps for name, steps in runs.items() if steps}


def curves_section(ctx: StageContext) -> Section:
    """The training curves of every adapter and of direct GRPO: reward, informative share, level, per step."""
    s = Section("Training curves: every adapter and direct GRPO")
    runs = training_runs(ctx)
    if not runs:
        s.paragraphs.append("No GRPO run recorded its steps.")
        return s
    s.paragraphs.append(
        "Per GRPO step: the mean reward of its rollouts (the env's success, whatever reward trained), the share of "
        "its groups whose rewards were not all equal (the only ones GRPO learns from), and the mean level of its "
        "groups (an adapter's start depth under the adaptive curriculum; direct GRPO trains at the evaluated "
        "difficulty). TFLOP: the run's model compute so far, oracle fit not included."
    )
    for key, label in CURVES:
        series = {name: [m.get(key) for m in steps] for name, steps in runs.items()}
        if any(v is not None for ys in series.values() for v in ys):
            s.images.append((f"curve_{key}.png", line_plot(series, "GRPO step", label, label)))
    rows = [
        [
            name,
            str(m.get("step", i + 1)),
            fmt(m.get("reward_mean")),
            fmt(m.get("informative_group_share")),
            fmt(m.get("level_mean")),
            str(m.get("rollouts_total", "-")),
            "-" if m.get("flops_total") is None else f"{m['flops_total'] / 1e12:.1f}",
        ]
        for name, steps in runs.items()
        for i, m in enumerate(steps)
    ]
    s.tables.append(
        (["run", "step", "reward", "informative", "level", "rollouts so far", "TFLOP so far"], rows)
    )
    return s


def gates_section(ctx: StageContext) -> Section:
    s = Section("Step 4: routing")
    g = ctx.upstream["gates"]
    if not g.get("artefact"):
        s.paragraphs.append(g["summary"])
        return s
    oracle = {k: v for k, v in (g.get("data") or {}).items() if k.endswith("(oracle)")}
    for name, info in oracle.items():
        s.paragraphs.append(
            f"No rollout of the {name.removesuffix(' (oracle)')} adapter succeeded on its env, so its gate labels "
            f"come from {info['kept']} oracle episodes of that env (gates.oracle_episodes), not from the adapter."
        )
    for name, info in (g.get("data") or {}).items():
        if info.get("advantage_share") is not None:
            s.paragraphs.append(
                f"Advantage labels ({name}): {info['advantage_share']:.0%} of its tokens kept the adapter's label "
                "(the adapter predicts them more surely than the base by gates.advantage_margin); the rest are "
                "labelled base."
            )
    metrics = read_metrics(Path(g["artefact"]) / "metrics.jsonl")
    shares = {
        k: [m.get(k) for m in metrics]
        for k in sorted({k for m in metrics for k in m if k.startswith("share_")})
    }
    if shares:
        s.images.append(
            (
                "gate_shares.png",
                line_plot(shares, "gate step", "share of tokens", "routing during gate training"),
            )
        )
    routing = ctx.upstream_dirs["evaluation"] / "routing.png"
    if routing.is_file():
        s.images.append(("routing.png", routing.read_bytes()))
        s.after.append(
            "Routing picture: share of (token, layer) routing decisions per slot on the target's test tasks, by "
            "turn type, counted during the MoE evaluation at the positions that produced each turn's tokens."
        )
    router = next(
        (r for r in ctx.upstream.get("evaluation", {}).get("rows", []) if r["method"] == "router"), None
    )
    if router and router.get("routes"):
        s.paragraphs.append(
            f"The task-level router (a zero-shot choice by the base model on each task's first prompt) sent the "
            f"{router['episodes']} test tasks to: "
            + ", ".join(f"{slot} {n}" for slot, n in router["routes"].items())
            + " (per task: `08-evaluation/router_routes.json`)."
            + (
                f" Its {router['reused_base_episodes']} episodes on the tasks it gave the base are the base's own "
                "(the same model on the same task), not played again."
                if router.get("reused_base_episodes")
                else ""
            )
        )
    s.paragraphs.append(
        f"Gates over {', '.join(g['names'])}; final training metrics: "
        + ", ".join(
            f"{k} {fmt(v)}" for k, v in g["final"].items() if k in ("loss", "label_accuracy", "share_base")
        )
        + "."
    )
    explained = read_json(ctx.upstream_dirs["evaluation"] / "explain.json")
    if explained:  # the last paragraph, so it reads as the table's caption
        s.paragraphs.append(
            "Where the MoE's episode first leaves the base's, on the test tasks only one of them solved "
            "(`trace explain`, teacher-forced): on a base success the MoE lost, the first token of the base's turn "
            "the gated model would not write; on a MoE success, the first token of its turn the base would not "
            "write. Layers: how many decoder layers' gates chose each slot for that token."
        )
        s.tables.append(_explained_table(explained, ["base", *g["names"]]))
    elif explained == []:
        s.after.append("The base and the MoE solved the same test tasks: no episode pair to explain.")
    return s


def _explained_table(entries: list[dict[str, Any]], slots: list[str]) -> tuple[list[str], list[list[str]]]:
    header = [
        "task",
        "MoE",
        "turn",
        "after",
        "recorded",
        "gated writes",
        "layers",
        *(f"{n} alone" for n in slots),
    ]
    rows = []
    for e in entries:
        if "token" not in e:
            rows.append(
                [
                    str(e["seed"]),
                    e["change"],
                    str(e["turn"]),
                    "(no token departs)",
                    *["-"] * (len(header) - 4),
                ]
            )
            continue
        layers = ", ".join(f"{n} {c}" for n, c in e["layer_slots"].items() if c)
        rows.append(
            [
                str(e["seed"]),
                e["change"],
                str(e["turn"]),
                repr(e["before"][-40:]),
                repr(e["recorded"]),
                repr(e["argmax"]["gated"]),
                layers,
                *(repr(e["argmax"].get(n, "-")) for n in slots),
            ]
        )
    return header, rows


def _reward_diff(paired: dict[str, Any] | None) -> str:
    if not paired:
        return "-"
    lo, hi = paired["reward_diff_ci"]
    return f"{paired['reward_diff']:+.3f} ({lo:+.3f}, {hi:+.3f})"


def evaluation_section(ctx: StageContext) -> Section:
    cfg, ev = ctx.config, ctx.upstream["evaluation"]
    rows_in = ev["rows"]
    direct = any(f"vs_{d}" in r for r in rows_in for d in DIRECT_ROWS)
    s = Section(f"Final table: {cfg.target.env_id}, test split")
    s.paragraphs.append(
        f"{rows_in[0]['episodes']} test tasks, the same for every method (greedy decoding). 95% Wilson intervals; "
        "p: exact McNemar test against the base on the same tasks (gained/lost = tasks the method wins that the base fails, and the reverse); "
        "reward diff: mean paired reward difference to the base with a paired-bootstrap 95% interval. "
        "Base successes kept: of the test tasks the base solves, the share the method also solves (do no harm). "
        + (
            "The same paired tests against direct GRPO (the fair baseline) where it was measured. "
            if direct
            else ""
        )
        + "Rollouts: training episodes the method cost beyond the base agent (router and MoE: all adapters plus the gate data). "
        "Train TFLOP: the model compute of that training, oracle fits included (trace_train.roofline's count: "
        "2 x parameters per token forward, 6x trained, plus attention). Direct GRPO (equal rollouts) gets as many "
        "rollouts as the adapters; direct GRPO (equal compute) as many FLOPs as the adapters and the gate data."
    )
    fitted = [info["sft"] for info in ctx.upstream["adapters"]["adapters"].values() if info.get("sft")]
    if fitted:
        n = fitted[0]["episodes"]
        s.paragraphs.append(
            f"Every adapter was first fitted by SFT to {n} oracle episodes of its env (step 3); direct GRPO, where "
            f"measured, to {n * len(fitted)} oracle episodes of the target. Oracle episodes are not in Rollouts."
        )
    directs = [d for d in DIRECT_ROWS if any(f"vs_{d}" in r for r in rows_in)]
    rows = []
    for r in rows_in:
        vs = r.get("vs_base")
        cells = [
            r["method"],
            fmt(r["success_rate"]),
            f"{r['success_ci'][0]:.3f}-{r['success_ci'][1]:.3f}",
            fmt(r["reward_mean"]),
            p_value(vs["mcnemar_p"]) if vs else "-",
            f"+{vs['only_b']}/-{vs['only_a']}" if vs else "-",
            _reward_diff(vs),
            fmt(vs.get("kept_share")) if vs and vs.get("kept_share") is not None else "-",
        ]
        for d in directs:
            vd = r.get(f"vs_{d}")
            cells += [
                p_value(vd["mcnemar_p"]) if vd else "-",
                f"+{vd['only_b']}/-{vd['only_a']}" if vd else "-",
                _reward_diff(vd),
            ]
        flops = r.get("train_flops")
        cells += [
            str(r["train_rollouts"]),
            "-" if flops is None else f"{flops / 1e12:.1f}",
            fmt(r.get("train_wall_s"), 0),
            fmt(r["eval_wall_s"], 0),
        ]
        rows.append(cells)
    header = [
        "method",
        "success",
        "95% CI",
        "mean reward",
        "p vs base",
        "gained/lost",
        "reward diff (95% CI)",
    ]
    header.append("base successes kept")
    for d in directs:
        name = DIRECT_LABELS[d]
        header += [f"p vs {name}", f"gained/lost vs {name}", f"reward diff vs {name} (95% CI)"]
    header += ["rollouts", "train TFLOP", "train wall s", "eval wall s"]
    s.tables.append((header, rows))
    s.images.append(
        (
            "final.png",
            bar_plot(
                [r["method"] for r in rows_in],
                [r["success_rate"] for r in rows_in],
                [tuple(r["success_ci"]) for r in rows_in],
                "test success",
            ),
        )
    )
    capabilities = sorted({c for r in rows_in for c in r.get("milestones", {})})
    if capabilities:
        s.paragraphs.append(
            "Second table, the capability-level picture: each trained capability's milestone pass rate on these test tasks (among "
            "the episodes that reached the capability's decision, the share where the target's requirement "
            "check finds it present; passed/reached)."
        )
        table = []
        for cap in capabilities:
            cells = [cap]
            for r in rows_in:
                passed, reached = r.get("milestones", {}).get(cap, (0, 0))
                cells.append(f"{passed}/{reached} ({passed / reached:.2f})" if reached else "0/0")
            table.append(cells)
        s.tables.append((["capability", *[r["method"] for r in rows_in]], table))
    for method, why in ev["not_run"].items():
        s.after.append(f"**{method}** not evaluated: {why}.")
    return s


def _pass_cell(link: gain.Link | None) -> str:
    return f"{link.passed}/{link.reached} (base {link.base_passed}/{link.base_reached})" if link else "-"


def gain_section(ctx: StageContext) -> Section:
    """Where the gain stops, per trained capability (``trace_train.pipeline.gain``), from the test episodes."""
    from trace_gym.records import read_records

    s = Section("Where the gain stops")
    ev, directory = ctx.upstream["evaluation"], ctx.upstream_dirs["evaluation"]
    adapters = ctx.upstream["adapters"]["adapters"]
    files = {r["method"]: directory / r["trajectories"] for r in ev["rows"] if r.get("trajectories")}
    if "base" not in files or not adapters:
        s.paragraphs.append(
            "Not measured: " + ("no adapter was trained." if not adapters else "no base episodes.")
        )
        return s
    episodes = {method: read_records(path) for method, path in files.items()}
    composed_method = next((m for m in ("moe", "router") if m in episodes), None)
    composed = episodes.get(composed_method) if composed_method else None
    chains = [
        gain.chain(cap, episodes["base"], episodes.get(f"adapter:{cap}"), composed, _reward_curve(info))
        for cap, info in adapters.items()
    ]
    s.paragraphs.append(
        "TRACE gains only if every link holds: the capability causes some of the base's failures (step 1), its "
        "adapter learns it (step 3), that carries over to the target (transfer), the composition uses it (step 4), "
        "and passing the decision turns into solved tasks. Each link on this run's test episodes, against the base "
        "on the same tasks; passed/reached: episodes where the capability was present at its decision, of those "
        "that reached it. A method counts as better at a capability when it passes more of the tasks where both it "
        "and the base reached the decision (not fewer first failures there: breaking an earlier step also gives "
        f"fewer). The composition: {composed_method or 'not evaluated'}."
    )
    rows = [
        [
            c.capability,
            f"{c.caused}/{c.base_failures}",
            ", ".join("-" if r is None else f"{r:.2f}" for r in c.training_rewards) or "-",
            _pass_cell(c.alone),
            _pass_cell(c.composed),
            f"{c.composed.first_failures} (base {c.composed.base_first_failures})" if c.composed else "-",
            f"{c.composed.successes}/{c.composed.tasks} (base {c.composed.base_successes})"
            if c.composed
            else "-",
            gain.VERDICTS[c.verdict],
        ]
        for c in chains
    ]
    header = [
        "capability",
        "base failures first failing here",
        "adapter's training reward per step",
        "adapter alone: passed/reached",
        "composition: passed/reached",
        "composition: first failures here",
        "composition: solved",
        "the gain stops at",
    ]
    s.tables.append((header, rows))
    for c in chains:
        s.after.append(f"**{c.capability}** stops at {gain.VERDICTS[c.verdict]}: {c.why}.")
    verdicts = {c.verdict for c in chains}
    if len(verdicts) == 1:
        s.after.append(f"For every trained capability the gain stops at {gain.VERDICTS[verdicts.pop()]}.")
    causes = gain.failure_causes(episodes["base"])
    s.after.append(
        "The base's failed test tasks by first cause: "
        + (", ".join(f"{cause} {n}" for cause, n in causes.most_common()) or "none")
        + "."
    )
    return s


DIRECT_LABELS = {"direct_grpo": "direct GRPO", "direct_grpo_compute": "direct GRPO (equal compute)"}
SIGNIFICANCE = 0.05  # the answer calls a difference only where the exact McNemar test says so at this level


def _successes(row: dict[str, Any]) -> str:
    n = row["episodes"]
    return f"{round(row['success_rate'] * n)}/{n} ({row['success_rate']:.1%})"


def _compared(row: dict[str, Any], key: str, other: str) -> tuple[str | None, str]:
    """(``"better"``/``"worse"``/``None`` for no significant difference, the figures) of ``row`` against the
    method its paired test ``key`` was run against."""
    vs = row.get(key)
    if not vs:
        return None, f"{other} not measured"
    gained, lost, p = vs["only_b"], vs["only_a"], vs["mcnemar_p"]
    figures = f"against {other} +{gained}/-{lost} tasks, exact McNemar p {p_value(p)}"
    if p < SIGNIFICANCE and gained != lost:
        return ("better" if gained > lost else "worse"), figures
    return None, figures


def answer_section(ctx: StageContext) -> Section:
    """The question a user asks first, answered from the final table: does the composition beat both the base
    and GRPO directly on the target?"""
    ev = ctx.upstream["evaluation"]
    rows = {r["method"]: r for r in ev["rows"]}
    s = Section("The answer: does TRACE beat the base and direct GRPO?")
    trace_method = next((m for m in ("moe", "router") if m in rows), None)
    if trace_method is None:
        s.paragraphs.append("**Not answered:** neither the gated composition nor the router was evaluated.")
        return s
    row = rows[trace_method]
    vs_base, base_figures = _compared(row, "vs_base", "the base")
    directs = [d for d in DIRECT_ROWS if d in rows]
    versus = [(vs_base, "the base")]
    figures = [base_figures]
    for d in directs:
        verdict, fig = _compared(row, f"vs_{d}", DIRECT_LABELS[d])
        versus.append((verdict, DIRECT_LABELS[d]))
        figures.append(fig)
    if not directs:
        answer = "Not answered: direct GRPO, the fair baseline, was not measured"
    elif all(v == "better" for v, _ in versus):
        answer = "Yes"
    else:
        worse = [n for v, n in versus if v == "worse"]
        level = [n for v, n in versus if v is None]
        parts = [f"worse than {' and '.join(worse)}"] if worse else []
        parts += [f"not significantly better than {' or '.join(level)}"] if level else []
        answer = "No: " + "; ".join(parts)
    name = {"moe": "the gated composition (MoE)", "router": "the task-level router"}[trace_method]
    others = ", ".join(
        f"{label} {_successes(rows[m])}"
        for m, label in (("base", "the base"), *DIRECT_LABELS.items(), ("router", "the router"))
        if m in rows and m != trace_method
    )
    s.paragraphs.append(
        f"**{answer}.** On the same test tasks {name} solves {_successes(row)}; {others}. "
        f"{name[0].upper() + name[1:]}: {'; '.join(figures)} (a difference is called only at p < "
        f"{SIGNIFICANCE})."
    )
    kept = (row.get("vs_base") or {}).get("kept_share")
    if kept is not None:
        s.paragraphs.append(f"Do no harm: it keeps {kept:.0%} of the base's test successes.")
    labels = {"moe": "MoE", "router": "router", **DIRECT_LABELS}
    costs = [
        f"{labels[m]} {r['train_rollouts']} training rollouts"
        + (f", {r['train_flops'] / 1e12:.1f} TFLOP" if r.get("train_flops") else "")
        + f", {r.get('train_wall_s') or 0:.0f} s"
        for m, r in rows.items()
        if m in (trace_method, *DIRECT_ROWS)
    ]
    if costs:
        s.paragraphs.append("Training cost: " + "; ".join(costs) + ". The full table follows.")
    return s


def _finished_table(run_dir: Path) -> tuple[int, dict[str, Any]]:
    """(seed, final table) of a finished run folder; a ValueError names what is missing."""
    config, tables = run_dir / "run_config.json", sorted(run_dir.glob("*-evaluation/table.json"))
    if not config.is_file() or not tables:
        raise ValueError(f"report.other_runs: {run_dir} has no run_config.json and evaluation table.json")
    return int(read_json(config).get("seed", 0)), read_json(tables[-1])


def _seed_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    lo, hi = row["success_ci"]
    cell = f"{_successes(row)} [{lo:.2f}-{hi:.2f}]"
    tests = [
        f"{label} p {p_value(row[k]['mcnemar_p'])}"
        for k, label in (("vs_base", "base"), *((f"vs_{d}", d) for d in DIRECT_ROWS))
        if row.get(k)
    ]
    return cell + (f"; {', '.join(tests)}" if tests else "")


def seeds_section(ctx: StageContext) -> Section | None:
    """This run's final table beside other seeds' (``report.other_runs``): how much the answer moves."""
    others = [Path(d) for d in ctx.config.report.other_runs]
    if not others:
        return None
    tables = [(ctx.config.seed, ctx.upstream["evaluation"])] + [_finished_table(d) for d in others]
    s = Section("Across seeds")
    s.paragraphs.append(
        "The same config with another seed (`seed`: every stage's sampling and initialisation after the shipped "
        "base), on the same test tasks: successes with the 95% Wilson interval, and the exact McNemar p against "
        "the base and the direct GRPO rows of the same seed. Folders: "
        + ", ".join(f"`{d}`" for d in [Path(ctx.config.out), *others])
        + "."
    )
    by_seed = [(seed, {r["method"]: r for r in table["rows"]}) for seed, table in tables]
    methods = list(dict.fromkeys(m for _, rows in by_seed for m in rows))
    header = ["method", *(f"seed {seed}" for seed, _ in by_seed), "spread (points)"]
    lines = []
    for m in methods:
        rates = [rows[m]["success_rate"] for _, rows in by_seed if m in rows]
        spread = f"{(max(rates) - min(rates)) * 100:.1f}" if len(rates) > 1 else "-"
        lines.append([m, *(_seed_cell(rows.get(m)) for _, rows in by_seed), spread])
    s.tables.append((header, lines))
    return s


def timing_section(ctx: StageContext) -> Section:
    s = Section("Stages: wall time and memory")
    states = {name: _stage_state(d) for name, d in ctx.upstream_dirs.items()}
    rows = [
        [
            name,
            fmt(st.get("wall_s"), 1),
            fmt((st.get("roofline") or {}).get("bound_s"), 1),
            fmt((st.get("roofline") or {}).get("share_of_bound")),
            fmt(st.get("peak_rss_mb"), 0),
            (ctx.upstream[name].get("summary") or "")[:120],
        ]
        for name, st in states.items()
    ]
    header = ["stage", "wall s", "bound s", "share of bound", "peak RSS MB", "result"]
    machines = {name: ", ".join(st.get("machines") or ["not recorded"]) for name, st in states.items()}
    if len(set(machines.values())) > 1:  # resumed on other machines: each stage says where it ran
        header.insert(5, "CPU")
        for row, name in zip(rows, states, strict=True):
            row.insert(5, machines[name])
    s.tables.append((header, rows))
    total = sum(float(st.get("wall_s") or 0) for st in states.values())
    scopes = {st.get("peak_rss_scope", "process so far") for st in states.values()}
    peak = (
        "Peak RSS is each stage's own (the process's high-water mark is reset as a stage starts)."
        if scopes == {"stage"}
        else "Peak RSS: where the OS could not reset the process's high-water mark (or for stages run by an "
        "older version), the process's maximum up to the end of the stage, which may belong to an earlier stage."
    )
    where = {
        0: "",
        1: f"Every stage ran on {next(iter(machines.values()), '')}.",
    }.get(
        len(set(machines.values())),
        "The stages ran on more than one machine (column CPU): their times are not one machine's.",
    )
    s.after.append(
        f"Total wall time of the stages above: {total:.0f} s ({total / 60:.1f} min). {peak} {where}"
    )
    s.after += roofline_paragraphs(states)
    return s


def roofline_paragraphs(states: dict[str, dict[str, Any]]) -> list[str]:
    """Each stage's phases against this machine's measured limit (trace_train/roofline.py), as text: the
    report's tables are one per section, and this one belongs under the stage table."""
    accounts = {name: st["roofline"] for name, st in states.items() if st.get("roofline")}
    if not accounts:
        return []
    peak = next(iter(accounts.values()))["peak"]
    out = [
        f"**Roofline.** Bound s is the least time the stage's model work needs on this machine: per phase, its "
        f"FLOPs at the measured {peak['gflop_per_s']} GFLOP/s ({peak['dtype']}, {peak['threads']} threads) or "
        f"its bytes at the measured {peak['gb_per_s']} GB/s, whichever is longer; share of bound is bound s over "
        "wall s (1.0 = at the machine's limit). Time outside the model (env steps, tokenising, Python between "
        "turns) has bound 0. Per phase (seconds, share of bound, what limits it):"
    ]
    for name, acc in accounts.items():
        parts = [
            f"{phase} {row['seconds']:.0f} s"
            + (f" at {row['share_of_bound']:.2f} ({row['limited_by']})" if row.get("share_of_bound") else "")
            for phase, row in acc["phases"].items()
        ]
        out.append(f"`{name}`: " + "; ".join(parts) + ".")
    return out


def run(ctx: StageContext) -> dict[str, Any]:
    cfg = ctx.config
    sections = [  # the answer and the table that backs it first, then how the run got there
        answer_section(ctx),
        evaluation_section(ctx),
        seeds_section(ctx),
        gain_section(ctx),
        base_section(ctx),
        analysis_section(ctx),
        synthesis_section(ctx),
        adapters_section(ctx),
        curves_section(ctx),
        gates_section(ctx),
        timing_section(ctx),
    ]
    intro = [
        f"Run `{cfg.name}` on target `{cfg.target.env_id}`, seed {cfg.seed}. Every figure below was measured in this run; "
        f"the config it ran with is `{Path(cfg.out).name}/run_config.json`."
    ]
    sections = [s for s in sections if s is not None]
    paths = write_report(ctx.dir, cfg.report.title, intro, sections)
    (ctx.dir / "sections.json").write_text(json.dumps([s.title for s in sections]) + "\n")
    return {"report_md": paths["md"], "report_html": paths["html"], "summary": f"report in {paths['html']}"}
