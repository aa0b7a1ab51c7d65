"""``selected_capabilities.json``: building it from the analysis results and validating it.

The schema is published in the package (``trace_gym/analysis/selected_capabilities.schema.json``,
:func:`schema`); synthesis validates its input with :func:`load_selection`.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from trace_gym.analysis.aggregate import CapabilityResult

SCHEMA_FILE = "selected_capabilities.schema.json"


class SelectionError(ValueError):
    """A selection file that does not match the schema (the message names the path and the problem)."""


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of ``selected_capabilities.json``."""
    return json.loads(resources.files("trace_gym.analysis").joinpath(SCHEMA_FILE).read_text())


def validate_selection(document: Any, source: str = "selection") -> None:
    errors = sorted(
        jsonschema.Draft202012Validator(schema()).iter_errors(document), key=lambda e: list(e.absolute_path)
    )
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:10]]
        raise SelectionError(
            f"{source} does not match the selected_capabilities schema:\n" + "\n".join(lines)
        )
    names = {c["name"] for c in document["capabilities"]}
    unknown = [name for name in document["selected"] if name not in names]
    if unknown:
        raise SelectionError(f"{source}: selected names {unknown} are not among the analysed capabilities")


def load_selection(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a ``selected_capabilities.json``; raises :class:`SelectionError` naming the problem."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SelectionError(f"{path} is not JSON: {err}") from None
    validate_selection(document, str(path))
    return document


def capability_json(result: CapabilityResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "description": result.description,
        "selected": result.selected,
        "rank": result.rank,
        "mean_cov": result.mean_cov,
        "mean_er_minus": result.mean_er_minus,
        "mean_er_plus": result.mean_er_plus,
        "mean_delta": result.mean_delta,
        "runs_passing": result.runs_passing,
        "runs": [r.to_json() for r in result.runs],
        "kappa": result.kappa,
        "examples": result.examples,
    }


def build_selection(
    results: list[CapabilityResult],
    *,
    target: dict[str, Any],
    labeller: str,
    thresholds: dict[str, Any],
    llm: dict[str, Any] | None = None,
    outcomes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The validated document for ``results`` (as returned by :func:`~trace_gym.analysis.aggregate.select`)."""
    document = {
        "schema_version": 1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "target": target,
        "labeller": labeller,
        "llm": llm,
        "thresholds": thresholds,
        **({"outcomes": outcomes} if outcomes is not None else {}),
        "capabilities": [capability_json(r) for r in results],
        "selected": [r.name for r in results if r.selected],
    }
    validate_selection(document)
    return document
