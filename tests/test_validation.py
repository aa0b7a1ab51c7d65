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


# Holes the adversarial section finds in envs of other parts (reported in /work/notes/issue-7.md); strict
# xfail, so a fix shows as XPASS and the entry goes. trace/retail-v0 is superseded because of its holes.
KNOWN_HOLES = {
    "trace/retail-v0": "superseded by retail-v1: content-free confirmations, sprayed amounts and talk pass",
    "trace/rg-arith1-v1": "sprayed numbers get partial credit (mean 0.023 > 0.02)",
    "trace/rg-basic_arithmetic-v1": "another seed's answer gets partial credit (mean 0.05)",
    "trace/rg-chain_sum-v1": "sprayed numbers get partial credit (mean 0.023 > 0.02, success 0%)",
    "trace/rg-count_bits-v1": "another seed's answer is right 30% of the time (tiny answer space)",
    "trace/rg-gcd-v1": "another seed's answer is right 30% of the time; sprayed numbers get partial credit",
    "trace/rg-letter_counting-v1": "another seed's answer is right 20% of the time (tiny answer space)",
}
REGISTERED = [
    pytest.param(e, marks=pytest.mark.xfail(reason=KNOWN_HOLES[e], strict=True)) if e in KNOWN_HOLES else e
    for e in trace_env_ids()
    if not e.startswith("trace/broken-")
]
TINY = ValidationConfig(
    seeds=10,
    degenerate_seeds=5,
    fuzz_seeds=2,
    fuzz_actions_per_seed=15,
    determinism_seeds=2,
    adversarial_seeds=10,
)


@pytest.mark.parametrize("env_id", REGISTERED)
def test_suite_passes_on_every_registered_env(env_id):
    results = validate_env(env_id, TINY)
    assert all(r.passed for r in results), [
        (r.name, r.figure, r.detail[:500]) for r in results if not r.passed
    ]


def test_adversarial_section_catches_the_holes_of_retail_v0():
    config = ValidationConfig(seeds=10, adversarial_seeds=10)
    from trace_gym.core.validation import _check_adversarial

    v0 = by_name(_check_adversarial("trace/retail-v0", {}, config))
    failed = {name for name, r in v0.items() if not r.passed}
    assert {"adversarial/content_free_confirmation", "adversarial/amount_spraying"} <= failed
    v1 = by_name(_check_adversarial("trace/retail-v1", {}, config))
    assert all(r.passed and r.figure.startswith("mean reward 0.000") for r in v1.values()), v1
