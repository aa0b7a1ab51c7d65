"""Derived capability envs on retail (trace/retail-v2): the milestone reward from retail's verifier events, the
sources another task's continuation passes, and the agent lacking a capability from the start point on."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import trace_gym  # noqa: F401 - registers trace/retail-v2
from trace_gym.derived.env import DerivedCapabilityEnv
from trace_gym.derived.levels import LEVELS
from trace_gym.derived.pool import sources
from trace_gym.derived.shaped import SHAPED_KEY, event_milestones
from trace_gym.targets.retail.tasks import CAPABILITIES
from trace_gym.targets.retail.tools import WRITE_TOOLS

TARGET = "trace/retail-v2"
WINDOW = 40  # train seeds scanned: enough sources for a few seeds per env, a few seconds per capability
SEEDS = 3
GOODBYE = "Thank you, goodbye."


def make(capability: str, level: int = 1) -> DerivedCapabilityEnv:
    return DerivedCapabilityEnv(target_id=TARGET, capability=capability, difficulty=level, window=WINDOW)


def play(env, actions, max_steps: int = 120):
    for action in [*actions, *[GOODBYE] * max_steps]:
        result = env.step(action)
        if result[2] or result[3]:
            return result
    raise AssertionError("the episode did not end")


def milestones(result) -> float:
    return result[4]["reward_components"][SHAPED_KEY]


def write_index(actions) -> int | None:
    return next(
        (
            i
            for i, a in enumerate(actions)
            if any(c["function"]["name"] in WRITE_TOOLS for c in a.get("tool_calls") or [])
        ),
        None,
    )


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_oracle_continuation_earns_every_milestone_and_idle_talk_none(capability):
    env = make(capability)
    for level in LEVELS:
        for seed in range(SEEDS):
            env.reset(seed=seed, options={"split": "train", "difficulty": level})
            result = play(env, env.oracle_actions())
            assert result[1] == 1.0 and milestones(result) == 1.0, (seed, level)
            env.reset(seed=seed, options={"split": "train", "difficulty": level})
            result = play(env, [])  # only talks from the start point on
            assert result[1] == 0.0 and milestones(result) == 0.0, (seed, level)


def test_oracle_stop_after_k_actions_earns_a_share_strictly_between():
    """From the beginning (level 4): the oracle stopped right after its first write, where that does not finish
    the task, earns a share strictly between 0 and 1, more than stopped right before it."""
    env = make("precise-arguments", level=4)
    between = 0
    for seed in range(12):
        env.reset(seed=seed, options={"split": "train"})
        continuation = env.oracle_actions()
        first = write_index(continuation)
        assert first is not None
        before = milestones(play(env, continuation[:first]))
        env.reset(seed=seed, options={"split": "train"})
        result = play(env, continuation[: first + 1])
        if result[1] == 1.0:  # the write was the task's last step that matters
            assert milestones(result) == 1.0
            continue
        assert 0.0 < milestones(result) < 1.0, seed
        assert before < milestones(result)  # one oracle action further, more milestones
        between += 1
    assert between >= 2


def test_a_wrong_write_earns_nothing():
    """From the beginning (level 4), a cancellation with the other reason: carried out and confirmed, every
    milestone before it reached, no policy rule broken, but not the expected write (a wrong write)."""
    env = make("precise-arguments", level=4)
    checked = 0
    for seed in range(40):
        env.reset(seed=seed, options={"split": "train"})
        continuation = env.oracle_actions()
        index = write_index(continuation)
        call = continuation[index]["tool_calls"][0]["function"]
        if call["name"] != "cancel_pending_order":
            continue
        arguments = json.loads(call["arguments"])
        arguments["reason"] = {"no longer needed": "ordered by mistake"}.get(
            arguments["reason"], "no longer needed"
        )
        write = continuation[index]["tool_calls"][0]
        wrong = {
            **continuation[index],
            "tool_calls": [{**write, "function": {**call, "arguments": json.dumps(arguments)}}],
        }
        result = play(env, [*continuation[:index], wrong, *continuation[index + 1 :]])
        assert result[1] == 0.0 and milestones(result) == 0.0
        checked += result[4]["reward_components"]["policy"] == 1.0  # no rule broken: only the write is wrong
    assert checked >= 2


def test_a_policy_violation_earns_nothing():
    """The agent lacking policy-adherence writes without the user's yes: every other milestone reached."""
    env = make("policy-adherence", level=4)
    for seed in range(SEEDS):
        env.reset(seed=seed, options={"split": "train"})
        result = play(env, env.oracle_actions(without="policy-adherence"))
        if result[4]["reward_components"]["policy"] < 1.0:
            assert milestones(result) == 0.0


def test_event_milestones_rule():
    oracle = [(1, "authenticated"), (2, "read a"), (3, "write w"), (4, "answered 0 total")]
    agent = [(1, "authenticated"), (3, "read a"), (5, "write w")]
    # start after turn 1: authenticated is the prefix's, not paid for; read and write reached, answer missed
    assert event_milestones(0.0, oracle, agent, [], start_turn=1) == pytest.approx(2 / 4)
    assert event_milestones(0.0, oracle, agent, [(4, "wrong_write")], start_turn=1) == 0.0
    # the prefix's events do not count for the agent: the oracle's read at turn 2 must be the agent's own
    assert event_milestones(0.0, oracle, [(2, "read a")], [], start_turn=2) == 0.0
    # no outcome (write, transfer, answer) reached: the read alone earns nothing
    assert event_milestones(0.0, oracle, [(3, "read a")], [], start_turn=1) == 0.0
    # ordered: a later milestone without the earlier one earns nothing
    assert event_milestones(0.0, oracle, [(5, "write w")], [], start_turn=1) == 0.0
    assert event_milestones(1.0, oracle, [*agent, (6, "answered 0 total")], [], start_turn=1) == 1.0


@pytest.mark.slow
def test_no_source_is_passed_by_another_tasks_continuation():
    """A later request that is a lone transfer (free-text summary) was multi-step-completion's decision point
    that another seed's oracle passed; such starts are no source."""
    target = gym.make(TARGET).unwrapped
    pool = sources(TARGET, {}, "multi-step-completion", 200)
    lone_transfers = 0
    for source in pool["train"] + pool["test"]:
        target.reset(seed=source.target_seed, options={"split": "train"})
        rest = target.oracle_actions()[source.decision_point :]
        names = [c["function"]["name"] for a in rest for c in a.get("tool_calls") or []]
        lone_transfers += names == ["transfer_to_human_agents"] and len(rest) == 1
    assert lone_transfers == 0
    # the decision points exist in the window: the filter, not the generator, removed them
    found = 0
    for seed in range(200):
        target.reset(seed=seed, options={"split": "train"})
        for point in target.decision_points().get("multi-step-completion", []):
            rest = target.oracle_actions()[point:]
            found += (
                len(rest) == 1
                and rest[0].get("tool_calls", [{}])[0].get("function", {}).get("name")
                == "transfer_to_human_agents"
            )
    assert found > 0


def test_agent_lacking_a_capability_acts_from_the_start_point():
    env = make("multi-step-completion")
    assert set(env.ablatable_capabilities) == set(env.target.ablatable_capabilities)
    for seed in range(SEEDS):
        env.reset(seed=seed, options={"split": "train", "difficulty": 4})
        assert env.oracle_actions(without="policy-adherence") == env.target.oracle_actions(
            without="policy-adherence"
        )
        env.reset(seed=seed, options={"split": "train", "difficulty": 1})
        # at its decision point (a later request's first action) the agent lacking it only says goodbye
        ablated = env.oracle_actions(without="multi-step-completion")
        assert all(not a.get("tool_calls") for a in ablated)
        assert play(env, ablated)[1] == 0.0
        env.reset(seed=seed, options={"split": "train", "difficulty": 1})
        ablated = env.oracle_actions(without="information-gathering")
        if ablated == env.oracle_actions():  # the continuation asks nothing: that agent is the oracle there
            assert play(env, ablated)[1] == 1.0
    with pytest.raises(ValueError):
        env.oracle_actions(without="error-recovery")  # retail has no such ablation


@pytest.mark.slow
@pytest.mark.parametrize("capability", ["precondition-checking", "policy-adherence", "multi-step-completion"])
@pytest.mark.parametrize("level", [1, 4])
def test_no_probe_earns_more_milestones_than_the_agent_lacking_the_capability(capability, level):
    """Every ``trace check`` probe (degenerate and adversarial), on the episodes it fails, earns no more
    milestone reward on average than the agent lacking the env's own capability (strictly less where that
    agent earns any)."""
    from trace_gym.core.validation import (
        ADVERSARIAL_PROBES,
        DEGENERATE_POLICIES,
        ValidationConfig,
        play_probe,
        run_policy,
    )

    seeds = 6
    env, other = make(capability, level), make(capability, level)
    last: dict = {}
    step = env.step

    def recorded(action):
        result = step(action)
        last["info"] = result[4]
        return result

    env.step = recorded
    own = []
    for seed in range(seeds):
        env.reset(seed=seed, options={"split": "train"})
        play(env, env.oracle_actions(without=capability))
        own.append(last["info"]["reward_components"][SHAPED_KEY])
    config = ValidationConfig(seeds=seeds, degenerate_seeds=seeds, adversarial_seeds=seeds)
    probes: dict[str, list[float]] = {}
    for seed in range(seeds):
        for name, policy in DEGENERATE_POLICIES.items():
            last.clear()
            if run_policy(env, policy, seed, config) < 1.0 and "info" in last:
                probes.setdefault(name, []).append(
                    last["info"].get("reward_components", {}).get(SHAPED_KEY, 0.0)
                )
        for probe_type in ADVERSARIAL_PROBES:
            if probe_type.name == "oracle_without_last_call":
                continue  # the oracle short of one call: a near miss, and milestones pay the progress it made
            last.clear()
            reward, probe = play_probe(env, other, probe_type, seed, config)
            if probe is not None and probe.applies and reward < 1.0 and "info" in last:
                # an episode the probe's step cap cut off never ended: it earned nothing
                probes.setdefault(probe_type.name, []).append(
                    last["info"].get("reward_components", {}).get(SHAPED_KEY, 0.0)
                )
    floor = sum(own) / len(own)
    for name, values in probes.items():
        mean = sum(values) / len(values)
        assert mean < floor or mean == floor == 0.0, (name, mean, floor)


def test_a_record_the_prefix_read_is_no_milestone_to_read_again():
    """The oracle re-reads an order a query of the prefix read already (issue 52): an agent that goes by the
    prefix's read is paid like the oracle; a read the prefix never made still is a milestone."""
    oracle = [(1, "read o"), (3, "read o"), (4, "answered 1 status")]
    assert event_milestones(1.0, oracle, [(4, "answered 1 status")], [], start_turn=2) == 1.0
    assert event_milestones(0.0, oracle, [(4, "answered 1 status")], [], start_turn=0) == 0.0


def test_a_refusal_without_its_read_fails_and_earns_no_milestones():
    """The precondition env, refusal_without_read's episodes: reward 0, no milestone, a capability LACKING
    (labels agree with the verdict: the user did not play along with the guess, so the continuation acts on
    a fallback it never heard)."""
    from trace_gym.core.validation import RefusalWithoutRead, ValidationConfig, play_probe

    env, other = make("precondition-checking"), make("precondition-checking")
    last: dict = {}
    step = env.step

    def recorded(action):
        result = step(action)
        last["info"] = result[4]
        return result

    env.step = recorded
    played = 0
    for seed in range(12):
        reward, probe = play_probe(env, other, RefusalWithoutRead, seed, ValidationConfig())
        if probe is None or not probe.applies:
            continue
        played += 1
        assert reward == 0.0 and last["info"]["reward_components"][SHAPED_KEY] == 0.0
        assert "LACKING" in last["info"]["requirements"].values()
    assert played >= 2


def test_a_shared_scan_target_scans_as_a_fresh_one():
    """Every capability's scan in a process uses one target (``scan_target``), which keeps the tasks it drew:
    a capability scanned after another must get the pool a fresh target gives."""
    from trace_gym.derived.pool import scan, scan_target

    shared = scan_target("trace/retail-v2", (("difficulty", 1),))
    first = scan(shared, "policy-adherence", 80)
    after = scan(shared, "information-gathering", 80)
    fresh = gym.make("trace/retail-v2", difficulty=1, disable_env_checker=True).unwrapped
    assert after == scan(fresh, "information-gathering", 80) and after["train"]
    fresh = gym.make("trace/retail-v2", difficulty=1, disable_env_checker=True).unwrapped
    assert first == scan(fresh, "policy-adherence", 80)
