"""trace/bfcl-multi-turn-v0: registration and spaces, golden instances, the content split, turns and held-out
functions, invalid actions, BFCL's step limit, labels and decision points, hints, trace check."""

from __future__ import annotations

import hashlib
import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tests.bfcl.conftest import play, reset_to
from trace_gym.core.validation import ValidationConfig, validate_env
from trace_gym.targets.bfcl import IDS
from trace_gym.targets.bfcl.data import (
    HOLDOUT_PROMPT,
    MAX_STEPS_PER_TURN,
    BfclNotInstalledError,
    load_tasks,
    normalise,
    package_dir,
    split_ids,
)
from trace_gym.targets.bfcl.env import HINT, SYSTEM_PROMPT, BfclMultiTurnEnv


@pytest.mark.parametrize("env_id", sorted(IDS))
def test_registered_and_check_env_without_warnings(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = gym.make(f"trace_gym:{env_id}")
        check_env(made.unwrapped)
        made.reset(seed=0)
        made.step(made.action_space.sample())
    env = made.unwrapped
    assert isinstance(env, BfclMultiTurnEnv) and env.categories == IDS[env_id]
    assert {t["function"]["name"] for t in env.tools} >= {"cd", "place_order", "book_flight", "lockDoors"}


GOLDEN = {
    ("trace/bfcl-multi-turn-v0", "train", 0): (
        "multi_turn_miss_param_171",
        "2425ee54642014f244f30b537a7510b938d5596f452876d573d3c0533539d2d3",
    ),
    ("trace/bfcl-multi-turn-v0", "test", 3): (
        "multi_turn_long_context_136",
        "891a87e49a5fe0ef9baa72e892e3ad89140ada99dd40abe74349c4cc45b2609b",
    ),
    ("trace/bfcl-multi-turn-miss-func-v0", "train", 5): (
        "multi_turn_miss_func_27",
        "edc3a1947f019b42124f4c134d7c642a93b93c8b5a3502f0c7e54d19cb5576ed",
    ),
}


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_golden_instances(key):
    env_id, split, seed = key
    env = gym.make(env_id).unwrapped
    env.reset(seed=seed, options={"split": split})
    digest = hashlib.sha256(env.render_instance().encode()).hexdigest()
    assert (env.task.id, digest) == GOLDEN[key]


def test_consecutive_seeds_are_distinct_tasks_and_cycle(env):
    ids = env.split_tasks("test")
    seen = []
    for seed in range(len(ids) + 1):
        env.reset(seed=seed, options={"split": "test"})
        seen.append(env.task.id)
    assert len(set(seen[:-1])) == len(ids) == 160 and seen[-1] == seen[0]
    env.reset(seed=1_000_000 + 2)  # an absolute seed in the test range
    assert env.task.id == ids[2]


def test_content_split_by_independent_keys():
    """20% test, whole groups: no test task shares a base task number or any user message with a train task."""
    splits = split_ids()
    tasks = {t.id: t for t in load_tasks()}
    assert len(splits["test"]) == 160 and len(splits["train"]) == 640
    assert not set(splits["test"]) & set(splits["train"])

    def numbers(split):
        return {tasks[i].number for i in splits[split]}

    def texts(split):
        return {normalise(m["content"]) for i in splits[split] for turn in tasks[i].turns for m in turn}

    assert not numbers("test") & numbers("train")
    assert not (texts("test") & texts("train")) - {""}
    for category in ("base", "miss_func", "miss_param", "long_context"):
        assert sum(tasks[i].category == category for i in splits["test"]) == 40


def test_oracle_scores_one_with_labels_present(env):
    for split, seeds in (("train", range(0, 640, 16)), ("test", range(0, 160, 8))):
        for seed in seeds:
            env.reset(seed=seed, options={"split": split})
            capabilities = env.task_capabilities()
            reward, info, terminated, _ = play(env, env.oracle_actions())
            assert terminated and reward == 1.0, (env.task.id, info["reward_components"])
            assert info["requirements"] == dict.fromkeys(capabilities, "PRESENT")


def test_held_out_function_comes_back_at_its_turn(env):
    obs, info = reset_to(env, "multi_turn_miss_func_0")  # sort is held out until turn 3
    names = [t["function"]["name"] for t in info["tools"]]
    assert "sort" not in names and "mv" in names and "post_tweet" in names
    assert names[0] == "authenticate_twitter" and names[-1] == "wc"  # BFCL's order: TwitterAPI, then files
    assert obs[0] == {"role": "system", "content": SYSTEM_PROMPT}
    actions = env.oracle_actions()
    texts = [i for i, a in enumerate(actions) if not a.get("tool_calls")]
    for action in actions[: texts[2]]:  # up to the reply to turn 2 (the turn that needs sort)
        obs, _, _, _, info = env.step(action)
    assert "sort" not in [t["function"]["name"] for t in info["tools"]]
    obs, _, _, _, info = env.step(actions[texts[2]])
    assert obs[-1]["role"] == "user" and obs[-1]["content"].endswith(HOLDOUT_PROMPT)
    assert [t["function"]["name"] for t in info["tools"]][-1] == "sort" and info["user_turn"] == 3
    schemas = json.loads(obs[-1]["content"].removesuffix(HOLDOUT_PROMPT))  # the message names what came back
    assert schemas == info["tools"][-1:]


def test_calling_in_a_turn_that_lacks_a_parameter_is_labelled(env):
    """multi_turn_miss_param_0, turn 3 lacks the file name: an agent that acts anyway (creates a folder) is
    LACKING missing-parameter-awareness, and BFCL's state check of the next turn fails it. (A lucky guess of
    the right file passes BFCL's verdict of this release, which does not check that turn: docs/bfcl.md.)"""
    reset_to(env, "multi_turn_miss_param_0")
    actions = env.oracle_actions()
    texts = [i for i, a in enumerate(actions) if not a.get("tool_calls")]
    assert env.decision_points()["missing-parameter-awareness"] == [texts[3]]
    guess = {"tool_calls": [{"function": {"name": "mkdir", "arguments": json.dumps({"dir_name": "guess"})}}]}
    wrong = actions[: texts[3]] + [guess] + actions[texts[3] :]
    reward, info, terminated, _ = play(env, wrong)
    assert terminated and reward == 0.0
    assert info["requirements"]["missing-parameter-awareness"] == "LACKING"
    assert info["reward_components"]["turn_3_abstained"] == 0.0
    assert info["reward_components"]["turn_4_state"] == 0.0
    assert info["requirements"]["state-changing-calls"] == "LACKING"


def test_decision_points_index_the_oracle(env):
    reset_to(env, "multi_turn_miss_func_0")
    actions = env.oracle_actions()
    points = env.decision_points()
    assert set(points) == set(env.task_capabilities())
    assert all(env.capability_descriptions[c] for c in env.capabilities)
    assert all(actions[i].get("tool_calls") for i in points["state-changing-calls"])
    assert [i for i in points["missing-function-awareness"] if actions[i].get("tool_calls")] == []


def test_invalid_calls_run_nothing_and_are_named(env):
    reset_to(env, "multi_turn_base_0")  # GorillaFileSystem + TwitterAPI
    before = env.world.state_hash()
    cases = [
        ({"name": "place_order", "arguments": {"order_type": "Buy", "symbol": "X", "price": 1, "amount": 1}},
         "unknown_tool"),  # a function of a class this task does not use
        ({"name": "mkdir", "arguments": {}}, "schema"),  # missing dir_name
        ({"name": "mkdir", "arguments": {"dir_name": "x", "mode": 7}}, "schema"),  # unexpected argument
        ({"name": "cd", "arguments": {"folder": "no_such_folder"}}, "precondition"),  # the API's own error
    ]  # fmt: skip
    for call, kind in cases:
        obs, reward, terminated, truncated, info = env.step({"tool_calls": [call]})
        assert info["invalid_action"] == kind, (call, obs[-1])
        assert env.world.state_hash() == before
    assert env.invalid_turns == 3  # API errors are answers, as in BFCL: they do not count
    assert env.bfcl_trajectory() == []  # the turn is not over
    _, _, _, _, info = env.step("Done.")
    assert env.bfcl_trajectory() == [[[], [], [], ["cd(folder='no_such_folder')"]]]


def test_wrong_types_reach_the_api_as_in_bfcl(env):
    reset_to(env, "multi_turn_base_0")
    _, _, _, _, info = env.step({"tool_calls": [{"name": "mkdir", "arguments": {"dir_name": 5}}]})
    assert info["invalid_action"] in (None, "precondition")  # BFCL runs it too; the API decides


def test_step_limit_of_a_turn_truncates_with_zero(env):
    reset_to(env, "multi_turn_base_0")
    pwd = {"tool_calls": [{"name": "pwd", "arguments": {}}]}
    for step in range(MAX_STEPS_PER_TURN + 1):
        _, reward, terminated, truncated, info = env.step(pwd)
        assert terminated is False and truncated == (step == MAX_STEPS_PER_TURN)
    assert reward == 0.0 and info["reward_components"]["all_turns_finished"] == 0.0


def test_hint_goes_to_the_system_prompt_only(env):
    obs, info = env.reset(seed=4, options={"split": "train", "hint": True})
    assert obs[0]["content"].endswith(HINT) and info["base_system_prompt"] == SYSTEM_PROMPT
    for action in env.oracle_actions():
        for call in action.get("tool_calls", []):
            assert call["function"]["arguments"] not in obs[0]["content"]


def test_missing_package_names_the_install_line(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BfclNotInstalledError, match="pip install --no-deps bfcl-eval=="):
        package_dir()


def test_trace_check_passes():
    results = validate_env("trace/bfcl-multi-turn-v0", ValidationConfig(seeds=100))
    failed = [(r.name, r.figure, r.detail) for r in results if not r.passed]
    assert not failed
    figures = {r.name: r.figure for r in results}
    assert figures["oracle"] == "100/100 seeds at 1.0"
    assert figures["split_overlap"].startswith("0/100")


@pytest.mark.parametrize("env_id", sorted(set(IDS) - {"trace/bfcl-multi-turn-v0"}))
def test_trace_check_passes_per_category(env_id):
    config = ValidationConfig(seeds=20, degenerate_seeds=10, adversarial_seeds=10, fuzz_seeds=4)
    results = validate_env(env_id, config)  # small: the same code as the main id, one category's tasks
    assert not [(r.name, r.figure, r.detail) for r in results if not r.passed]


def test_runaway_math_is_refused_quickly_and_precision_does_not_leak(env):
    import decimal
    import time

    import mpmath

    reset_to(env, "multi_turn_miss_func_49")  # MathAPI among its classes
    dps, prec = mpmath.mp.dps, decimal.getcontext().prec
    runaway = [
        ("power", {"base": 2, "exponent": 2**200}),
        ("logarithm", {"value": 20, "base": 10, "precision": 10**9}),
        ("square_root", {"number": 2, "precision": 1e12}),
        ("round_number", {"number": 10, "decimal_places": -(2**100)}),
    ]
    start = time.perf_counter()
    for name, arguments in runaway:
        obs, _, _, _, info = env.step({"tool_calls": [{"name": name, "arguments": arguments}]})
        assert info["invalid_action"] == "precondition" and obs[-1]["content"].startswith("Error during")
    assert time.perf_counter() - start < 1.0
    obs, _, _, _, info = env.step(
        {"tool_calls": [{"name": "square_root", "arguments": {"number": 2, "precision": 5}}]}
    )
    assert (
        info["invalid_action"] is None and obs[-1]["content"] == "{'result': Decimal('1.4142')}"
    )  # BFCL's text
    assert (mpmath.mp.dps, decimal.getcontext().prec) == (dps, prec)


def paraphrased(env: BfclMultiTurnEnv) -> list[dict]:
    """The ground truth done differently: each turn's calls in one parallel step, after a read of the state
    that the ground truth does not make, with other words in the replies."""
    reads = [name for name in env.offered_at(0) if env.kinds[name] == "read" and not env.world.tools[name]
             .parameters.get("required") and name in ("pwd", "ls", "get_watchlist", "list_users",
             "displayCarStatus", "get_user_tickets", "get_account_info", "get_all_credit_cards")]  # fmt: skip
    actions, turn_calls = [], []
    for action in env.oracle_actions():
        if action.get("tool_calls"):
            turn_calls += action["tool_calls"]
            continue
        if turn_calls:
            extra = [{"function": {"name": reads[0], "arguments": "{}"}}] if reads else []
            actions.append({"content": "Let me see.", "tool_calls": extra + turn_calls})
        actions.append({"content": "All set, anything else?" if turn_calls else action["content"].upper()})
        turn_calls = []
    return actions


def test_a_correct_agent_that_acts_differently_passes(env):
    from trace_gym.targets.bfcl.checker import bfcl_verdict

    passed = total = 0
    for split in ("train", "test"):
        for seed in range(0, len(env.split_tasks(split)), 4):
            env.reset(seed=seed, options={"split": split})
            reward, info, terminated, _ = play(env, paraphrased(env))
            total += 1
            passed += terminated and reward == 1.0
            assert reward == float(bfcl_verdict(env.task, env.bfcl_trajectory())["valid"]), env.task.id
    assert passed == total, (passed, total)


def test_random_calls_among_the_offered_tools_score_zero(env):
    """A stronger random probe than trace check's (which draws from all 128 tools): calls of the task's own
    tools, with arguments from its messages, ending turns at random."""
    rewards = []
    for seed in range(50):
        _, info = env.reset(seed=seed, options={"split": "train"})
        rng = np.random.default_rng(seed)
        for _ in range(env.max_turns):
            if rng.random() < 0.25:
                action = "ok"
            else:
                tool = info["tools"][int(rng.integers(len(info["tools"])))]["function"]
                arguments = env.action_space.sample_arguments(tool["parameters"], rng)
                action = {"tool_calls": [{"name": tool["name"], "arguments": arguments}]}
            _, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        rewards.append(reward)
    assert np.mean(rewards) <= 0.02


def test_every_held_out_turn_is_an_empty_later_turn():
    """The env opens a task before its world exists: only first turns with a user message can be opened."""
    for task in load_tasks():
        for turn, names in task.missed_function.items():
            assert turn > 0 and task.turns[turn] == () and names
        assert task.turns[0]


def test_errors_do_not_reveal_held_out_functions(env):
    reset_to(env, "multi_turn_miss_func_0")  # sort is held out until turn 3
    obs, _, _, _, info = env.step({"tool_calls": [{"name": "sort_file", "arguments": {}}]})
    assert info["invalid_action"] == "unknown_tool" and "mv" in obs[-1]["content"]
    assert "sort" not in obs[-1]["content"].replace("sort_file", "")


def test_settings_are_checked():
    with pytest.raises(ValueError, match="categories"):
        gym.make("trace/bfcl-multi-turn-v0", categories=["simple"])
    with pytest.raises(ValueError, match="max_turns"):
        gym.make("trace/bfcl-multi-turn-v0", max_turns=0)
    env = gym.make("trace/bfcl-multi-turn-v0", categories=["long_context", "base"]).unwrapped
    assert env.config.categories == ("base", "long_context") == env.categories
    assert {i.split("_")[2] for i in env.split_tasks("test")} == {"base", "long"}
