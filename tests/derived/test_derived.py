"""Target-derived capability envs (trace_gym/derived) on BFCL: the target itself, restricted."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import trace_gym  # noqa: F401 - registers the ids
from trace_gym.derived.levels import BACK_OFF, LEVELS, ladder_levels, prefix_length
from trace_gym.derived.pool import Source, level_sources, one_per_start, sources
from trace_gym.derived.registration import derived_id, register_derived
from trace_gym.derived.shaped import SHAPED_KEY, ordered_share, shaped_reward

pytest.importorskip("bfcl_eval")

TARGET = "trace/bfcl-multi-turn-v0"
CAPABILITIES = (
    "state-changing-calls",
    "information-retrieval",
    "missing-function-awareness",
    "missing-parameter-awareness",
)
IDS = register_derived(TARGET, CAPABILITIES)  # in-process (synthesis emits the ids into generated_envs/)
REPLAY_SEEDS = 40


def make(env_id):
    return gym.make(env_id, disable_env_checker=True).unwrapped


def play(env, actions):
    result = None
    for action in actions:
        result = env.step(action)
        if result[2] or result[3]:
            break
    return result


def test_ids_are_registered_per_capability():
    assert IDS == [
        "trace/bfcl-multi-turn-state-changing-calls-v0",
        "trace/bfcl-multi-turn-information-retrieval-v0",
        "trace/bfcl-multi-turn-missing-function-awareness-v0",
        "trace/bfcl-multi-turn-missing-parameter-awareness-v0",
    ]
    for env_id in IDS:
        assert env_id in gym.registry


def test_levels_are_start_depths():
    assert LEVELS == (1, 2, 3, 4) and BACK_OFF[4] is None
    assert [prefix_length(7, level) for level in LEVELS] == [7, 5, 1, 0]
    assert [prefix_length(1, level) for level in LEVELS] == [1, 0, 0, 0]
    with pytest.raises(ValueError):
        prefix_length(3, 5)


def test_a_level_has_one_instance_per_start():
    """Issue 52: decision points of one task whose prefixes coincide at a level start the same episode; the
    level keeps one of them, naming the earliest decision point, in the pool's order."""
    pool = (
        Source(5, 8, "k5", "t5"),
        Source(9, 4, "k9", "t9"),
        Source(5, 0, "k5", "t5"),
        Source(5, 3, "k5", "t5"),
    )
    assert one_per_start(pool, 1) == pool  # at the decision itself every source starts elsewhere
    assert one_per_start(pool, 2) == pool  # prefixes 6, 2, 0, 1
    # prefixes 2, 0, 0, 0: the task's decision points 0 and 3 start alike
    assert one_per_start(pool, 3) == pool[:3]
    assert one_per_start(pool, 4) == (Source(5, 0, "k5", "t5"), Source(9, 4, "k9", "t9"))  # the whole task
    fine = [len(one_per_start(pool, level, "fine")) for level in ladder_levels("fine")]
    assert fine == [4, 4, 4, 3, 3, 3, 2]


@pytest.mark.parametrize("env_id", IDS)
def test_no_two_instances_of_a_level_are_one_episode(env_id):
    """Issue 52: one cycle of the test split's seeds at a level never plays one start (task, prefix) twice;
    at level 4 it is one instance per source task (BFCL state-changing-calls' test split had 237 instances of
    104 tasks there)."""
    env = make(env_id)
    tasks = {s.target_seed for s in sources(TARGET, {}, env.capability)["test"]}
    for level in LEVELS:
        count = len(level_sources(TARGET, {}, env.capability, level=level)["test"])
        starts = set()
        for seed in range(count):
            _, info = env.reset(seed=seed, options={"split": "test", "difficulty": level})
            starts.add((info["source"]["seed"], info["prefix_actions"]))
        assert len(starts) == count, (level, count - len(starts))
        if level == 4:
            assert count == len(tasks) and {seed for seed, _ in starts} == tasks


def test_the_fine_ladder_has_a_rung_per_action_near_the_decision():
    assert ladder_levels("standard") == LEVELS and ladder_levels("fine") == (1, 2, 3, 4, 5, 6, 7)
    assert [prefix_length(7, level, "fine") for level in ladder_levels("fine")] == [7, 6, 5, 4, 3, 1, 0]
    assert [prefix_length(2, level, "fine") for level in ladder_levels("fine")] == [2, 1, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="ladder must be one of"):
        ladder_levels("steep")
    with pytest.raises(ValueError, match="difficulty must be one of"):
        prefix_length(3, 5)  # the standard ladder has 4 levels


def test_an_env_on_the_fine_ladder_starts_one_action_further_back_per_level():
    """What the trainer's adaptive start depth reads (``difficulty_levels``) and what a reset replays; the
    oracle's continuation still scores 1.0 from every rung. Each rung has its own instances (one per start,
    issue 52), so one seed is not one source across rungs: the prefix is checked against each reset's own
    decision point."""
    from trace_train.grpo.curriculum import env_levels

    fine = gym.make(IDS[0], disable_env_checker=True, ladder="fine")
    standard = make(IDS[0])
    assert env_levels(fine) == [1, 2, 3, 4, 5, 6, 7] and env_levels(standard) == [1, 2, 3, 4]
    env = fine.unwrapped
    backs = (0, 1, 2, 3, 4, 6, None)
    for seed in range(6):
        for level, back in zip(ladder_levels("fine"), backs, strict=True):
            _, info = env.reset(seed=seed, options={"split": "train", "difficulty": level})
            point = info["source"]["decision_point"]
            assert info["prefix_actions"] == (0 if back is None else max(0, point - back)), (seed, level)
            assert info["difficulty"] == level
            result = play(env, env.oracle_actions())
            assert result is not None and result[1] == 1.0, (seed, level)
    with pytest.raises(ValueError, match="difficulty must be one of"):
        standard.reset(seed=0, options={"split": "train", "difficulty": 5})


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("level", LEVELS)
def test_prefix_plus_oracle_continuation_scores_one(env_id, level):
    env = make(env_id)
    for seed in range(REPLAY_SEEDS):
        _, info = env.reset(seed=seed, options={"split": "train", "difficulty": level})
        assert env.capability in env.task_capabilities()
        result = play(env, env.oracle_actions())
        assert result is not None and result[2], (seed, level)
        assert result[1] == 1.0, (seed, level, result[4]["reward_components"])
        assert result[4]["reward_components"][SHAPED_KEY] == 1.0
        assert result[4]["requirements"][env.capability] == "PRESENT"


@pytest.mark.parametrize("env_id", IDS)
def test_the_episode_is_a_piece_of_its_source_target_episode(env_id):
    """The prefix is the target oracle's first actions, up to the decision point at level 1; the whole
    trajectory replayed in a fresh target on the source task gets the same verdict (a wrong continuation too)."""
    env, target = make(env_id), make(TARGET)
    for seed in range(8):
        for level in LEVELS:
            obs, info = env.reset(seed=seed, options={"split": "train", "difficulty": level})
            source = info["source"]
            assert source["target"] == TARGET and source["split"] == "train"
            t_obs, t_info = target.reset(seed=source["seed"], options={"split": "train"})
            assert target.task_key() == source["task_key"] == env.task_key()
            assert t_info["task_id"] == source["task_id"]
            full = target.oracle_actions()
            point = source["decision_point"]
            assert point in target.decision_points()[env.capability]
            expected = point if level == 1 else prefix_length(point, level)
            assert source["prefix_actions"] == info["prefix_actions"] == expected
            assert env.oracle_actions() == full[expected:]
            if level == 1:  # the agent's first action is the oracle's at the decision point
                assert env.oracle_actions()[0] == full[point]
            for action in full[:expected]:
                t_obs, *_ = target.step(action)
            assert obs == t_obs and info["prefix_messages"] == len(obs)
            # a wrong continuation (a reply in every turn): same verdict as in the target
            wrong = ["I am not sure."] * 40
            mine = play(env, wrong)
            target.reset(seed=source["seed"], options={"split": "train"})
            theirs = play(target, full[:expected] + wrong)
            assert mine[1] == theirs[1]
            components = dict(mine[4]["reward_components"])
            shaped = components.pop(SHAPED_KEY)
            assert components == theirs[4]["reward_components"]
            assert mine[4]["requirements"] == theirs[4]["requirements"]
            assert 0.0 <= shaped < 1.0


def test_the_verifier_judges_the_prefix_too():
    """Turns before the agent's start are judged: their verdicts are in the components of the whole episode."""
    env = make(derived_id(TARGET, "state-changing-calls"))
    judged_before = 0
    for seed in range(10):
        env.reset(seed=seed, options={"split": "train", "difficulty": 1})
        first = env.first_turn
        result = play(env, env.oracle_actions())
        components = result[4]["reward_components"]
        for turn in range(first):
            assert f"turn_{turn}" in components or f"turn_{turn}_abstained" in components
            judged_before += 1
    assert judged_before > 0


@pytest.mark.parametrize("env_id", IDS)
def test_format_is_the_targets(env_id):
    """Same system prompt, same tool schemas (every tool, in order), same spaces as the target on the task."""
    env, target = make(env_id), make(TARGET)
    assert env.tools == target.tools and len(env.tools) == 128
    assert env.action_space is env.target.action_space
    for seed in range(5):
        for hint in (False, True):
            obs, info = env.reset(seed=seed, options={"split": "train", "difficulty": 4, "hint": hint})
            t_obs, t_info = target.reset(
                seed=info["source"]["seed"], options={"split": "train", "hint": hint}
            )
            assert obs[0] == t_obs[0] and obs[0]["role"] == "system"
            assert info["tools"] == t_info["tools"]
            assert info["base_system_prompt"] == t_info["base_system_prompt"]
            assert obs == t_obs  # level 4: the whole task, from the target's own first user turn


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
        env.reset(seed=1)
        env.step(env.action_space.sample())


@pytest.mark.parametrize("env_id", IDS)
def test_sources_come_from_the_target_train_split_only(env_id):
    """Both of the env's splits draw target train tasks, disjoint by the target's content groups; no
    source's task key is a target test task's key."""
    env, target = make(env_id), make(TARGET)
    pool = sources(TARGET, {}, env.capability)
    assert pool["train"] and pool["test"]
    test_keys = set()
    for seed in range(len(target.split_tasks("test"))):
        target.reset(seed=seed, options={"split": "test"})
        test_keys.add(target.task_key())
    groups = {}
    for split, items in pool.items():
        for source in items:
            assert source.task_key not in test_keys
            target.reset(seed=source.target_seed, options={"split": "train"})
            assert target.task_key() == source.task_key
            groups.setdefault(split, set()).add(target.group_key())
    assert not groups["train"] & groups["test"]
    seen = [env.reset(seed=s, options={"split": "train"})[1]["source"]["task_id"] for s in range(40)]
    assert len(set(seen)) >= 38  # consecutive seeds are (nearly always) distinct tasks


def test_determinism_same_seed_same_instance():
    env_id = IDS[0]
    a, b = make(env_id), make(env_id)
    for seed in (0, 3, 11):
        for options in ({"split": "train"}, {"split": "test", "difficulty": 3}):
            oa, ia = a.reset(seed=seed, options=options)
            ob, ib = b.reset(seed=seed, options=options)
            assert oa == ob and ia == ib and a.render_instance() == b.render_instance()


def test_shaped_reward_is_declared_ordered_and_zero_on_a_violation():
    from trace_gym.derived.env import DerivedCapabilityEnv

    assert DerivedCapabilityEnv.shaped_reward_key == SHAPED_KEY == "milestones"
    assert ordered_share([True, True, False, True]) == 0.5
    assert ordered_share([False, True]) == 0.0
    turns = {"turn_0": 1.0, "turn_0_state": 1.0, "turn_1": 1.0, "turn_1_state": 1.0, "turn_2": 0.0}
    assert shaped_reward(0.0, {**turns, "turn_2_state": 1.0}, {}, (), 1, 4) == pytest.approx(1 / 3)
    assert shaped_reward(0.0, {**turns, "turn_2_state": 0.0}, {}, (), 1, 4) == 0.0  # a wrong write
    assert shaped_reward(0.0, {"turn_0_abstained": 0.0}, {}, (), 0, 2) == 0.0  # called where it must not
    # abstaining alone earns nothing; abstaining then acting right earns the turns reached
    assert (
        shaped_reward(0.0, {"turn_0_abstained": 1.0, "turn_1": 0.0, "turn_1_state": 1.0}, {}, (), 0, 2) == 0.0
    )
    acted = {"turn_0_abstained": 1.0, "turn_1": 1.0, "turn_1_state": 1.0, "turn_2": 0.0, "turn_2_state": 1.0}
    assert shaped_reward(0.0, acted, {}, (), 0, 3) == pytest.approx(2 / 3)
    # the generic rule (targets without per-turn components): requirements in order, then success
    generic = {"final_state": 1.0, "policy": 1.0}
    caps = ("a", "b")
    assert shaped_reward(0.0, generic, {"a": "PRESENT", "b": "LACKING"}, caps, None, None) == pytest.approx(
        1 / 3
    )
    assert shaped_reward(0.0, {**generic, "policy": 0.0}, {"a": "PRESENT"}, caps, None, None) == 0.0


@pytest.mark.parametrize("env_id", IDS)
def test_degenerate_play_earns_little_shaped_reward(env_id):
    env = make(env_id)
    shaped = []
    for seed in range(30):
        env.reset(seed=seed, options={"split": "train"})
        result = play(env, [""] * 60)
        assert result[1] == 0.0 and 0.0 <= result[4]["reward_components"][SHAPED_KEY] <= 1.0
        shaped.append(result[4]["reward_components"][SHAPED_KEY])
    assert shaped == [0.0] * len(shaped)  # never acting earns nothing


@pytest.mark.parametrize("env_id", IDS)
def test_an_agent_that_only_talks_fails_every_source(env_id):
    """A start where the target's verdict cannot fail (BFCL leaves a turn with empty ground truth unchecked:
    a ``miss_param`` task ending in its empty turn) is no source."""
    env = make(env_id)
    for seed in range(60):
        env.reset(seed=seed, options={"split": "train"})
        assert play(env, ["I cannot help with that."] * 200)[1] == 0.0, env.source_info()


def test_messages_and_calls_are_the_targets():
    env = make(IDS[0])
    obs, _ = env.reset(seed=2, options={"split": "train"})
    assert env.messages == obs and env.messages is env.target.messages and env.calls is env.target.calls


def test_limits_are_the_targets_and_settable():
    env = make(IDS[0])
    env.reset(seed=0, options={"split": "train"})
    env.max_turns = env.turn + 1
    env.max_invalid_turns = 3
    assert env.target.max_turns == env.turn + 1 and env.target.max_invalid_turns == 3
    assert env.step("I am not sure.")[3] or env.target.over


def test_the_docs_example_runs(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "derived.md").read_text()
    exec(re.search(r"```python\n(.*?)```", text, re.S).group(1), {})
    assert "1.0 1.0" in capsys.readouterr().out
