"""Format conformity (issue 26): ``trace check`` compares a capability env that declares a target with that target
on the same source task: system prompt, tool schemas, user simulator, observation after reset. Each planted
change (one character of the prompt, a dropped tool, a changed schema, another user class or setting) fails the
aspect it touches with a reason naming what differs; an env without a declared target is skipped, not passed."""

from __future__ import annotations

import argparse
import copy

import gymnasium as gym
import pytest

from tests.toy_library import LibraryEnv
from trace_gym.core.conformity import ConformityError, prompt_difference, tools_difference
from trace_gym.core.validation import ValidationConfig, check_format_conformity
from trace_gym.derived.env import DerivedCapabilityEnv
from trace_gym.worlds import ScriptedUser

TOY = "trace/test-conformity-source-library-v0"
CAPABILITY = "precondition-checking"
CONFIG = ValidationConfig(seeds=6)


class ProtocolLibraryEnv(LibraryEnv):
    """The toy library as a source target (get_book is oracle action 3)."""

    def task_capabilities(self) -> tuple[str, ...]:
        return (CAPABILITY,)

    def decision_points(self) -> dict[str, list[int]]:
        return {CAPABILITY: [3]}


class EditedPrompt(DerivedCapabilityEnv):
    """One character of the system prompt dropped."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        obs[0] = {**obs[0], "content": obs[0]["content"].replace("assistant", "asistant", 1)}
        return obs, info


class DroppedTool(DerivedCapabilityEnv):
    @property
    def tools(self):
        return [t for t in self.target.tools if t["function"]["name"] != "find_member"]


class ChangedSchema(DerivedCapabilityEnv):
    @property
    def tools(self):
        tools = copy.deepcopy(self.target.tools)
        properties = next(t for t in tools if t["function"]["name"] == "checkout")["function"]["parameters"]
        properties["properties"]["book_id"]["type"] = "integer"
        return tools


class PoliteUser(ScriptedUser):
    """Another user class (same behaviour and settings)."""


class OtherUserClass(DerivedCapabilityEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        user = self.target.episode.user
        polite = PoliteUser.__new__(PoliteUser)
        polite.__dict__.update(user.__dict__)
        self.target.episode.user = polite
        return obs, info


class MorePatientUser(DerivedCapabilityEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.target.episode.user.patience += 1
        return obs, info


class PerInstanceField(DerivedCapabilityEnv):
    """Identifies the member by phone instead of email in its prompt; declares that word a per-instance field."""

    per_instance_fields = {"identification": r"(?<=Identify the member by )\w+"}

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        obs[0] = {**obs[0], "content": obs[0]["content"].replace("by email", "by phone")}
        return obs, info


class UndeclaredField(PerInstanceField):
    per_instance_fields = {}


class NoSource(LibraryEnv):
    """Declares a target but never says which target task an instance comes from."""

    target_id = TOY


PLANTS = {
    "edited_prompt": (
        EditedPrompt,
        "system_prompt",
        "line 1, column 21 differs: env 'You are a library asistant.",
    ),
    "dropped_tool": (DroppedTool, "tools", "lacks the target's tool 'find_member'"),
    "changed_schema": (
        ChangedSchema,
        "tools",
        "the schema of 'checkout' differs at /function/parameters/properties/book_id/type",
    ),
    "other_user_class": (
        OtherUserClass,
        "user_simulator",
        "test_conformity.PoliteUser, the target's trace_gym.worlds.user.ScriptedUser",
    ),
    "more_patient_user": (MorePatientUser, "user_simulator", "config differs at /patience"),
    "undeclared_field": (
        UndeclaredField,
        "system_prompt",
        "line 1, column 53 differs: env 'stant. Identify the member by phone",
    ),
}


@pytest.fixture(scope="module")
def ids():
    """Test-local ids: the toy target, its derived env, and each plant (removed afterwards: other tests list the
    registry)."""
    before = set(gym.registry)
    gym.register(id=TOY, entry_point=f"{__name__}:ProtocolLibraryEnv")
    kwargs = {"target_id": TOY, "capability": CAPABILITY, "window": 40}
    out = {"good": "trace/test-conformity-good-v0", "per_instance": "trace/test-conformity-per-instance-v0"}
    gym.register(id=out["good"], entry_point=DerivedCapabilityEnv, kwargs=kwargs)
    gym.register(id=out["per_instance"], entry_point=PerInstanceField, kwargs=kwargs)
    for name, (cls, _, _) in PLANTS.items():
        out[name] = f"trace/test-conformity-{name.replace('_', '-')}-v0"
        gym.register(id=out[name], entry_point=cls, kwargs=kwargs)
    out["no_source"] = "trace/test-conformity-no-source-v0"
    gym.register(id=out["no_source"], entry_point=NoSource)
    yield out
    for name in set(gym.registry) - before:
        del gym.registry[name]


def by_name(results):
    return {r.name: r for r in results}


def test_a_derived_env_conforms_on_every_aspect(ids):
    results = by_name(check_format_conformity(ids["good"], {}, CONFIG))
    assert set(results) == {
        f"conformity/{a}" for a in ("system_prompt", "tools", "user_simulator", "observation")
    }
    for result in results.values():
        assert result.passed and not result.skipped, result
        assert "on 6/6 seeds" in result.figure and TOY in result.figure
    assert "(4 tools)" in results["conformity/tools"].figure
    assert "(ScriptedUser)" in results["conformity/user_simulator"].figure


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_each_planted_change_fails_with_the_reason(ids, plant):
    _, aspect, reason = PLANTS[plant]
    results = by_name(check_format_conformity(ids[plant], {}, CONFIG))
    failed = {name for name, r in results.items() if not r.passed}
    assert f"conformity/{aspect}" in failed, results
    assert results[f"conformity/{aspect}"].figure.endswith("on 0/6 seeds" + _suffix(aspect, results))
    assert reason in results[f"conformity/{aspect}"].detail, results[f"conformity/{aspect}"].detail
    assert results[f"conformity/{aspect}"].detail.startswith("seed 0: ")


def _suffix(aspect, results):
    figure = results[f"conformity/{aspect}"].figure
    return figure[figure.index("seeds") + len("seeds") :]


def test_a_prompt_change_also_shows_in_the_observation_a_tool_change_does_not(ids):
    edited = by_name(check_format_conformity(ids["edited_prompt"], {}, CONFIG))
    assert not edited["conformity/observation"].passed
    assert "message 0 (system) differs at /content" in edited["conformity/observation"].detail
    dropped = by_name(check_format_conformity(ids["dropped_tool"], {}, CONFIG))
    assert dropped["conformity/observation"].passed and dropped["conformity/system_prompt"].passed


def test_declared_per_instance_fields_may_differ(ids):
    results = by_name(check_format_conformity(ids["per_instance"], {}, CONFIG))
    assert all(r.passed for r in results.values()), results


def test_an_env_without_a_target_is_skipped_not_passed():
    [result] = check_format_conformity("trace/test-library-v0", {}, CONFIG)
    assert result.name == "conformity" and result.skipped and result.figure.startswith("skipped")


def test_a_declared_target_without_a_source_task_is_refused(ids):
    with pytest.raises(ConformityError, match="names no source target task"):
        check_format_conformity(ids["no_source"], {}, CONFIG)


def test_reasons_name_the_first_difference():
    assert prompt_difference("a\nb\nc", "a\nb\nc", {}) is None
    assert prompt_difference("a\nB\nc", "a\nb\nc", {}) == "line 2, column 1 differs: env 'B', target 'b'"
    assert (
        prompt_difference("a\nb", "a\nb\nc", {}) == "line 3 only in the target's prompt: 'c' (2 lines vs 3)"
    )
    tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "object", "properties": {}}}}
    other = {
        "type": "function",
        "function": {"name": "u", "parameters": {"type": "object", "properties": {}}},
    }
    assert tools_difference([tool, other], [tool, other]) is None
    assert "order differs at position 0" in tools_difference([other, tool], [tool, other])
    assert "adds the tool 'u'" in tools_difference([tool, other], [tool])
    assert "listed twice" in tools_difference([tool, tool], [tool])


def test_trace_check_prints_skip_and_the_conformity_reason(ids, capsys):
    from trace_gym.commands import cmd_check

    def check(env_id):
        args = argparse.Namespace(
            env_id=env_id,
            seeds=6,
            split="train",
            min_unique=0.0,
            degenerate_seeds=6,
            degenerate_max=1.0,
            difficulty=None,
            json=None,
        )
        cmd_check(args)
        return " ".join(capsys.readouterr().out.split())  # rich wraps long lines

    out = check(ids["dropped_tool"])
    assert (
        "conformity/tools" in out
        and "the env lacks the target's tool 'find_member' (3 tools, the target 4)" in out
    )
    assert "1 check(s) failed: conformity/tools" in out
    out = check("trace/test-library-v0")
    assert "skip" in out and "checks passed or skipped" in out and "1 skipped: conformity" in out


@pytest.mark.parametrize(
    ("target", "capability"),
    [("trace/retail-v2", "precise-arguments"), ("trace/retail-v2", "policy-adherence")],
)
def test_retail_derived_envs_conform(target, capability):
    env_id = f"trace/test-conformity-{capability}-v0"
    gym.register(
        id=env_id,
        entry_point=DerivedCapabilityEnv,
        kwargs={"target_id": target, "capability": capability, "window": 40},
    )
    try:
        results = by_name(check_format_conformity(env_id, {}, ValidationConfig(seeds=5)))
    finally:
        del gym.registry[env_id]
    assert all(r.passed for r in results.values()), results
    assert "(14 tools)" in results["conformity/tools"].figure
    assert "(RetailUser)" in results["conformity/user_simulator"].figure
