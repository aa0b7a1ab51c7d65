"""Stage ``synthesis``: step 2, one registered Gymnasium env per capability chosen by analysis.

Calls step 2's emission (``trace synthesize``): the capabilities chosen in ``capabilities_to_train.json``,
written as a selection document that passes step 1's schema, are rendered as envs derived from the target
(docs/derived.md: the target itself at this run's ``target.difficulty``, restricted to train tasks that exercise
the capability) into the plugin package ``synthesis.package``, validated (static check, then the validation
suite, format conformity included, in a sandboxed subprocess) and registered as
``trace/<target-name>-<capability>-v0``. Example failures quoted in the cards come from
analysis, which only ever saw train-split trajectories (checked again here).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from trace_gym.seeds import refuse_test_records
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.analysis import CHOSEN
from trace_train.pipeline.stages.common import target_kwargs as run_target_kwargs
from trace_train.pipeline.stages.common import use_run_envs, write_json


def run(ctx: StageContext) -> dict[str, Any]:
    cfg = ctx.config
    adir = ctx.upstream_dirs["analysis"]
    chosen = json.loads((adir / CHOSEN).read_text())
    if not chosen:
        return {"envs": [], "summary": "no capability chosen: nothing to synthesise"}
    selection = json.loads((adir / ctx.upstream["analysis"]["selection"]).read_text())
    for cap in selection["capabilities"]:
        refuse_test_records("stage synthesis", cap.get("examples", []))
    # the selection step 2 reads: step 1's document with the chosen capabilities (forced ones included)
    selection["selected"] = [c["name"] for c in chosen]
    for cap in selection["capabilities"]:
        cap["selected"] = cap["name"] in selection["selected"]
    path = ctx.dir / "selection_for_synthesis.json"
    write_json(path, selection)

    from trace_gym.synthesis.emit import load_capabilities, synthesize

    records, _target = load_capabilities(path)  # validated against step 1's schema
    package = package_dir(cfg.synthesis.package)
    # the capability envs are the target as this run uses it: the same difficulty (the target's own make kwarg)
    target_kwargs = run_target_kwargs(cfg)
    outcomes = synthesize(
        records,
        cfg.target.env_id,
        package,
        seeds=cfg.synthesis.validate_seeds,
        log=ctx.log,
        target_kwargs=target_kwargs,
    )
    envs, rejected = [], []
    for o in outcomes:
        if not o.accepted:
            rejected.append({"capability": o.capability, "env_id": o.env_id, "reason": o.reason})
            ctx.log(f"{o.env_id}: rejected: {o.reason}")
            continue
        register(cfg.synthesis.package, o.package, o.env_id)
        use_run_envs(cfg, [o.env_id])  # registered at import from the files before this run rewrote them
        card = (o.path / "CARD.md").read_text(encoding="utf-8") if o.path else ""
        envs.append(
            {
                "capability": o.capability,
                "env_id": o.env_id,
                "generator": o.generator,
                "package": f"{cfg.synthesis.package}.{o.package}",
                "card_summary": card_summary(card),
                "card": card_fields(card),
                "card_file": f"CARD-{o.package}.md",
                "validation": o.validation,
            }
        )
        (ctx.dir / f"CARD-{o.package}.md").write_text(card, encoding="utf-8")
        ctx.log(
            f"{o.capability}: {o.env_id} ({o.generator}, validated on {cfg.synthesis.validate_seeds} seeds)"
        )
    write_json(ctx.dir / "envs.json", {"envs": envs, "rejected": rejected})
    if rejected and not envs:  # nothing to train: the later stages say so and the base is still evaluated
        ctx.log(f"every capability env was rejected by trace check: {[r['env_id'] for r in rejected]}")
    return {
        "envs": envs,
        "rejected": rejected,
        "summary": (", ".join(e["env_id"] for e in envs) or "no env passed trace check")
        + (f"; rejected {len(rejected)}" if rejected else ""),
    }


def package_dir(name: str) -> Path:
    """The folder of the importable plugin package ``name`` (e.g. ``generated_envs``)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"synthesis.package {name!r} is not an importable package")
    return Path(next(iter(spec.submodule_search_locations)))


def register(package: str, sub: str, env_id: str) -> None:
    """Make a just-written env available in this process (plugins are registered when trace_gym is imported)."""
    import gymnasium as gym

    import trace_gym  # noqa: F401 - registers built-ins and the plugins present at import time

    if env_id not in gym.registry:
        importlib.invalidate_caches()
        importlib.import_module(f"{package}.{sub}")
    if env_id not in gym.registry:
        raise RuntimeError(f"{package}.{sub} did not register {env_id}")


def card_summary(card: str) -> str:
    """The card's first paragraph after its title (what the env isolates)."""
    paragraphs = [p.strip() for p in card.split("\n\n") if p.strip() and not p.lstrip().startswith("#")]
    return " ".join(paragraphs[0].split()) if paragraphs else ""


def card_fields(card: str) -> dict[str, str]:
    """The card's "Isolates", "Why it should transfer" and dependency bullets, for the run's report."""
    fields: dict[str, str] = {}
    deps = []
    section = ""
    for line in card.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().lower()
            continue
        text = line.strip()
        if text.startswith("- **Isolates:**"):
            fields["isolates"] = text.split(":**", 1)[1].strip()
        elif text.startswith("- **Why it should transfer"):
            fields["transfer"] = text.split(":**", 1)[1].strip()
        elif section.startswith("dependencies") and text.startswith("- **"):
            deps.append(text[2:].replace("**", ""))
    fields["depends_on"] = "; ".join(deps)
    return fields
