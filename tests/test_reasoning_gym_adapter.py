"""reasoning-gym datasets as single-turn Gymnasium envs: the env contract, splits, oracle, bad actions."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_gym.core.splits import split_of_key, split_overlap

pytest.importorskip("reasoning_gym")

from trace_gym.adapters import reasoning_gym as rg  # noqa: E402
from trace_gym.adapters.reasoning_gym import (  # noqa: E402
    CURATED_DATASETS,
    ReasoningGymEnv,
    extract_answer,
    make_reasoning_gym_env,
    register_reasoning_gym_envs,
)

IDS = [f"trace/rg-{name}-v1" for name in CURATED_DATASETS]


@pytest.fixture(autouse=True, scope="module")
def registered():
    """Register for this module only: other tests list the registry and must not see these ids early."""
    before = set(gym.registry)
    yield register_reasoning_gym_envs()
    for env_id in set(gym.registry) - before:
        del gym.registry[env_id]


def question(env: gym.Env, seed: int, **options) -> str:
    obs, _ = env.reset(seed=seed, options=options or None)
    return obs[-1]["content"]


def test_registers_curated_ids():
    assert [f"trace/rg-{name}-v1" for name in CURATED_DATASETS] == IDS
    assert "trace/rg-basic_arithmetic-v1" in gym.registry and "trace/rg-leg_counting-v1" in gym.registry
    assert register_reasoning_gym_envs(["gcd"]) == ["trace/rg-gcd-v1"]  # again: no duplicate warning


def test_registers_nothing_without_reasoning_gym(monkeypatch):
    monkeypatch.setattr(rg.importlib.util, "find_spec", lambda name: None)
    assert register_reasoning_gym_envs(["chain_sum"]) == []


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_clean_and_oracle_scores_one(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
        for seed in range(4):
            obs, info = env.reset(seed=seed)
            assert info["tools"] == [] and obs[0]["role"] == "system" and obs[1]["role"] == "user"
            _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
            assert (reward, terminated, truncated) == (1.0, True, False)
            assert info["invalid_action"] is None and info["reward_components"] == {"score": 1.0}
            env.reset(seed=seed)
            _, reward, terminated, _, _ = env.step("<answer>§</answer>")  # shares nothing with any answer
            assert reward == 0.0 and terminated


def test_determinism_same_seed_same_instance():
    env_a, env_b = gym.make("trace/rg-leg_counting-v1"), gym.make("trace/rg-leg_counting-v1")
    for seed in (0, 7, 123):
        obs_a, info_a = env_a.reset(seed=seed)
        obs_b, info_b = env_b.reset(seed=seed)
        assert obs_a == obs_b and info_a == info_b
        assert env_a.unwrapped.render_instance() == env_b.unwrapped.render_instance()
    questions = {question(env_a, seed) for seed in range(20)}
    assert len(questions) >= 18  # different seeds, different instances


def test_splits_are_disjoint_and_consistent():
    env = gym.make("trace/rg-leg_counting-v1")  # a problem space large enough not to repeat by chance
    train = {question(env, seed, split="train") for seed in range(40)}
    _, info = env.reset(seed=0, options={"split": "train"})
    assert info["split"] == "train" and split_of_key(env.unwrapped.task_key()) == "train"
    test = {question(env, seed, split="test") for seed in range(40)}
    _, info = env.reset(seed=0, options={"split": "test"})
    assert info["split"] == "test" and split_of_key(env.unwrapped.task_key()) == "test"
    assert not train & test
    # a raw seed in the test range is the same instance as the split's seed (as for every trace env)
    assert question(env, 1_000_005) == question(env, 5, split="test")
    assert question(env, 5) == question(env, 5, split="train")
    with pytest.raises(ValueError, match="outside split"):
        env.reset(seed=10**7, options={"split": "test"})
    with pytest.raises(ValueError, match="unknown split"):
        env.reset(seed=0, options={"split": "valid"})


def _keys(env, split: str, n: int) -> list[str]:
    keys = []
    for seed in range(n):
        env.reset(seed=seed, options={"split": split})
        keys.append(env.unwrapped.task_key())
    return keys


@pytest.mark.parametrize("name", ["arith1", "arith2", "lcm", "chain_sum", "gcd", "basic_arithmetic"])
def test_content_split_no_test_task_in_train(name):
    """Defect 1: seed-disjoint splits repeated test questions in train (rg-arith1: 151 of 200 test instances
    against train seeds 0..2999, rg-lcm 67, chain_sum 9, ...). Now no test task key occurs in train."""
    env = gym.make(f"trace/rg-{name}-v1")
    overlap = split_overlap(_keys(env, "train", 3000), _keys(env, "test", 200))
    assert overlap.overlapping_instances == 0, overlap.figure
    assert overlap.test_keys >= 100  # arith1 is the smallest family: about 146 distinct of 200 test seeds


def test_task_key_ignores_wording_and_order():
    env = gym.make("trace/rg-lcm-v1").unwrapped
    env.reset(seed=0)
    a, b = env.entry["metadata"]["numbers"][:2]
    swapped = {**env.entry, "question": "reworded", "metadata": {**env.entry["metadata"], "numbers": [b, a]}}
    assert env._key(swapped) == env.task_key()
    # the raw-seed (no split option) path respects the content split as well
    for seed in range(30):
        env.reset(seed=seed)
        assert split_of_key(env.task_key()) == "train"
        env.reset(seed=1_000_000 + seed)
        assert split_of_key(env.task_key()) == "test"


def test_hint_and_base_system_prompt():
    env = gym.make("trace/rg-chain_sum-v1")
    plain, info = env.reset(seed=1)
    hinted, hinted_info = env.reset(seed=1, options={"hint": True})
    assert hinted[0]["content"].startswith(plain[0]["content"]) and "Expert advice" in hinted[0]["content"]
    assert hinted_info["base_system_prompt"] == info["base_system_prompt"] == plain[0]["content"]
    assert hinted[1] == plain[1]
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(seed=1, options={"difficulty": 2})


def test_answer_extraction():
    assert extract_answer("so <answer>1</answer> no wait <answer> 2 </answer>") == "2"
    assert extract_answer("<think>maybe 3</think>\n 4 ") == "4"
    assert extract_answer("reasoning... <answer>17") == "17"  # cut off before the closing tag
    assert extract_answer("  plain  ") == "plain"


def test_answer_forms_graded():
    env = gym.make("trace/rg-basic_arithmetic-v1")
    env.reset(seed=3)
    answer = env.unwrapped.entry["answer"]
    for action in (answer, f"<think>x</think>{answer}", {"content": f"Result: <answer>{answer}</answer>"}):
        env.reset(seed=3)
        assert env.step(action)[1] == 1.0


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        (None, "parse"),
        (123, "parse"),
        ([1, 2], "parse"),
        ({"content": 5}, "parse"),
        ({"content": None}, None),
        ({"content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}, "unknown_tool"),
        ("", None),
    ],
)
def test_bad_actions_do_not_raise(action, kind):
    env = gym.make("trace/rg-gcd-v1").unwrapped  # past the passive checker, which rejects some on purpose
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert reward == 0.0 and terminated and info["invalid_action"] == kind


def test_tool_calls_ignored_but_content_graded():
    env = gym.make("trace/rg-lcm-v1").unwrapped
    env.reset(seed=2)
    call = {"function": {"name": "calculator", "arguments": "{}"}}
    _, reward, _, _, info = env.step({"content": env.oracle_actions()[0]["content"], "tool_calls": [call]})
    assert reward == 1.0 and info["invalid_action"] == "unknown_tool"


def test_raising_scorer_scores_zero():
    env = make_reasoning_gym_env("prime_factorization").unwrapped  # its scorer raises on non-numbers
    env.reset(seed=0)
    assert env.step("<answer>not a number</answer>")[1] == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.text(), st.binary(), st.integers(), st.dictionaries(st.text(max_size=5), st.text(max_size=5))
    )
)
def test_fuzzed_actions_never_raise(action):
    env = ReasoningGymEnv("chain_sum")
    env.reset(seed=0)
    _, reward, terminated, truncated, _ = env.step(action)
    assert 0.0 <= reward <= 1.0 and terminated and not truncated


def test_make_with_dataset_config_and_errors():
    env = make_reasoning_gym_env("basic_arithmetic", min_terms=2, max_terms=2, min_digits=1, max_digits=1)
    q = question(env, 0)
    assert sum(ch.isdigit() for ch in q) == 2
    assert env.spec.id == "trace/rg-basic_arithmetic-v1"
    with pytest.raises(ValueError, match="no_such_dataset"):
        make_reasoning_gym_env("no_such_dataset")
    with pytest.raises(ValueError, match="cannot build"):
        make_reasoning_gym_env("basic_arithmetic", not_an_option=1)
    with pytest.raises(ValueError, match="per episode"):
        make_reasoning_gym_env("basic_arithmetic", seed=1)


def test_step_protocol_and_render():
    env = make_reasoning_gym_env("count_bits", render_mode="ansi")
    env.reset(seed=0)
    env.step("<answer>1</answer>")
    assert "[assistant] <answer>1</answer>" in env.render()
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step("again")


def test_importing_the_adapter_does_not_import_reasoning_gym():
    code = "import sys, trace_gym.adapters; assert 'reasoning_gym' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_trace_validation_suite_passes(monkeypatch):
    from trace_gym.core import validation

    # The suite's _make insists on ChatToolEnv; the adapter duck-types it (tools, domain_tools, world).
    monkeypatch.setattr(validation, "_make", lambda env_id, kwargs: gym.make(env_id, **kwargs).unwrapped)
    config = validation.ValidationConfig(seeds=30, min_unique_share=0.95, degenerate_seeds=10, fuzz_seeds=3)
    results = validation.validate_env("trace/rg-leg_counting-v1", config)
    assert all(r.passed for r in results), [
        (r.name, r.figure, r.detail[:200]) for r in results if not r.passed
    ]
