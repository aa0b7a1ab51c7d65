"""Robustness wrappers: seeded views of the tools that keep every trace env solvable by its (translated) oracle."""

import json
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from tests.interop.ids import CAPABILITY, RETAIL
from trace_gym.interop.robustness import (
    DistractorTools,
    PerturbDescriptions,
    RenameTools,
    ShuffleTools,
    robust,
)

ENV_IDS = [RETAIL, CAPABILITY, "trace/test-library-v0"]


def names(tools):
    return [t["function"]["name"] for t in tools]


def play_oracle(env, seed):
    obs, info = env.reset(seed=seed)
    reward, done = 0.0, False
    for action in env.get_wrapper_attr("oracle_actions")():
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return reward, done, obs, info


WRAPPERS = {
    "rename": lambda e: RenameTools(e, seed=3),
    "distractors": lambda e: DistractorTools(e, count=4, seed=3),
    "shuffle": lambda e: ShuffleTools(e, seed=3),
    "perturb": lambda e: PerturbDescriptions(e, seed=3),
    "all": lambda e: robust(e, seed=3),
    "all-reversed": lambda e: DistractorTools(
        ShuffleTools(RenameTools(PerturbDescriptions(e), seed=1)), seed=2
    ),
}


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("wrap", list(WRAPPERS), ids=list(WRAPPERS))
def test_oracle_still_scores_one(env_id, wrap):
    env = WRAPPERS[wrap](gym.make(env_id))
    for seed in range(6):
        reward, done, _, _ = play_oracle(env, seed)
        assert done and reward == 1.0, (wrap, seed)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes_on_wrapped_env(env_id):
    env = robust(gym.make(env_id), seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    # The one expected warning says a wrapper is applied; anything else is a problem of the view.
    assert [str(w.message) for w in caught if "different from the unwrapped" not in str(w.message)] == []


def test_renaming_is_consistent_and_hides_old_names():
    base = gym.make(RETAIL)
    env = RenameTools(gym.make(RETAIL), seed=7)
    old, new = names(base.unwrapped.tools), names(env.tools)
    assert len(set(new)) == len(new) and not set(old) & set(new)
    obs, info = env.reset(seed=0)
    assert names(info["tools"]) == new
    assert "transfer_to_human_agents" not in obs[0]["content"]
    assert env.tool_out["transfer_to_human_agents"] in obs[0]["content"]
    # The old name is an unknown tool, the new one with old argument names is a schema error naming new names.
    obs, _, _, _, info = env.step(
        {"tool_calls": [{"name": "get_order_details", "arguments": {"order_id": "#W1"}}]}
    )
    assert info["invalid_action"] == "unknown_tool"
    assert (
        "get_order_details" in obs[-1]["content"] and env.tool_out["get_order_details"] in obs[-1]["content"]
    )
    renamed = env.tool_out["get_order_details"]
    obs, _, _, _, info = env.step({"tool_calls": [{"name": renamed, "arguments": {"order_id": "#W1"}}]})
    assert info["invalid_action"] == "schema"
    assert f"'{env.arg_out['order_id']}' is a required property" in obs[-1]["content"]
    # Past calls are shown with the view's names.
    assert obs[-2]["tool_calls"][0]["function"]["name"] == renamed


def test_oracle_actions_use_view_names():
    env = RenameTools(gym.make(RETAIL), seed=2)
    env.reset(seed=5)
    called = {c["function"]["name"] for a in env.oracle_actions() for c in a.get("tool_calls") or []}
    assert called and called <= set(names(env.tools))
    for action in env.oracle_actions():
        for call in action.get("tool_calls") or []:
            assert set(json.loads(call["function"]["arguments"])) <= set(env.arg_out.values())


def test_distractors_answer_neutrally_and_change_nothing():
    env = DistractorTools(gym.make("trace/test-library-v0"), count=3, seed=0)
    extra = sorted(env.distractors)
    assert len(extra) == 3 and set(extra) <= set(names(env.tools))
    env.reset(seed=1)
    state = env.unwrapped.world.state_hash()
    name = extra[0]
    spec = next(t for t in env.tools if t["function"]["name"] == name)["function"]["parameters"]
    arguments = dict.fromkeys(spec["properties"], "x")
    obs, _, _, _, info = env.step({"tool_calls": [{"name": name, "arguments": arguments}]})
    assert obs[-1]["content"] == env.distractors[name]
    assert info["invalid_action"] is None and info["distractor_calls"] == 1
    assert env.unwrapped.world.state_hash() == state
    # A truly unknown tool is still an error, and the error lists the distractors as available.
    obs, _, _, _, info = env.step({"tool_calls": [{"name": "nope", "arguments": {}}]})
    assert info["invalid_action"] == "unknown_tool" and all(n in obs[-1]["content"] for n in extra)


def test_shuffle_changes_order_per_instance_deterministically():
    env = ShuffleTools(gym.make(RETAIL), seed=0)
    orders = [names(env.reset(seed=s)[1]["tools"]) for s in range(5)]
    assert len({tuple(o) for o in orders}) > 1 and all(sorted(o) == sorted(orders[0]) for o in orders)
    again = ShuffleTools(gym.make(RETAIL), seed=0)
    assert names(again.reset(seed=3)[1]["tools"]) == orders[3]


def test_views_are_deterministic_per_seed():
    def view(seed):
        env = robust(gym.make(RETAIL), seed=seed)
        obs, info = env.reset(seed=4)
        return json.dumps([obs, info["tools"]], sort_keys=True)

    assert view(1) == view(1) and view(1) != view(2)


def test_perturbed_descriptions_keep_names_and_schemas():
    base = gym.make(RETAIL).unwrapped.tools
    tools = PerturbDescriptions(gym.make(RETAIL), seed=5).tools
    assert names(tools) == names(base)
    changed = 0
    for a, b in zip(base, tools, strict=True):
        pa, pb = a["function"]["parameters"], b["function"]["parameters"]
        assert pa["required"] == pb["required"] and set(pa["properties"]) == set(pb["properties"])
        changed += a["function"]["description"] != b["function"]["description"]
    assert changed >= len(base) // 2
