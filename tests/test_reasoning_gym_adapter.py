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

from trace_gym.core.overlap import semantic_key
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

IDS = [f"trace/rg-{name}-v2" for name in CURATED_DATASETS]


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
    assert [f"trace/rg-{name}-v2" for name in CURATED_DATASETS] == IDS
    assert "trace/rg-basic_arithmetic-v2" in gym.registry and "trace/rg-leg_counting-v2" in gym.registry
    assert register_reasoning_gym_envs(["gcd"]) == ["trace/rg-gcd-v2"]  # again: no duplicate warning


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
    env_a, env_b = gym.make("trace/rg-leg_counting-v2"), gym.make("trace/rg-leg_counting-v2")
    for seed in (0, 7, 123):
        obs_a, info_a = env_a.reset(seed=seed)
        obs_b, info_b = env_b.reset(seed=seed)
        assert obs_a == obs_b and info_a == info_b
        assert env_a.unwrapped.render_instance() == env_b.unwrapped.render_instance()
    questions = {question(env_a, seed) for seed in range(20)}
    assert len(questions) >= 18  # different seeds, different instances


def test_splits_are_disjoint_and_consistent():
    env = gym.make("trace/rg-leg_counting-v2")  # a problem space large enough not to repeat by chance
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


def _semantic_keys(env, split: str, n: int) -> list[str]:
    keys = []
    for seed in range(n):
        env.reset(seed=seed, options={"split": split})
        keys.append(semantic_key(env))
    return keys


@pytest.mark.parametrize("name", ["arith1", "arith2", "lcm", "chain_sum", "gcd", "basic_arithmetic"])
def test_content_split_no_test_task_in_train(name):
    """Defect 1: seed-disjoint splits repeated test questions in train (rg-arith1: 151 of 200 test instances
    against train seeds 0..2999, rg-lcm 67, chain_sum 9, ...). Now no test task key occurs in train, neither by
    the env's own key nor by the independent one (issue 31: v1's key was the expression's text, so
    "( -2 - 4 )" and "( ( ( -2 - 4 ) ) )" were two tasks; 109 of 200 rg-arith2-v1 test instances, 200 of 200
    rg-arith1-v1 ones, had a train twin)."""
    env = gym.make(f"trace/rg-{name}-v2")
    overlap = split_overlap(_keys(env, "train", 3000), _keys(env, "test", 200))
    assert overlap.overlapping_instances == 0, overlap.figure
    independent = split_overlap(_semantic_keys(env, "train", 3000), _semantic_keys(env, "test", 200))
    assert independent.overlapping_instances == 0, independent.figure
    # arith1 is the smallest family: about 35 distinct tasks of 200 test seeds once forms are merged
    assert independent.test_keys >= (30 if name == "arith1" else 100), independent.figure


def test_arithmetic_task_key_is_the_expression_up_to_form():
    key = rg.expression_key
    assert key("( -2 - 4 )") == key("( ( ( -2 - 4 ) ) )") == key("-4 + -2") == key("-( 2 + 4 )")
    assert key("3 * -2") == key("-( 2 * 3 )") == key("-2 * 3")
    assert key("-( -4 / 4 )") == key("4 / 4") and key("7 * 0 - 6") == key("-6 - 0 * 7")
    assert (
        key("2 - 4") != key("4 - 2")
        and key("8 / 2") != key("2 / 8")
        and key("2 + 3 * 4") != key("(2 + 3) * 4")
    )
    assert key("-6 / 1 + 1") != key("1 / 1 + -6")


def test_task_key_ignores_wording_and_order():
    env = gym.make("trace/rg-lcm-v2").unwrapped
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
    env = gym.make("trace/rg-chain_sum-v2")
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
    env = gym.make("trace/rg-basic_arithmetic-v2")
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
    env = gym.make("trace/rg-gcd-v2").unwrapped  # past the passive checker, which rejects some on purpose
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert reward == 0.0 and terminated and info["invalid_action"] == kind


def test_tool_calls_ignored_but_content_graded():
    env = gym.make("trace/rg-lcm-v2").unwrapped
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
    assert env.spec.id == "trace/rg-basic_arithmetic-v2"
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
    results = validation.validate_env("trace/rg-leg_counting-v2", config)
    assert all(r.passed for r in results), [
        (r.name, r.figure, r.detail[:200]) for r in results if not r.passed
    ]


# ----- issue 31: exact grading, no credit for hedging, chance-adjusted "another seed's answer" ------------------
ALL_IDS = [*IDS, "trace/rg-arith1-v2", "trace/rg-arith2-v2"]


def _answer(env, seed: int) -> str:
    env.reset(seed=seed)
    return str(env.unwrapped.entry["answer"])


def _score(env, seed: int, reply: str) -> float:
    env.reset(seed=seed)
    return env.step(reply)[1]


def _wrong(env, seed: int, answer: str) -> str:
    """A wrong answer of the right form: another seed's (the first that differs), else a tweaked one."""
    kind = rg.ANSWER_KINDS[env.unwrapped.dataset_name]
    for other in range(seed + 1, seed + 30):
        candidate = _answer(env, other)
        if not rg.same_answer(candidate, answer, kind):
            return candidate
    return answer + "1"


def test_hedging_gets_nothing_on_arith2():
    """The issue's case: replying "-140 -139" to a task whose answer is -140 scored 0.44 (GRPO learnt to hedge)."""
    env = make_reasoning_gym_env(
        "basic_arithmetic", min_terms=2, max_terms=2, max_digits=2, operators=("+", "-")
    )
    env.reset(seed=0)
    env.unwrapped.entry = {**env.unwrapped.entry, "answer": "-140"}
    for reply, reward in [
        ("<answer>-140 -139</answer>", 0.0),
        ("<answer>-139 or -140</answer>", 0.0),
        ("<answer>-140, -141, -139</answer>", 0.0),
        ("<answer>-140</answer>", 1.0),
        ("<answer> -140.0 </answer>", 1.0),
    ]:
        env.unwrapped.over = False
        assert env.step(reply)[1] == reward, reply


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_hedged_and_sprayed_answers_score_zero(env_id):
    """The right answer next to a wrong one (either order, either separator), or inside a spray of answers,
    scores 0 on every env; the right answer alone scores 1."""
    env = gym.make(env_id)
    hedged = []
    for seed in range(8):
        answer = _answer(env, seed)
        wrong = _wrong(env, seed, answer)
        assert _score(env, seed, f"<answer>{answer}</answer>") == 1.0
        spray = ", ".join([wrong, answer, *(_answer(env, seed + k) for k in range(2, 8))])
        for reply in (
            f"{answer} {wrong}",
            f"{wrong} {answer}",
            f"{answer} or {wrong}",
            f"{answer}; {wrong}",
            spray,
        ):
            hedged.append(_score(env, seed, f"<answer>{reply}</answer>"))
    assert hedged and max(hedged) == 0.0, hedged


PARAPHRASES = {
    "number": lambda a: [f" {a} ", f"{a}.0" if "." not in a else a + "0"],
    "caseless": lambda a: [a.upper(), f"  {a}  "],
    "number_list": lambda a: [a.replace("'", '"'), a.replace(".0'", "'")],
    "word_list": lambda a: [a.replace(", ", ","), a.replace(", ", " , ")],
}


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_equivalent_forms_of_the_right_answer_score_one(env_id):
    """A verifier that checks what was said, not the words: the answer's equivalent forms still pass."""
    env = gym.make(env_id)
    kind = rg.ANSWER_KINDS[env.unwrapped.dataset_name]
    for seed in range(4):
        answer = _answer(env, seed)
        for form in PARAPHRASES[kind](answer):
            assert _score(env, seed, f"<answer>{form}</answer>") == 1.0, (answer, form)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_another_seeds_answer_scores_exactly_its_chance(env_id):
    """Chance-adjusted "another seed's answer": in a tiny answer space (count_bits, letter_counting, gcd) another
    instance's answer is often right by chance. The grader must give it credit exactly when it is the right
    answer, so its mean reward is the answer-collision rate of the env and the excess over chance is 0
    (v1 gave partial credit on top: basic_arithmetic 0.05 with no collision)."""
    env = gym.make(env_id)
    kind = rg.ANSWER_KINDS[env.unwrapped.dataset_name]
    rewards, chance = [], []
    for seed in range(30):
        other = _answer(env, seed + 1)
        rewards.append(_score(env, seed, f"<answer>{other}</answer>"))
        chance.append(float(rg.same_answer(other, _answer(env, seed), kind)))
    assert rewards == chance
    assert sum(rewards) / len(rewards) - sum(chance) / len(chance) <= 0.02


def test_uncurated_datasets_get_only_full_credit_from_their_scorer():
    env = make_reasoning_gym_env("spell_backward").unwrapped  # a fuzzy partial-credit scorer
    env.reset(seed=0)
    answer = env.entry["answer"]
    assert env.step(f"<answer>{answer}</answer>")[1] == 1.0
    env.reset(seed=0)
    assert env.step(f"<answer>{answer[:-1]}</answer>")[1] == 0.0


# Golden instances of the v2 ids (seed 3 of each split): sha256 of render_instance(), first 16 hex digits. A change
# here (the instance generator, the task key that picks the split's instances, reasoning-gym's own generators)
# needs a version bump.
GOLDEN = {
    "trace/rg-basic_arithmetic-v2": ("5219e4863b37735f", "58ad89e469e55193"),
    "trace/rg-base_conversion-v2": ("3a38bb65bedebc19", "a3e840330e69b855"),
    "trace/rg-chain_sum-v2": ("1be19d7c720affd5", "868a9d7cc568ea0c"),
    "trace/rg-count_bits-v2": ("7a0bc3b42acb81e9", "6eb543b14d29ff54"),
    "trace/rg-family_relationships-v2": ("2dae71c3525dc206", "ccc367f8a519fe87"),
    "trace/rg-gcd-v2": ("56713850c016ee16", "bef5747b67c9eac0"),
    "trace/rg-lcm-v2": ("5c45103ce77f2c58", "2dc4e4f0440de6c3"),
    "trace/rg-leg_counting-v2": ("3ab59e684ffd7042", "5e043e0bda14a100"),
    "trace/rg-letter_counting-v2": ("622d2ec18286fc29", "f7f441eaf3e7b7c7"),
    "trace/rg-number_sorting-v2": ("f58cff9edd75acd3", "f210f83fbc9966ae"),
    "trace/rg-simple_equations-v2": ("84f166d5630e09a6", "1af17b27d0fcbc0f"),
    "trace/rg-word_sorting-v2": ("5d5d9ffe3a7ff2f2", "af576ef0ea63779a"),
    "trace/rg-arith1-v2": ("c22edddcbd6b8c5f", "5c6ced27162aac3e"),
    "trace/rg-arith2-v2": ("2a66fd7b6ee47215", "e3118160f5b38376"),
}


@pytest.mark.parametrize("env_id", sorted(GOLDEN))
def test_golden_instances(env_id):
    import hashlib

    env = gym.make(env_id).unwrapped
    got = []
    for split in ("train", "test"):
        env.reset(seed=3, options={"split": split})
        got.append(hashlib.sha256(env.render_instance().encode()).hexdigest()[:16])
    assert tuple(got) == GOLDEN[env_id]
