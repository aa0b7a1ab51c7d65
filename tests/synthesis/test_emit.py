"""trace synthesize: the committed generated_envs/ is exactly what synthesis renders; specs, cards, packages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import generated_envs
from trace_gym.derived.levels import LEVELS
from trace_gym.registration import register_env
from trace_gym.synthesis import emit
from trace_gym.synthesis.emit import (
    PACKAGE_FILES,
    REVIEWED_FAILURES,
    SynthesisError,
    existing_calibration,
    load_capabilities,
    new_plugin_package,
    package_of_id,
    render_derived,
    synthesize,
    validate_spec,
)

PACKAGE = Path(generated_envs.__file__).parent
BFCL = "trace/bfcl-multi-turn-v0"
RETAIL = "trace/retail-v2"
FAST = "missing-function-awareness"  # BFCL's smallest source pool: the cheap one to re-render in every run
# What `trace synthesize` emits into generated_envs/ (docs/synthesis.md): target -> its declared capabilities.
EMITTED = {
    RETAIL: (
        "precondition-checking",
        "structured-reasoning",
        "multi-step-completion",
        "precise-arguments",
        "information-gathering",
        "error-recovery",
        "policy-adherence",
    ),
    BFCL: (
        "state-changing-calls",
        "information-retrieval",
        "missing-function-awareness",
        "missing-parameter-awareness",
    ),
}
# Derived envs `trace synthesize` rejects at 50 seeds (their reports go to the gitignored _rejected/), with the
# checks that fail. Exact both ways: a fix that makes one pass must emit it and drop it here.
KNOWN_FAILING: dict[str, set[str]] = {}


def committed_specs() -> dict[str, dict]:
    """env id -> spec of every derived env committed in generated_envs/."""
    specs = {}
    for spec_file in sorted(PACKAGE.glob("*/spec.json")):
        spec = json.loads(spec_file.read_text())
        specs[spec["id"]] = spec
    return specs


def directory(env_id: str) -> Path:
    return PACKAGE / package_of_id(env_id)


def _render_params():
    params = []
    for env_id, spec in committed_specs().items():
        slow = spec["target"] != BFCL  # a retail scan of 1,000 train seeds is ~10 s per capability
        params.append(pytest.param(env_id, id=env_id, marks=[pytest.mark.slow] if slow else []))
    return params


def test_the_package_holds_every_declared_capability_once():
    expected = {
        f"trace/{target.removeprefix('trace/').rsplit('-v', 1)[0]}-{capability}-v0": (target, capability)
        for target, capabilities in EMITTED.items()
        for capability in capabilities
        if capability not in KNOWN_FAILING
    }
    specs = committed_specs()
    assert sorted(specs) == sorted(expected)
    for env_id, spec in specs.items():
        assert (spec["target"], spec["capability"]) == expected[env_id]
        assert spec["generator"] == "derived" and spec["target_kwargs"] == {}
        assert sorted(p.name for p in directory(env_id).iterdir() if p.name != "__pycache__") == sorted(
            PACKAGE_FILES
        )


@pytest.mark.parametrize("env_id", _render_params())
def test_regenerating_reproduces_the_committed_files(env_id):
    """Everything but the validation report (the slow test below reruns that too)."""
    spec = committed_specs()[env_id]
    files = render_derived(
        spec["target"], spec["target_kwargs"], spec["capability"], existing_calibration(directory(env_id))
    )
    assert sorted(files) == sorted(set(PACKAGE_FILES) - {"validation.json"})
    for name, text in files.items():
        assert (directory(env_id) / name).read_text() == text, (
            f"{env_id}: {name} differs: run trace synthesize"
        )


@pytest.mark.slow
def test_full_synthesis_reproduces_the_committed_package_byte_for_byte(tmp_path):
    """One env per target through the whole path (render, sandboxed trace check at the committed seeds)."""
    out = tmp_path / "generated_envs"
    shutil.copytree(PACKAGE, out, ignore=shutil.ignore_patterns("__pycache__", "_rejected"))
    for target, capability in ((BFCL, FAST), (RETAIL, "precise-arguments")):
        [outcome] = synthesize([{"name": capability}], target, out, seeds=50)
        assert outcome.accepted, outcome.reason
        for name in PACKAGE_FILES:
            assert (out / outcome.package / name).read_text() == (
                directory(outcome.env_id) / name
            ).read_text(), (outcome.env_id, name)


def test_committed_validation_reports_are_honest_and_specs_match_the_schema():
    for env_id, spec in committed_specs().items():
        report = json.loads((directory(env_id) / "validation.json").read_text())
        assert report["env_id"] == env_id and report["seeds"] == 50
        failed = {check["name"] for check in report["checks"] if not check["passed"]}
        reviewed = REVIEWED_FAILURES.get(env_id, {})
        assert failed == set(reviewed), report["reason"]
        assert report["passed"] == (not failed) and report.get("reviewed_failures", {}) == reviewed
        assert len(report["checks"]) >= 22 and report["refused"] == []
        validate_spec(spec)
        assert spec["difficulty"]["levels"].keys() == {str(level) for level in LEVELS}
        assert spec["sources"]["train"] > spec["sources"]["test"] > 0
        assert spec["shaped_reward_key"] == "milestones"


@pytest.mark.parametrize(
    ("capability", "failing", "accepted"),
    [
        ("information-retrieval", {"adversarial/status_talker"}, True),  # exactly the reviewed failure
        ("information-retrieval", {"adversarial/status_talker", "oracle"}, False),  # and another one
        ("missing-function-awareness", {"adversarial/status_talker"}, False),  # reviewed for another id only
    ],
)
def test_a_reviewed_failure_is_accepted_only_where_and_as_reviewed(
    tmp_path, monkeypatch, capability, failing, accepted
):
    from trace_gym.synthesis.sandbox import SandboxResult

    checks = [
        {"name": n, "passed": n not in failing} for n in ("oracle", "adversarial/status_talker", "fuzz")
    ]
    verdict = SandboxResult(False, "; ".join(sorted(failing)), checks)
    monkeypatch.setattr(emit, "validate_module", lambda *args, **kwargs: verdict)
    files = {"env.py": "", "spec.json": emit.dump_json({"difficulty": {"default": 1}})}
    monkeypatch.setattr(emit, "render_derived", lambda *args: dict(files))  # the verdict is what is tested
    package = new_plugin_package(tmp_path, "reviewed_envs")
    [outcome] = synthesize([{"name": capability}], BFCL, package)
    assert outcome.accepted == accepted, outcome.reason
    if accepted:
        report = json.loads((outcome.path / "validation.json").read_text())
        assert report["passed"] is False and report["reviewed_failures"] == REVIEWED_FAILURES[outcome.env_id]
    else:
        assert (package / "_rejected" / f"{outcome.package}.json").exists()
        assert not (package / outcome.package).exists()


def test_a_bad_spec_is_named():
    spec = json.loads((directory(f"trace/bfcl-multi-turn-{FAST}-v0") / "spec.json").read_text())
    spec["id"] = FAST
    with pytest.raises(SynthesisError, match="at id"):
        validate_spec(spec)
    del spec["sources"]
    spec["id"] = f"trace/bfcl-multi-turn-{FAST}-v0"
    with pytest.raises(SynthesisError, match="'sources' is a required property"):
        validate_spec(spec)


def test_each_id_has_one_registration_the_emitted_package():
    """The derived ids come from generated_envs/ only, with the spec's kwargs (no built-in registration)."""
    from trace_gym.derived import registration

    assert not hasattr(registration, "TARGETS")
    for env_id, spec in committed_specs().items():
        registered = gym.spec(env_id)
        assert registered.entry_point == f"generated_envs.{package_of_id(env_id)}.env:{spec['class_name']}"
        assert registered.kwargs == {
            "target_id": spec["target"],
            "capability": spec["capability"],
            "target_kwargs": spec["target_kwargs"],
            "difficulty": spec["difficulty"]["default"],
        }


def test_a_fresh_interpreter_makes_every_emitted_env():
    ids = sorted(committed_specs())
    code = (
        "import gymnasium as gym, json, sys\n"
        "out = {}\n"
        "for env_id in json.loads(sys.argv[1]):\n"
        "    env = gym.make('trace_gym:' + env_id)\n"
        "    u = env.unwrapped\n"
        "    out[env_id] = [type(u).__module__, type(u).__mro__[1].__name__, u.target_id, u.capability]\n"
        f"env = gym.make('trace_gym:trace/bfcl-multi-turn-{FAST}-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "out['reset'] = [info['source']['target'], info['capability'], info['difficulty']]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(ids)], capture_output=True, text=True, cwd="/"
    )
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made.pop("reset") == [BFCL, FAST, 1]
    assert sorted(made) == ids
    for env_id, (module, base, target, capability) in made.items():
        spec = committed_specs()[env_id]
        assert module == f"generated_envs.{package_of_id(env_id)}.env" and base == "DerivedCapabilityEnv"
        assert (target, capability) == (spec["target"], spec["capability"])


def test_selection_input_is_validated(tmp_path):
    with pytest.raises(SynthesisError, match="does not exist"):
        load_capabilities(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SynthesisError, match="is not JSON"):
        load_capabilities(bad)
    bad.write_text(json.dumps({"schema_version": 1, "selected": ["x"]}))
    with pytest.raises(SynthesisError, match="required property"):
        load_capabilities(bad)
    bad.write_text(json.dumps([{"description": "no name"}]))
    with pytest.raises(SynthesisError, match="string 'name'"):
        load_capabilities(bad)


def test_a_capability_the_target_does_not_declare_needs_a_model(tmp_path):
    package = new_plugin_package(tmp_path, "more_envs")
    [outcome] = synthesize([{"name": "haggling"}], BFCL, package, validate=False)
    assert not outcome.accepted and outcome.generator == "none"
    assert "declares no capability 'haggling'" in outcome.reason and "no --model" in outcome.reason
    assert outcome.env_id == "trace/haggling-v0" and not (package / "haggling").exists()


def test_a_target_without_the_protocol_is_no_source(tmp_path):
    from tests.synthesis.modules import CLASS

    # the generation agent's example env: a valid trace env without task_capabilities()/decision_points()
    register_env("trace/test-emit-no-protocol-v0", entry_point=f"trace_gym.synthesis.example_env:{CLASS}")
    try:
        package = new_plugin_package(tmp_path, "more_envs")
        [outcome] = synthesize([{"name": "precise-arguments"}], "trace/test-emit-no-protocol-v0", package)
        assert not outcome.accepted
        assert "does not implement the capability-env protocol" in outcome.reason
        assert "task_capabilities, decision_points" in outcome.reason
    finally:
        del gym.registry["trace/test-emit-no-protocol-v0"]


def test_target_kwargs_reach_the_spec_the_class_and_the_registration(tmp_path):
    package = new_plugin_package(tmp_path, "kwargs_envs")
    kwargs = {"categories": ["miss_func"]}
    [outcome] = synthesize([{"name": FAST}], BFCL, package, validate=False, target_kwargs=kwargs)
    assert outcome.accepted and outcome.package == f"bfcl_multi_turn_{FAST.replace('-', '_')}"
    spec = json.loads((outcome.path / "spec.json").read_text())
    assert spec["target_kwargs"] == kwargs
    env_py = (outcome.path / "env.py").read_text()
    assert "TARGET_KWARGS: dict[str, Any] = {'categories': ['miss_func']}" in env_py
    assert "made with the keyword arguments ``{'categories': ['miss_func']}``" in env_py
    # the thin class alone (what the sandbox builds) is the target made with those kwargs
    namespace: dict = {}
    exec(compile(env_py, "env.py", "exec"), namespace)  # noqa: S102 - our own rendered module
    env = namespace[spec["class_name"]]()
    assert env.target.categories == ("miss_func",) and env.capability == FAST
    env.reset(seed=0)
    assert env.source_info()["task_id"].startswith("multi_turn_miss_func_")


def test_synthesis_keeps_a_calibration_already_in_the_spec(tmp_path):
    package = new_plugin_package(tmp_path, "calibrated_envs")
    [outcome] = synthesize([{"name": FAST}], BFCL, package, validate=False)
    spec_file = outcome.path / "spec.json"
    spec = json.loads(spec_file.read_text())
    assert spec["difficulty"]["default"] == 1 and spec["calibration"] is None
    spec["calibration"] = {"model": "m", "level": 2, "groups": 4, "seeds": 8, "levels": [], "bands": {}}
    spec["difficulty"]["default"] = 2
    spec_file.write_text(json.dumps(spec))
    synthesize([{"name": FAST}], BFCL, package, validate=False)
    again = json.loads(spec_file.read_text())
    assert again["calibration"]["level"] == 2 and again["difficulty"]["default"] == 2
    assert "## Example episode (train seed 0, difficulty 2)" in (outcome.path / "CARD.md").read_text()


def test_the_card_shows_the_source_and_a_continuation_that_scores_one():
    card = (directory(f"trace/bfcl-multi-turn-{FAST}-v0") / "CARD.md").read_text()
    assert "The target oracle's continuation scores reward 1.0, milestones 1.0." in card
    assert "task `multi_turn_miss_func_" in card and "the target's test split is never read" in card
    for env_id in committed_specs():
        text = (directory(env_id) / "CARD.md").read_text()
        assert "scores reward 1.0, milestones 1.0" in text, env_id


@pytest.mark.slow
def test_a_new_plugin_package_installs_and_registers_by_entry_point(tmp_path):
    from tests.synthesis.modules import CLASS, GOOD
    from trace_gym.synthesis.emit import GeneratedModule

    project = tmp_path / "project"
    package = new_plugin_package(project, "shop_envs")
    records = [{"name": "order-status-lookup", "description": "tell an order's status"}]

    def fixed(record, target, class_name):
        return GeneratedModule(GOOD.replace(CLASS, class_name))

    [outcome] = synthesize(records, RETAIL, package, seeds=6, generator=fixed)
    assert outcome.accepted, outcome.reason
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(site), str(project)], check=True, capture_output=True)
    code = (
        "import gymnasium as gym\n"
        "env = gym.make('trace_gym:trace/order-status-lookup-v0')\n"
        "print(type(env.unwrapped).__module__)\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "shop_envs.order_status_lookup.env"
