"""The validation suite passes on a sound env and fails, with a figure, on envs that break the contract."""

import random
import re

import gymnasium as gym
import pytest

from tests.toy_library import LibraryEnv
from trace_gym.core.env import Evaluation
from trace_gym.core.validation import ValidationConfig, validate_env
from trace_gym.registration import register_env, trace_env_ids

SMALL = ValidationConfig(
    seeds=20, degenerate_seeds=10, fuzz_seeds=3, fuzz_actions_per_seed=20, determinism_seeds=3
)


class GlobalRandomEnv(LibraryEnv):
    """Draws part of the instance from the global ``random``: not reproducible."""

    def _new_episode(self, rng, difficulty):
        episode = super()._new_episode(rng, difficulty)
        episode.instance["noise"] = random.random()
        return episode


class LenientEnv(LibraryEnv):
    """Rewards anything: degenerate policies pass."""

    def _evaluate(self):
        return Evaluation(1.0, {"anything": 1.0})


class WrongOracleEnv(LibraryEnv):
    def oracle_actions(self):
        return super().oracle_actions()[:-1]


class FewInstancesEnv(LibraryEnv):
    def _new_episode(self, rng, difficulty):
        import numpy as np

        return super()._new_episode(np.random.default_rng(int(rng.integers(3))), difficulty)


class RaisingEnv(LibraryEnv):
    def step(self, action):
        if isinstance(action, str) and action.startswith("<tool_call>"):
            raise KeyError("boom")
        return super().step(action)


for cls in (GlobalRandomEnv, LenientEnv, WrongOracleEnv, FewInstancesEnv, RaisingEnv):
    register_env(f"trace/broken-{cls.__name__.lower()}-v0", entry_point=f"{__name__}:{cls.__name__}")


def by_name(results):
    return {r.name: r for r in results}


def test_suite_passes_on_the_library_env():
    results = validate_env("trace/test-library-v0", SMALL)
    assert all(r.passed for r in results), [(r.name, r.figure, r.detail) for r in results if not r.passed]
    assert by_name(results)["unique_instances"].figure == "100.0% unique over 20 seeds"


@pytest.mark.parametrize(
    ("cls", "failing"),
    [
        (GlobalRandomEnv, {"determinism"}),
        (
            LenientEnv,
            {"degenerate/empty_reply", "degenerate/immediate_answer", "degenerate/random_valid_calls"},
        ),
        (WrongOracleEnv, {"oracle"}),
        (FewInstancesEnv, {"unique_instances"}),
        (RaisingEnv, {"fuzz"}),
    ],
)
def test_suite_catches_broken_envs(cls, failing):
    results = by_name(validate_env(f"trace/broken-{cls.__name__.lower()}-v0", SMALL))
    failed = {name for name, r in results.items() if not r.passed}
    assert failing <= failed, {n: r.figure for n, r in results.items()}


# Holes the adversarial section (at 50 seeds) finds in envs of other parts; strict xfail, so a fix shows as
# XPASS and the entry goes.
KNOWN_HOLES = {
    # not a hole: at level 1 the env starts at the decision, and where the rest of the task is one read call
    # in the last turn the probe's "opening read call" is the capability itself (docs/derived.md)
    "trace/bfcl-multi-turn-information-retrieval-v0": "status talker replays the one read that is the task",
    # the same: the continuation is the question for the missing value, then one read (trace_gym/synthesis/emit.py)
    "trace/bfcl-multi-turn-missing-parameter-awareness-v0": "status talker replays the ask and the one read",
}
# Envs derived from retail-v2 (generated_envs/, replacing the catalog envs) scan 1,000 retail train seeds per
# process and play long conversations: ~2 min each on a loaded 2-core machine, so they run with -m slow (their
# 50-seed sandboxed report is generated_envs/<name>/validation.json).
SLOW_TARGETS = ("trace/retail-v2",)


def _marks(env_id: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.xfail(reason=KNOWN_HOLES[env_id], strict=True)] if env_id in KNOWN_HOLES else []
    if gym.spec(env_id).kwargs.get("target_id") in SLOW_TARGETS:
        marks.append(pytest.mark.slow)
    return marks


REGISTERED = [
    pytest.param(e, marks=_marks(e), id=e) for e in trace_env_ids() if not e.startswith("trace/broken-")
]
TINY = ValidationConfig(
    seeds=10,
    degenerate_seeds=5,
    fuzz_seeds=2,
    fuzz_actions_per_seed=15,
    determinism_seeds=2,
    adversarial_seeds=50,  # the adversarial section at its default: at 10 seeds chance hits hide holes
)


@pytest.mark.parametrize("env_id", REGISTERED)
def test_suite_passes_on_every_registered_env(env_id):
    results = validate_env(env_id, TINY)
    assert all(r.passed for r in results), [
        (r.name, r.figure, r.detail[:500]) for r in results if not r.passed
    ]


# ---- each new probe fails retail with the hole it names planted ------------------------------------------------
PROBES = ValidationConfig(seeds=20, adversarial_seeds=20)


def _adversarial(env_id: str = "trace/retail-v2"):
    from trace_gym.core.validation import _check_adversarial

    return by_name(_check_adversarial(env_id, {}, PROBES))


def test_retail_passes_every_probe():
    assert all(r.passed for r in _adversarial().values()), _adversarial()


def test_hedging_probes_catch_a_verifier_that_counts_any_right_figure(monkeypatch):
    from trace_gym.targets.retail import facts, user, verifier

    def lenient(need, messages):
        return any(facts._right(need, {v}) for text in messages for v in facts.answer(need, text))

    monkeypatch.setattr(user, "told", lenient)
    monkeypatch.setattr(verifier, "told", lenient)
    # and a user that waits for the right figure before it moves on (so a correction lands in time)
    monkeypatch.setattr(user.UserRecords, "needs_stated", user.UserRecords.needs_told)
    failed = {n for n, r in _adversarial().items() if not r.passed}
    assert {"adversarial/hedged_answer", "adversarial/hedged_across_messages"} <= failed


def test_negated_confirmation_probe_catches_a_user_that_reads_no_negation(monkeypatch):
    from trace_gym.targets.retail import user

    monkeypatch.setattr(user, "affirmed", lambda pattern, text: re.search(pattern, text, re.I) is not None)
    monkeypatch.setattr(user, "_negated_action", lambda order_id, message: False)
    assert not _adversarial()["adversarial/negated_confirmation"].passed


def test_statement_probe_catches_a_user_that_answers_keywords(monkeypatch):
    from trace_gym.targets.retail import reading

    monkeypatch.setattr(reading, "is_request", lambda sentence: True)
    assert not _adversarial()["adversarial/statement_asks_nothing"].passed


def test_refused_write_probe_catches_a_verifier_that_checks_only_successful_writes(monkeypatch):
    from trace_gym.targets.retail import verifier

    original = verifier.violation_events  # what the reward (verifier.assess) and violations() read
    monkeypatch.setattr(
        verifier,
        "violation_events",
        lambda task, calls, user: original(task, [c for c in calls if c.error is None], user),
    )
    assert not _adversarial()["adversarial/refused_write"].passed


def test_position_probe_catches_a_generator_that_lists_the_target_first(monkeypatch):
    from trace_gym.targets.retail import env as retail_env

    original = retail_env.generate_task

    def first(rng, difficulty):
        task = original(rng, difficulty)
        for state in (task.initial_state, task.expected_state):
            orders = state["users"][task.user_id]["orders"]
            if task.requests[0].order_id in orders:
                orders.remove(task.requests[0].order_id)
                orders.insert(0, task.requests[0].order_id)
        return task

    monkeypatch.setattr(retail_env, "generate_task", first)
    assert not _adversarial()["adversarial/position_shortcut"].passed


def test_other_seed_threshold_is_chance_adjusted():
    """In a tiny answer space another seed's answer is right by chance; the allowance follows that chance."""
    from trace_gym.core.validation import OtherSeedOracle, _chance

    same = OtherSeedOracle.__new__(OtherSeedOracle)
    same.oracle, same.other = [{"content": "<answer>yes</answer>"}], [{"content": "<answer>yes</answer>"}]
    assert _chance(same) == 1.0
    same.other = [{"content": "<answer>no</answer>"}]
    assert _chance(same) == 0.0


def test_first_message_overlap_is_reported_beside_split_overlap():
    results = by_name(validate_env("trace/retail-v2", ValidationConfig(seeds=10, adversarial_seeds=2)))
    overlap = results["first_message_overlap"]
    assert overlap.passed and "test episodes" in overlap.figure and "split_overlap" in results


def test_hedging_probe_catches_reasoning_gym_partial_credit(monkeypatch):
    """reasoning-gym's own score_answer gives partial credit to "-140 -139" (issue 31): the probe catches it."""
    pytest.importorskip("reasoning_gym")
    from trace_gym.adapters import reasoning_gym as rg

    env_id = next(e for e in trace_env_ids() if e.startswith("trace/rg-arith2-"))
    assert _adversarial(env_id)["adversarial/hedged_answer"].passed
    monkeypatch.setattr(
        rg.ReasoningGymEnv,
        "_exact",
        lambda self, answer: float(self.dataset.score_answer(answer, self.entry)),
    )
    assert not _adversarial(env_id)["adversarial/hedged_answer"].passed
