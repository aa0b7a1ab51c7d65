"""Labels by cause (issue 28): the capability-env protocol (task_capabilities / decision_points, the same API as
trace/bfcl), NA until a decision point is reached, the first failure with its turn and evidence, the outcome."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest

from tests.retail.conftest import find_seed, play
from trace_gym.targets.retail.env import ABLATIONS, RetailEnv
from trace_gym.targets.retail.tasks import call, say
from trace_gym.targets.retail.tools import WRITE_TOOLS

SEEDS = range(40)


def _episode(env: RetailEnv, seed: int, actions: list[Any], difficulty: int = 2) -> tuple[float, dict]:
    env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
    reward, info, ended = play(env, actions(env) + [{"content": ""}] * 60)
    assert ended
    return reward, info


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_decision_points_index_the_oracle_for_every_capability_of_the_task(env, difficulty: int) -> None:
    for seed in SEEDS:
        env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
        capabilities, points, n = env.task_capabilities(), env.decision_points(), len(env.oracle_actions())
        assert capabilities == tuple(env.task.capabilities) and set(points) == set(capabilities)
        for capability, indexes in points.items():
            assert indexes and indexes == sorted(set(indexes)) and all(0 <= i < n for i in indexes), (
                capability
            )
        writes = [i for i, a in enumerate(env.oracle_actions()) if any(
            c["function"]["name"] in WRITE_TOOLS for c in a.get("tool_calls") or [])]  # fmt: skip
        assert points.get("precise-arguments", []) == writes


def test_the_protocol_matches_bfcl() -> None:
    from trace_gym.targets.bfcl.env import BfclMultiTurnEnv  # the other target with the protocol

    for name in ("task_capabilities", "decision_points"):
        assert callable(getattr(RetailEnv, name)) and callable(getattr(BfclMultiTurnEnv, name))


def test_the_oracle_reaches_every_point_and_has_no_failure(env) -> None:
    for seed in SEEDS:
        reward, info = _episode(env, seed, lambda e: e.oracle_actions())
        assert reward == 1.0 and info["first_failure"] is None and info["outcome"] == "success"
        assert set(info["requirements"].values()) == {"PRESENT"}, (seed, info["requirements"])


@pytest.mark.parametrize("capability", list(ABLATIONS))
def test_oracle_minus_x_fails_first_at_x_and_lacks_nothing_else(env, capability: str) -> None:
    for seed in SEEDS:
        reward, info = _episode(env, seed, lambda e: e.oracle_actions(without=capability))
        lacking = {c for c, label in info["requirements"].items() if label == "LACKING"}
        if reward == 1.0:
            assert not lacking and info["first_failure"] is None
            continue
        assert lacking == {capability} and info["first_failure"]["capability"] == capability, seed
        assert info["first_failure"]["turn"] >= 1 and info["first_failure"]["evidence"]


@pytest.mark.parametrize("k", [0, 2, 4, 6])
def test_an_agent_that_stops_is_not_lacking_anything(env, k: int) -> None:
    for seed in SEEDS:
        reward, info = _episode(env, seed, lambda e: e.oracle_actions()[:k])
        if reward == 1.0:
            continue
        assert "LACKING" not in info["requirements"].values() and info["first_failure"] is None
        assert info["outcome"] == "stopped"
        if k == 0:
            assert set(info["requirements"].values()) == {"NA"}  # nothing reached


def test_running_out_of_turns_is_an_outcome(env) -> None:
    env.reset(seed=3, options={"split": "train"})
    env.max_turns = 3
    reward, info, ended = play(env, [say("Let me think about that.")] * 3)
    assert ended and reward == 0.0 and info["outcome"] == "out_of_turns" and info["first_failure"] is None


def test_the_invalid_action_limit_is_an_outcome(env) -> None:
    env.reset(seed=3, options={"split": "train"})
    reward, info, ended = play(
        env, [call("refund_everything")] * 10
    )  # unknown tool: malformed, no capability
    assert ended and info["outcome"] == "invalid_action_limit" and info["first_failure"] is None


def test_unreadable_output_is_an_outcome(env) -> None:
    env.reset(seed=3, options={"split": "train"})
    broken = (
        '{"content": "", "tool_calls": [{"function": {"name": "get_order_details", "arguments": "{oops"}}'
    )
    reward, info, ended = play(env, [broken] * 10)
    assert ended and info["outcome"] == "malformed_output" and info["first_failure"] is None


def test_the_first_failure_names_the_turn_of_the_wrong_write(env) -> None:
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].kind == "cancel" and t.auth == "email")
    actions = env.oracle_actions()
    at = next(
        i
        for i, a in enumerate(actions)
        if a.get("tool_calls") and a["tool_calls"][0]["function"]["name"] == "cancel_pending_order"
    )
    args = json.loads(actions[at]["tool_calls"][0]["function"]["arguments"])
    actions[at] = call("cancel_pending_order", order_id="#W0000000", reason=args["reason"])
    reward, info, _ = play(env, actions + [{"content": ""}] * 10)
    assert reward == 0.0 and info["first_failure"]["capability"] == "precise-arguments"
    assert info["first_failure"]["turn"] == at + 1 and "#W0000000" in info["first_failure"]["evidence"]
    assert info["requirements"]["precise-arguments"] == "LACKING"
    assert info["requirements"]["precondition-checking"] == "PRESENT"  # read before it: reached and shown
    assert info["requirements"]["policy-adherence"] == "NA"  # judged at the write, which failed first


def test_info_is_the_same_in_two_identical_runs() -> None:
    infos = []
    for _ in range(2):
        env = gym.make("trace/retail-v2").unwrapped
        env.reset(seed=11, options={"split": "train"})
        _, info, _ = play(env, env.oracle_actions(without="policy-adherence") + [{"content": ""}] * 20)
        infos.append(json.dumps(info, sort_keys=True, default=str))
    assert infos[0] == infos[1]
