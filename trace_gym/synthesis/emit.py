"""``trace synthesize``: one sub-package per selected capability, rendered with Jinja2 into a plugin package.

For each capability of ``selected_capabilities.json`` (step 1's output, validated against its published
schema), the catalog family renders (or, outside the catalog, the LLM generation agent writes) an env module;
the module goes through the static check and ``trace check`` in the sandbox; an env that passes is written
as ``<out>/<capability_package>/`` with

* ``__init__.py``: registers ``trace/<capability>-v0`` at the difficulty of ``spec.json``;
* ``env.py``: the env class (a thin, documented subclass of the catalog family, or the generated module);
* ``spec.json``: validated against ``spec.schema.json`` (published in this package); ``trace calibrate``
  writes its calibration there, and re-synthesising keeps it;
* ``CARD.md``: what it isolates, why it transfers, its dependencies, and the oracle's conversation on seed 0;
* ``validation.json``: the sandboxed ``trace check`` report.

An env that fails is never written into the package: its report goes to ``<out>/_rejected/<name>.json``.
Everything rendered is deterministic, so re-running ``trace synthesize`` reproduces the files byte for byte.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import jsonschema

from trace_gym.synthesis.catalog import FAMILIES, TARGETS
from trace_gym.synthesis.catalog.base import CAPABILITIES, CapabilityEnv
from trace_gym.synthesis.sandbox import Limits, SandboxResult, check_in_sandbox
from trace_gym.synthesis.static_check import static_check

SPEC_SCHEMA_FILE = "spec.schema.json"
PACKAGE_FILES = ("__init__.py", "env.py", "spec.json", "CARD.md", "validation.json")
# Generates an env module for a capability outside the catalog: (capability record, target id, class name,
# feedback of the previous failures) -> module source. See generation_agent.py.
Generator = Callable[[dict[str, Any], str, str], "GeneratedModule"]


class SynthesisError(ValueError):
    """Bad input to synthesis (selection, target, output directory, spec): the message names the problem."""


@dataclass
class GeneratedModule:
    source: str
    attempts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Outcome:
    capability: str
    env_id: str
    package: str
    accepted: bool
    reason: str
    generator: str
    path: Path | None = None
    validation: dict[str, Any] = field(default_factory=dict)


# ---- names ---------------------------------------------------------------------------------------------------
def slug(capability: str) -> str:
    value = re.sub(r"[^a-z0-9]+", "-", capability.lower()).strip("-")
    if not value or not value[0].isalpha():
        raise SynthesisError(
            f"capability name {capability!r} does not make an env name (need a letter first)"
        )
    return value


def package_name(capability: str) -> str:
    return slug(capability).replace("-", "_")


def env_id_of(capability: str) -> str:
    return f"trace/{slug(capability)}-v0"


def class_name_of(capability: str) -> str:
    return "".join(part.capitalize() for part in slug(capability).split("-")) + "V0"


# ---- spec ------------------------------------------------------------------------------------------------------
@cache
def spec_schema() -> dict[str, Any]:
    """The published JSON Schema of ``spec.json``."""
    return json.loads(resources.files("trace_gym.synthesis").joinpath(SPEC_SCHEMA_FILE).read_text())


def validate_spec(spec: Any, source: str = "spec") -> None:
    errors = sorted(
        jsonschema.Draft202012Validator(spec_schema()).iter_errors(spec), key=lambda e: list(e.path)
    )
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:10]]
        raise SynthesisError(f"{source} does not match {SPEC_SCHEMA_FILE}:\n" + "\n".join(lines))


def catalog_spec(
    family: type[CapabilityEnv], target: str, calibration: dict[str, Any] | None
) -> dict[str, Any]:
    default = calibration["level"] if calibration else family.default_difficulty
    spec = {
        "schema_version": 1,
        "id": env_id_of(family.capability),
        "capability": family.capability,
        "description": family.description,
        "target": target,
        "generator": "catalog",
        "module": family.__module__,
        "family_class": family.__name__,
        "class_name": class_name_of(family.capability),
        "tools": list(family.tool_names),
        "policy_sections": list(family.policy_headings),
        "isolates": family.isolates,
        "transfer": family.transfer_reason,
        "dependencies": dict(family.dependencies),
        "ablatable_capabilities": list(family.ablatable_capabilities),
        "difficulty": {"levels": {str(k): v for k, v in family.levels.items()}, "default": default},
        "calibration": calibration,
    }
    validate_spec(spec, f"the spec of {spec['id']}")
    return spec


def dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


# ---- rendering -------------------------------------------------------------------------------------------------
@cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("trace_gym.synthesis", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template: str, **context: Any) -> str:
    return _templates().get_template(template).render(**context)


def example_conversation(family: type[CapabilityEnv], difficulty: int, seed: int = 0) -> str:
    """The oracle's conversation on ``seed`` (train split), as the card shows it."""
    from trace_gym.core.env import render_conversation

    env = family(difficulty=difficulty)
    env.reset(seed=seed, options={"split": "train"})
    for action in env.oracle_actions():
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return render_conversation(env.messages)


def render_catalog(capability: str, target: str, calibration: dict[str, Any] | None = None) -> dict[str, str]:
    """The files of one catalog env (without its validation report)."""
    family = FAMILIES[capability]
    spec = catalog_spec(family, target, calibration)
    example = example_conversation(family, spec["difficulty"]["default"])
    return {
        "__init__.py": render("__init__.py.j2", spec=spec),
        "env.py": render("env.py.j2", spec=spec),
        "spec.json": dump_json(spec),
        "CARD.md": render("CARD.md.j2", spec=spec, example=example),
    }


def generated_spec(record: dict[str, Any], target: str, tools: list[str]) -> dict[str, Any]:
    """The spec of an env the LLM generation agent wrote (its levels and tools come from the module)."""
    capability = record["name"]
    spec = {
        "schema_version": 1,
        "id": env_id_of(capability),
        "capability": capability,
        "description": record.get("description") or capability,
        "target": target,
        "generator": "llm",
        "module": "env",
        "family_class": class_name_of(capability),
        "class_name": class_name_of(capability),
        "tools": tools,
        "policy_sections": [],
        "isolates": record.get("description") or capability,
        "transfer": f"generated for the capability {capability!r} that step 1 selected on {target}",
        "dependencies": {},
        "ablatable_capabilities": [],
        "difficulty": {"levels": {"1": "as generated"}, "default": 1},
        "calibration": None,
    }
    validate_spec(spec, f"the spec of {spec['id']}")
    return spec


# ---- input -----------------------------------------------------------------------------------------------------
def load_capabilities(path: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """The selected capability records of a ``selected_capabilities.json`` and its target id.

    Validated against step 1's published schema (``trace_gym.analysis.selection``). A plain list of
    ``{"name": ..., "description": ...}`` records is accepted too (hand-written selections).
    """
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SynthesisError(f"capabilities file {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise SynthesisError(f"capabilities file {path} is not JSON: {err}") from None
    if isinstance(document, list):
        records = document
        if not all(isinstance(r, dict) and isinstance(r.get("name"), str) for r in records):
            raise SynthesisError(f"{path}: a list of capabilities must hold objects with a string 'name'")
        return records, None
    from trace_gym.analysis.selection import SelectionError, validate_selection

    try:
        validate_selection(document, str(path))
    except SelectionError as err:
        raise SynthesisError(str(err)) from None
    by_name = {c["name"]: c for c in document["capabilities"]}
    return [by_name.get(name, {"name": name}) for name in document["selected"]], document["target"]["env_id"]


# ---- the package -----------------------------------------------------------------------------------------------
PLUGIN_INIT = '''"""Plugin package of trace capability envs, written by ``trace synthesize``."""

from __future__ import annotations

import importlib
import pkgutil


def register_envs() -> None:
    """Entry point of the ``trace_gym.envs`` group: import every generated sub-package (each registers itself)."""
    for module in pkgutil.iter_modules(__path__):
        if module.ispkg:
            importlib.import_module(f"{__name__}.{module.name}")
'''
PLUGIN_PYPROJECT = """[build-system]
requires = ["setuptools>=77", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "trace capability environments written by trace synthesize"
requires-python = ">=3.11"
dependencies = ["trace-agentic"]

[project.entry-points."trace_gym.envs"]
{name} = "{name}:register_envs"

[tool.setuptools.packages.find]
include = ["{name}*"]

[tool.setuptools.package-data]
"*" = ["*.json", "*.md"]
"""


def new_plugin_package(directory: Path, name: str) -> Path:
    """A new installable plugin project: ``directory/pyproject.toml`` and the package ``directory/name``."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise SynthesisError(f"package name {name!r} is not a valid Python package name (lower case, _)")
    package = directory / name
    package.mkdir(parents=True, exist_ok=True)
    if not (package / "__init__.py").exists():
        (package / "__init__.py").write_text(PLUGIN_INIT)
    if not (directory / "pyproject.toml").exists():
        (directory / "pyproject.toml").write_text(
            PLUGIN_PYPROJECT.format(dist=name.replace("_", "-"), name=name)
        )
    return package


def existing_calibration(package: Path) -> dict[str, Any] | None:
    spec_file = package / "spec.json"
    if not spec_file.exists():
        return None
    try:
        return json.loads(spec_file.read_text()).get("calibration")
    except json.JSONDecodeError:
        return None


def validate_module(
    source: str, class_name: str, *, seeds: int, difficulty: int | None, limits: Limits | None = None
) -> SandboxResult:
    """Static check, then ``trace check`` in the sandbox; the first failure is the verdict."""
    problems = static_check(source)
    if problems:
        return SandboxResult(False, "static check: " + "; ".join(map(str, problems[:8])))
    with tempfile.TemporaryDirectory(prefix="trace-candidate-") as tmp:
        module = Path(tmp) / "candidate_env.py"
        module.write_text(source)
        return check_in_sandbox(module, class_name, seeds=seeds, difficulty=difficulty, limits=limits)


def synthesize(
    capabilities: list[dict[str, Any]],
    target: str,
    out: Path,
    *,
    seeds: int = 50,
    validate: bool = True,
    generator: Generator | None = None,
    limits: Limits | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> list[Outcome]:
    """Render, validate and write one sub-package per capability into the plugin package ``out``."""
    if not (out / "__init__.py").exists():
        raise SynthesisError(
            f"{out} is not a Python package (no __init__.py); pass an existing plugin package such as "
            "generated_envs/, or --new-package NAME to create an installable one"
        )
    outcomes = []
    for record in capabilities:
        capability = record["name"]
        name = package_name(capability)
        package = out / name
        env_id, cls_name = env_id_of(capability), class_name_of(capability)
        if capability in FAMILIES and target not in TARGETS and generator is None:
            reason = f"the catalog is built on retail's domain objects ({', '.join(TARGETS)}), not {target}; "
            outcomes.append(Outcome(capability, env_id, name, False, reason + "pass --model", "none"))
            continue
        if capability in FAMILIES and target in TARGETS:
            kind = "catalog"
            files = render_catalog(capability, target, existing_calibration(package))
            difficulty = json.loads(files["spec.json"])["difficulty"]["default"]
        elif generator is None:
            outcomes.append(
                Outcome(
                    capability,
                    env_id,
                    name,
                    False,
                    "not in the catalog and no --model for the LLM "
                    f"generation agent (catalog: {', '.join(CAPABILITIES)})",
                    "none",
                )
            )
            continue
        else:
            kind = "llm"
            try:
                module = generator(record, target, cls_name)
            except SynthesisError as err:
                report = {"env_id": env_id, "passed": False, "reason": str(err)}
                rejected = out / "_rejected"
                rejected.mkdir(exist_ok=True)
                (rejected / f"{name}.json").write_text(dump_json(report))
                outcomes.append(Outcome(capability, env_id, name, False, str(err), kind, rejected, report))
                continue
            files = {"env.py": module.source}
            difficulty = None
        log(f"{env_id}: {kind} env rendered; validating")
        if validate:
            verdict = validate_module(
                files["env.py"],
                cls_name,
                seeds=seeds,
                difficulty=difficulty,
                limits=limits,
            )
        else:
            verdict = SandboxResult(True, "validation skipped (--no-validate)")
        report = {"env_id": env_id, "seeds": seeds, **verdict.to_json()}
        if kind == "llm" and verdict.passed:
            spec = generated_spec(record, target, verdict.tools)  # read in the sandbox: never imported here
            files.update(
                {
                    "__init__.py": render("__init__.py.j2", spec=spec),
                    "spec.json": dump_json(spec),
                    "CARD.md": f"# `{env_id}`\n\nGenerated by the LLM generation agent for {capability!r}: "
                    f"{spec['description']}\n",
                }
            )
        if not verdict.passed:
            rejected = out / "_rejected"
            rejected.mkdir(exist_ok=True)
            (rejected / f"{name}.json").write_text(dump_json(report))
            outcomes.append(Outcome(capability, env_id, name, False, verdict.reason, kind, rejected, report))
            continue
        package.mkdir(exist_ok=True)
        if validate:
            files["validation.json"] = dump_json(report)
        for file_name, text in files.items():
            (package / file_name).write_text(text)
        outcomes.append(Outcome(capability, env_id, name, True, verdict.reason, kind, package, report))
    return outcomes
