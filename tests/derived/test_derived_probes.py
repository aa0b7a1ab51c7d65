"""The derived-env probes of ``trace check`` (issue 52): the oracle continuation without its last tool call,
and another source task's continuation. Each passes on a sound derived env, fails on one with the hole it
names planted, and is not played on an env that is not derived."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from tests.derived.test_generic_target import ProtocolLibraryEnv
from trace_gym.core.env import Evaluation
from trace_gym.core.validation import (
    ADVERSARIAL_PROBES,
    OracleWithoutLastCall,
    OtherSourceOracle,
    ValidationConfig,
    _check_adversarial,
    _other_source,
)
from trace_gym.derived import pool
from trace_gym.derived.registration import register_derived

CAPABILITY = "precondition-checking"
CONFIG = ValidationConfig(adversarial_seeds=12)
NEW = {f"adversarial/{p.name}" for p in (OracleWithoutLastCall, OtherSourceOracle)}


class RedundantReadLibrary(ProtocolLibraryEnv):
    """The oracle reads the book again after lending it: a last call the task does not need."""

    def oracle_actions(self):
        actions = super().oracle_actions()
        return [*actions[:-1], actions[3], actions[-1]]  # get_book once more before the goodbye


class AnyCheckoutLibrary(ProtocolLibraryEnv):
    """The verdict passes any checkout attempt followed by a stated figure: which book, for whom, and whether
    the tools refused it go unchecked, so another task's continuation passes (talk alone still fails)."""

    def _evaluate(self):
        tried = any(c.name == "checkout" for c in self.calls)
        stated = any(any(ch.isdigit() for ch in m) for m in self.agent_messages)
        return Evaluation(float(tried and stated), {"anything": float(tried and stated)})


TARGETS = {
    "sound": ProtocolLibraryEnv,
    "redundant": RedundantReadLibrary,
    "lenient": AnyCheckoutLibrary,
}


@pytest.fixture
def derived(monkeypatch, tmp_path):
    """One derived id per toy target; the scan's own foreign-continuation filter is off, so that the probe, not
    the pool, has to find what another task's continuation passes."""
    monkeypatch.setenv("TRACE_CACHE", str(tmp_path))
    monkeypatch.setattr(pool, "foreign_passes", lambda target, candidates: set())
    pool._cached.cache_clear()
    before = set(gym.registry)
    ids = {}
    for kind, cls in TARGETS.items():
        target = f"trace/test-probe-{kind}-library-v0"
        gym.register(id=target, entry_point=f"{__name__}:{cls.__name__}")
        (ids[kind],) = register_derived(target, [CAPABILITY])
    yield ids
    pool._cached.cache_clear()
    for name in set(gym.registry) - before:
        del gym.registry[name]


def results(env_id: str) -> dict[str, object]:
    return {r.name: r for r in _check_adversarial(env_id, {"window": 40}, CONFIG)}


def test_a_sound_derived_env_passes_both_probes_and_they_apply(derived):
    found = results(derived["sound"])
    for name in NEW:
        assert found[name].passed and "over 12 seeds" in found[name].figure, found[name]


def test_the_last_call_probe_catches_an_oracle_call_the_task_does_not_need(derived):
    found = results(derived["redundant"])
    assert not found["adversarial/oracle_without_last_call"].passed
    assert found["adversarial/other_source_oracle"].passed


def test_the_other_source_probe_catches_a_verdict_that_passes_another_tasks_continuation(derived):
    found = results(derived["lenient"])
    assert not found["adversarial/other_source_oracle"].passed
    assert found["adversarial/oracle_without_last_call"].passed  # no checkout at all still fails


def test_the_derived_probes_are_not_played_on_an_env_that_is_not_derived():
    names = {
        r.name for r in _check_adversarial("trace/test-library-v0", {}, ValidationConfig(adversarial_seeds=2))
    }
    assert not names & NEW and len(names) == len(ADVERSARIAL_PROBES) - len(NEW)


def call(name: str, **arguments: object) -> dict[str, object]:
    return {
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]
    }


class Stub:
    """A derived env reduced to what the other-source search reads: seed -> (source task, continuation)."""

    def __init__(self, tasks):
        self.tasks, self.seed = tasks, 0

    def reset(self, *, seed, options):
        self.seed = seed % len(self.tasks)
        return [], {}

    def source_info(self):
        return {"task_key": self.tasks[self.seed][0]}

    def oracle_actions(self):
        return list(self.tasks[self.seed][1])


def test_another_source_is_another_task_not_another_start_of_the_same_one():
    """The next seeds of a derived env may be the same task at another decision point: skipped, as is a task
    whose continuation is the same actions; the first other task of the same shape wins over an earlier one
    of another shape."""
    tasks = [
        ("A", [call("get_book", book_id="B1"), {"content": "ok"}]),
        ("A", [call("checkout", book_id="B1"), {"content": "ok"}]),  # the same task, another start
        ("B", [call("get_book", book_id="B1"), {"content": "ok"}]),  # another task, the same actions
        ("C", [{"content": "hello"}]),  # another task, another shape
        ("D", [call("get_book", book_id="B7"), {"content": "ok"}]),  # another task, the same shape
    ]
    config = ValidationConfig(split=None)
    assert _other_source(Stub(tasks), Stub(tasks), 0, config) == tasks[4][1]
    assert _other_source(Stub(tasks[:4]), Stub(tasks[:4]), 0, config) == tasks[3][1]  # else any other task
    assert _other_source(Stub(tasks[:3]), Stub(tasks[:3]), 0, config) == []  # none: the probe does not apply


def test_without_last_call_drops_only_the_last_call_of_a_step_of_several():
    oracle = [
        call("find_member", email="a@b.c"),
        {"content": "", "tool_calls": call("get_book", book_id="B1")["tool_calls"] * 2},
        {"content": "done"},
    ]
    probe = OracleWithoutLastCall(None, oracle, [])
    played = []
    for action in probe.actions(lambda: []):
        played.append(action)
        if len(played) == 4:
            break
    assert probe.applies
    assert played[:2] == [oracle[0], {"content": "", "tool_calls": oracle[1]["tool_calls"][:1]}]
    assert played[2:] == [{"content": "done"}, "Is there anything else I can help you with?"]
