"""Stage ``synthesis``: step 2, one registered Gymnasium env per capability chosen by analysis.

Calls step 2's emission (``trace synthesize``): the capabilities chosen in ``capabilities_to_train.json``,
written as a selection document that passes step 1's schema, are rendered from the capability catalog into
the plugin package ``synthesis.package``, validated (static check, then the validation suite in a sandboxed
subprocess) and registered as ``trace/<capability>-v0``. Example failures quoted in the cards come from
analysis, which only ever saw train-split trajectories (checked again here).
"""

from __future__ import annotations

import json
from typing import Any

from trace_train.pipeline.isolation import refuse_test_records
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.analysis import CHOSEN
from trace_train.pipeline.stages.common import write_json


def run(ctx: StageContext) -> dict[str, Any]:
    cfg = ctx.config
    adir = ctx.upstream_dirs["analysis"]
    chosen = json.loads((adir / CHOSEN).read_text())
    if not chosen:
        return {"envs": [], "summary": "no capability chosen: nothing to synthesise"}
    selection = json.loads((adir / ctx.upstream["analysis"]["selection"]).read_text())
    for cap in selection["capabilities"]:
        refuse_test_records("synthesis", cap.get("examples", []))
    # the selection step 2 reads: step 1's document with the chosen capabilities (forced ones included)
    selection["selected"] = [c["name"] for c in chosen]
    for cap in selection["capabilities"]:
        cap["selected"] = cap["name"] in selection["selected"]
    path = ctx.dir / "selection_for_synthesis.json"
    write_json(path, selection)

    from trace_gym.synthesis import api  # step 2 (issue 11)

    emitted = api.synthesize(
        selection=str(path),
        target=cfg.target.env_id,
        package=cfg.synthesis.package,
        validate_seeds=cfg.synthesis.validate_seeds,
    )
    envs = []
    for env in emitted:
        envs.append(
            {
                "capability": env["capability"],
                "env_id": env["env_id"],
                "card_summary": env.get("card_summary", ""),
                "validation": env.get("validation"),
            }
        )
        ctx.log(f"{env['capability']}: {env['env_id']}")
    write_json(ctx.dir / "envs.json", envs)
    return {"envs": envs, "summary": ", ".join(e["env_id"] for e in envs)}
