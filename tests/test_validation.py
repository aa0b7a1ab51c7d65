"""The validation suite passes on a sound env and fails, with a figure, on envs that break the contract."""

import random

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


REGISTERED = [e for e in trace_env_ids() if not e.startswith("trace/broken-")]
TINY = ValidationConfig(
    seeds=10, degenerate_seeds=5, fuzz_seeds=2, fuzz_actions_per_seed=15, determinism_seeds=2
)


@pytest.mark.parametrize("env_id", REGISTERED)
def test_suite_passes_on_every_registered_env(env_id):
    results = validate_env(env_id, TINY)
    assert all(r.passed for r in results), [
        (r.name, r.figure, r.detail[:500]) for r in results if not r.passed
    ]
