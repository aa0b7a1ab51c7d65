"""``trace synthesize``: one sub-package per selected capability, rendered with Jinja2 into a plugin package.

For each capability of ``selected_capabilities.json`` (step 1's output, validated against its published
schema): when the target implements the capability-env protocol (``task_capabilities()`` and
``decision_points()``) and declares the capability, the env is *derived from the target*
(:class:`~trace_gym.derived.env.DerivedCapabilityEnv`: the target itself, restricted to train tasks exercising
the capability, started at a start depth; docs/derived.md); otherwise the LLM generation agent writes an env
module, or the capability is rejected with the reason. The module goes through the static check and
``trace check`` in the sandbox; an env that passes is written as ``<out>/<package>/`` with

* ``__init__.py``: registers the id (``trace/<target-name>-<capability>-v0`` for a derived env,
  ``trace/<capability>-v0`` for a generated one) at the difficulty of ``spec.json``;
* ``env.py``: the env class (a thin, documented subclass of ``DerivedCapabilityEnv``, or the generated module);
* ``spec.json``: validated against ``spec.schema.json`` (published in this package); ``trace calibrate``
  writes its calibration there, and re-synthesising keeps it;
* ``CARD.md``: what it isolates, why it transfers, its sources and levels, and an example episode;
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

from trace_gym.derived.env import DerivedCapabilityEnv
from trace_gym.derived.pool import NoSourceTaskError
from trace_gym.derived.registration import derived_id
from trace_gym.synthesis import from_target
from trace_gym.synthesis.sandbox import Limits, SandboxResult, check_in_sandbox
from trace_gym.synthesis.static_check import static_check

SPEC_SCHEMA_FILE = "spec.schema.json"
PACKAGE_FILES = ("__init__.py", "env.py", "spec.json", "CARD.md", "validation.json")
# Generates an env module for a capability the target does not declare: (capability record, target id, class name,
# feedback of the previous failures) -> module source. See generation_agent.py.
Generator = Callable[[dict[str, Any], str, str], "GeneratedModule"]


# Checks a derived env fails for a reviewed reason that is no hole in it (the same entries as the strict xfails
# of tests/test_validation.py KNOWN_HOLES). Strict: the env is accepted only when the failing checks are
# exactly these, and its validation.json keeps ``passed: false`` and names them.
REVIEWED_FAILURES: dict[str, dict[str, str]] = {
    "trace/bfcl-multi-turn-information-retrieval-v0": {
        "adversarial/status_talker": "at level 1 the env starts at the decision; where the rest of the task is "
        "one read call, the probe's opening read call is the capability itself and BFCL rightly passes it "
        "(docs/derived.md)",
    },
    "trace/bfcl-multi-turn-missing-parameter-awareness-v0": {
        "adversarial/status_talker": "at level 1 the env starts at the decision; where the rest of the task is "
        "the question for the missing value and then one read call (multi_turn_miss_param_1, _12, _36), the "
        "probe's opening (the oracle up to its first call, a read) is the whole continuation",
    },
}
# A derived env's module is our own template around trusted library code, so the sandbox's CPU limit (there
# to stop an LLM-written endless loop) is raised for it: scanning BFCL's 1,000 train seeds for the larger
# capabilities and playing 50 seeds of every probe takes more than the default 120 s.
DERIVED_MIN_LIMITS = Limits(cpu_seconds=1200, memory_bytes=3 * 1024**3, wall_seconds=3600.0)


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


def package_of_id(env_id: str) -> str:
    """``trace/retail-precise-arguments-v0`` -> ``retail_precise_arguments``."""
    return env_id.removeprefix("trace/").rsplit("-v", 1)[0].replace("-", "_")


def class_name_of_id(env_id: str) -> str:
    """``trace/retail-precise-arguments-v0`` -> ``RetailPreciseArgumentsV0``."""
    name, version = env_id.removeprefix("trace/").rsplit("-v", 1)
    return "".join(part.capitalize() for part in name.split("-")) + f"V{version}"


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


def derived_spec(
    target: str,
    target_kwargs: dict[str, Any],
    capability: str,
    calibration: dict[str, Any] | None,
) -> dict[str, Any]:
    """The spec of the env derived from ``target`` for ``capability`` (the target is run to read its facts)."""
    target_env = from_target.make_target(target, target_kwargs)
    env_id = derived_id(target, capability)
    tools = [tool["function"]["name"] for tool in target_env.tools]
    spec = {
        "schema_version": 2,
        "id": env_id,
        "capability": capability,
        "description": from_target.capability_description(target_env, capability),
        "target": target,
        "target_kwargs": target_kwargs,
        "generator": "derived",
        "module": DerivedCapabilityEnv.__module__,
        "family_class": DerivedCapabilityEnv.__name__,
        "class_name": class_name_of_id(env_id),
        "tools": tools,
        "isolates": f"{capability} on {target}'s own train tasks that exercise it, started before its "
        "decision point",
        "transfer": f"the env is {target} itself: its system prompt, all {len(tools)} of its tools, its user "
        "simulator and its verifier, unchanged; only the task distribution and the starting point differ",
        "sources": from_target.source_counts(target, target_kwargs, capability),
        "shaped_reward_key": DerivedCapabilityEnv.shaped_reward_key,
        "difficulty": {
            "levels": from_target.level_texts(),
            "default": calibration["level"] if calibration else DerivedCapabilityEnv.default_difficulty,
        },
        "calibration": calibration,
    }
    validate_spec(spec, f"the spec of {env_id}")
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


def render_derived(
    target: str,
    target_kwargs: dict[str, Any],
    capability: str,
    calibration: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The files of one derived env (without its validation report; the description is the target's own, so
    the files do not depend on the selection that asked for them)."""
    spec = derived_spec(target, target_kwargs, capability, calibration)
    example = from_target.example_episode(target, target_kwargs, capability, spec["difficulty"]["default"])
    target_env = from_target.make_target(target, target_kwargs)
    context = {
        "spec": spec,
        "example": example,
        "target_kwargs_source": from_target.python_literal(target_kwargs),
        "target_class": f"{type(target_env).__module__}.{type(target_env).__qualname__}",
        "max_turns": target_env.max_turns,
        "max_invalid_turns": target_env.max_invalid_turns,
    }
    return {
        "__init__.py": render("__init__.py.j2", spec=spec),
        "env.py": render("env.py.j2", **context),
        "spec.json": dump_json(spec),
        "CARD.md": render("CARD.md.j2", **context),
    }


def generated_spec(record: dict[str, Any], target: str, tools: list[str]) -> dict[str, Any]:
    """The spec of an env the LLM generation agent wrote (its levels and tools come from the module)."""
    capability = record["name"]
    spec = {
        "schema_version": 2,
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


def _plan_derived(target: str, target_kwargs: dict[str, Any]) -> tuple[tuple[str, ...] | None, str]:
    """(the capabilities the target declares, or None when it is no source; why it is none)."""
    try:
        target_env = from_target.make_target(target, target_kwargs)
    except Exception as err:  # noqa: BLE001 - a target that cannot be built is named, not a crash
        raise SynthesisError(f"cannot make the target {target} with {target_kwargs}: {err}") from err
    if not from_target.implements_protocol(target_env):
        missing = [name for name in from_target.PROTOCOL if not callable(getattr(target_env, name, None))]
        return None, f"{target} does not implement the capability-env protocol (no {', '.join(missing)})"
    return from_target.declared_capabilities(target, target_kwargs), ""


def derived_limits(limits: Limits | None) -> Limits:
    """The sandbox limits of a derived env: the given ones, raised to :data:`DERIVED_MIN_LIMITS`."""
    limits = limits or Limits()
    return Limits(
        cpu_seconds=max(limits.cpu_seconds, DERIVED_MIN_LIMITS.cpu_seconds),
        memory_bytes=max(limits.memory_bytes, DERIVED_MIN_LIMITS.memory_bytes),
        wall_seconds=max(limits.wall_seconds, DERIVED_MIN_LIMITS.wall_seconds),
    )


def _reject(out: Path, name: str, report: dict[str, Any]) -> Path:
    rejected = out / "_rejected"
    rejected.mkdir(exist_ok=True)
    (rejected / f"{name}.json").write_text(dump_json(report))
    return rejected


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
    target_kwargs: dict[str, Any] | None = None,
) -> list[Outcome]:
    """Render, validate and write one sub-package per capability into the plugin package ``out``.

    A capability the target declares (a protocol target: ``task_capabilities``/``decision_points``) becomes
    the env derived from the target (``target_kwargs`` are the target's, e.g. ``{"difficulty": 1}``); any
    other goes to ``generator`` (the LLM generation agent), or is rejected with the reason.
    """
    if not (out / "__init__.py").exists():
        raise SynthesisError(
            f"{out} is not a Python package (no __init__.py); pass an existing plugin package such as "
            "generated_envs/, or --new-package NAME to create an installable one"
        )
    target_kwargs = dict(target_kwargs or {})
    declared, not_a_source = _plan_derived(target, target_kwargs)
    outcomes = []
    for record in capabilities:
        capability = record["name"]
        if declared is not None and capability in declared:
            env_id = derived_id(target, capability)
            name, cls_name = package_of_id(env_id), class_name_of_id(env_id)
        else:
            env_id = env_id_of(capability)
            name, cls_name = package_name(capability), class_name_of(capability)
        package = out / name
        if declared is not None and capability in declared:
            kind = "derived"
            try:
                files = render_derived(target, target_kwargs, capability, existing_calibration(package))
            except NoSourceTaskError as err:
                report = {"env_id": env_id, "passed": False, "reason": str(err)}
                rejected = _reject(out, name, report)
                outcomes.append(Outcome(capability, env_id, name, False, str(err), kind, rejected, report))
                continue
            difficulty = json.loads(files["spec.json"])["difficulty"]["default"]
        elif generator is None:
            why = not_a_source or (
                f"{target} declares no capability {capability!r} (it declares: {', '.join(declared or ())})"
            )
            reason = f"{why}, and no --model for the LLM generation agent"
            outcomes.append(Outcome(capability, env_id, name, False, reason, "none"))
            continue
        else:
            kind = "llm"
            try:
                module = generator(record, target, cls_name)
            except SynthesisError as err:
                report = {"env_id": env_id, "passed": False, "reason": str(err)}
                rejected = _reject(out, name, report)
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
                limits=derived_limits(limits) if kind == "derived" else limits,
            )
        else:
            verdict = SandboxResult(True, "validation skipped (--no-validate)")
        report = {"env_id": env_id, "seeds": seeds, **verdict.to_json()}
        accepted = verdict.passed
        if kind == "derived" and not verdict.passed and env_id in REVIEWED_FAILURES:
            reviewed = REVIEWED_FAILURES[env_id]
            failed = {check["name"] for check in verdict.checks if not check["passed"]}
            accepted = failed == set(reviewed) and not verdict.refused
            if accepted:
                report["reviewed_failures"] = reviewed
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
        if not accepted:
            rejected = _reject(out, name, report)
            outcomes.append(Outcome(capability, env_id, name, False, verdict.reason, kind, rejected, report))
            continue
        package.mkdir(exist_ok=True)
        if validate:
            files["validation.json"] = dump_json(report)
        for file_name, text in files.items():
            (package / file_name).write_text(text)
        reason = verdict.reason if verdict.passed else f"accepted, reviewed failures: {verdict.reason}"
        outcomes.append(Outcome(capability, env_id, name, True, reason, kind, package, report))
    return outcomes
