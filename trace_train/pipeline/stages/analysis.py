"""Stage ``analysis``: step 1 (contrastive capability analysis) on the base agent's train rollouts.

Calls :func:`trace_gym.analysis.analyze.analyze` with the target's requirement labels, which writes
``selected_capabilities.json`` and its report. The stage then picks the capabilities to train: the selected
ones, best mean Delta first, at most ``analysis.max_capabilities``. ``analysis.force_top_k`` (smoke tests only)
tops the list up with ``analysis.force_order`` first, then the best-ranked unselected capabilities with coverage;
those are marked ``forced`` everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trace_gym.seeds import refuse_test_records
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import write_json

CHOSEN = "capabilities_to_train.json"


def choose(
    selection: dict[str, Any], max_capabilities: int, force_top_k: int, force_order: Sequence[str] = ()
) -> list[dict[str, Any]]:
    caps = selection["capabilities"]
    ranked = sorted(caps, key=lambda c: (-c["mean_delta"], -c["mean_cov"], c["name"]))
    chosen = [dict(c, forced=False) for c in ranked if c["selected"]][:max_capabilities]
    if len(chosen) < force_top_k:
        named = [c for name in force_order for c in ranked if c["name"] == name and not c["selected"]]
        extra = named + [c for c in ranked if not c["selected"] and c["mean_cov"] > 0 and c not in named]
        chosen += [dict(c, forced=True) for c in extra[: min(force_top_k, max_capabilities) - len(chosen)]]
    return chosen


def run(ctx: StageContext) -> dict[str, Any]:
    from trace_gym.analysis.analyze import AnalyzeArgs, analyze
    from trace_gym.records import read_records

    cfg = ctx.config
    rollouts = ctx.upstream_dirs["rollouts"] / ctx.upstream["rollouts"]["file"]
    refuse_test_records("stage analysis", read_records(rollouts))
    analysis = analyze(
        AnalyzeArgs(
            rollouts=[str(rollouts)],
            out=str(ctx.dir),
            labeller="requirements",
            rho=cfg.analysis.rho,
            delta=cfg.analysis.delta,
            examples=cfg.analysis.examples,
        )
    )
    selection = json.loads((ctx.dir / "selected_capabilities.json").read_text())
    chosen = choose(
        selection, cfg.analysis.max_capabilities, cfg.analysis.force_top_k, cfg.analysis.force_order
    )
    write_json(ctx.dir / CHOSEN, chosen)
    names = [c["name"] + (" (forced)" if c["forced"] else "") for c in chosen]
    for c in chosen:
        ctx.log(
            f"{c['name']}: Cov {c['mean_cov']:.2f}, Delta {c['mean_delta']:.2f}"
            + (" - forced by analysis.force_top_k, not selected by the thresholds" if c["forced"] else "")
        )
    return {
        "selection": "selected_capabilities.json",
        "selected": selection["selected"],
        "chosen": [c["name"] for c in chosen],
        "forced": [c["name"] for c in chosen if c["forced"]],
        "timings": analysis.timings,
        "summary": f"selected {selection['selected'] or 'none'}; training {names or 'none'}",
    }
