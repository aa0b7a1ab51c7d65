"""The catalog families: golden instances, the isolation matrix at a small size, adversaries, paraphrases."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from trace_gym.synthesis.catalog import FAMILIES
from trace_gym.synthesis.catalog.base import CAPABILITIES, amounts, call, say
from trace_gym.synthesis.isolation import DIAGONAL_MAX, OFF_DIAGONAL_MIN, play

LEVELS = [(cap, level) for cap, cls in FAMILIES.items() for level in cls.difficulty_levels]

# sha256 over the rendered instances of train seeds 0..2; bump the env's -vN when generator output changes.
GOLDEN = {
    ("precondition-checking", 1): "0adeacbf384c3621",
    ("precondition-checking", 2): "9283cabbb6070810",
    ("precondition-checking", 3): "0f930dfe03b94a7a",
    ("structured-reasoning", 1): "17ba59e43d9f3611",
    ("structured-reasoning", 2): "ff43a453bf9e1bbb",
    ("structured-reasoning", 3): "6c9c7739a904751f",
    ("multi-step-completion", 1): "d8bf3211da39c3b5",
    ("multi-step-completion", 2): "f79f75e604b69416",
    ("multi-step-completion", 3): "e8acfced4531b052",
    ("precise-arguments", 1): "425a0e9c8b98d365",
    ("precise-arguments", 2): "8efe42aedcb078d6",
    ("precise-arguments", 3): "b2986b9caf543267",
    ("information-gathering", 1): "fb71898fc392b691",
    ("information-gathering", 2): "001c8f2d3c75bb45",
    ("information-gathering", 3): "9ecc13e503846f65",
    ("error-recovery", 1): "39677e8fe24580d7",
    ("error-recovery", 2): "3a6b8257d68533a9",
    ("policy-adherence", 1): "4c68ad128a056d85",
    ("policy-adherence", 2): "1c0eda67f395a96b",
    ("policy-adherence", 3): "6c5fa1107427db77",
}


def make(capability: str, level: int):
    return FAMILIES[capability](difficulty=level)


def test_the_catalog_covers_retails_seven_capabilities():
    assert sorted(FAMILIES) == sorted(CAPABILITIES)
    from trace_gym.targets.retail.tasks import CAPABILITIES as RETAIL

    assert sorted(RETAIL) == sorted(CAPABILITIES)


@pytest.mark.parametrize(("capability", "level"), LEVELS)
def test_golden_instances(capability, level):
    env = make(capability, level)
    digest = hashlib.sha256()
    for seed in range(3):
        env.reset(seed=seed, options={"split": "train"})
        digest.update(env.render_instance().encode())
    assert digest.hexdigest()[:16] == GOLDEN[(capability, level)]


@pytest.mark.parametrize(("capability", "level"), LEVELS)
def test_isolation_matrix_at_a_small_size(capability, level):
    """Oracle 1.0; lacking the env's own capability <= 0.2; lacking another >= 0.8 unless the card declares
    a dependency on it (the full 100-seed matrix is in docs/synthesis.md)."""
    env = make(capability, level)
    seeds = 5
    for lacking in [None, *CAPABILITIES]:
        rewards = []
        for seed in range(seeds):
            env.reset(seed=seed, options={"split": "train"})
            rewards.append(play(env, env.oracle_actions(without=lacking)))
        mean = float(np.mean(rewards))
        if lacking is None:
            assert mean == 1.0
        elif lacking == capability:
            assert mean <= DIAGONAL_MAX, (lacking, rewards)
        elif lacking not in env.dependencies:
            assert mean >= OFF_DIAGONAL_MIN, (lacking, rewards)


def test_unknown_ablation_is_a_clear_error():
    env = make("policy-adherence", 1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="unknown capability 'telepathy'"):
        env.oracle_actions(without="telepathy")


# ---- adversaries: must score <= 0.02 ---------------------------------------------------------------------------
def _content_free(env):
    return ["Yes, confirmed. Everything is done. Shall I proceed? (yes/no)"] * 3


def _sprayed_amounts(env):
    state = env.scenario.state
    values = sorted({i["price"] for o in state["orders"].values() for i in o["items"]})
    totals = [sum(i["price"] for i in o["items"]) for o in state["orders"].values()]
    values += totals + [a + b for a in totals for b in totals]
    text = "The amount is one of: " + ", ".join(f"${v:,.2f}" for v in values[:40]) + "."
    return [text, text]


def _status_talker(env):
    orders = " ".join(env.scenario.state["orders"])
    return [
        f"Your orders {orders} are pending, processed, delivered or cancelled; not available items too."
    ] * 2


def _status_talker_after_reading(env):
    reads = [
        call("get_order_details", order_id=o)
        for o in env.scenario.state["orders"]
        if "get_order_details" in env.tool_names
    ]
    return [*reads, *_status_talker(env)]


def _another_seeds_oracle(env):
    other = type(env)(difficulty=env.episode_difficulty)
    other.reset(seed=10_000, options={"split": "train"})
    return other.oracle_actions()


ADVERSARIES = {
    "content_free_confirmation": _content_free,
    "sprayed_amounts": _sprayed_amounts,
    "status_talker": _status_talker,
    "status_talker_after_reading": _status_talker_after_reading,
    "another_seeds_oracle": _another_seeds_oracle,
}


@pytest.mark.parametrize("adversary", sorted(ADVERSARIES))
@pytest.mark.parametrize(("capability", "level"), LEVELS)
def test_adversaries_score_zero(capability, level, adversary):
    env = make(capability, level)
    rewards = []
    for seed in range(5):
        env.reset(seed=seed, options={"split": "train"})
        rewards.append(play(env, ADVERSARIES[adversary](env)))
    assert np.mean(rewards) <= 0.02, rewards


# ---- paraphrases: a correct agent in other words still passes ------------------------------------------------
def _reword(text: str) -> str:
    """Other words, other amount formats, other case: what a verifier must not care about."""
    text = re.sub(r"\$([\d,]+\.\d\d)", lambda m: f"USD {m.group(1).replace(',', '')}", text)
    text = text.replace("Done:", "Okay, all set -").replace("I am sorry", "Unfortunately")
    return "Thanks for waiting! " + text.lower().replace("#w", "#W")


@pytest.mark.parametrize(("capability", "level"), LEVELS)
def test_paraphrased_oracle_still_scores_one(capability, level):
    env = make(capability, level)
    for seed in range(6):
        env.reset(seed=seed, options={"split": "train"})
        actions = [
            {**a, "content": _reword(a["content"])} if not a.get("tool_calls") else a
            for a in env.oracle_actions()
        ]
        assert play(env, actions) == 1.0, (seed, actions)


def test_hand_written_paraphrases_of_questions():
    env = make("policy-adherence", 1)
    env.reset(seed=3, options={"split": "train"})
    oracle = env.oracle_actions()
    write = env.scenario.writes[0]
    assert write.tool == "cancel_pending_order", "seed 3 is a cancellation"
    order_id, reason = write.args["order_id"], write.args["reason"].replace("needed", "need it")
    question = say(
        f"Just to be sure: should I cancel {order_id} since you {reason}? Please answer yes or no."
    )
    assert play(env, [oracle[0], question, *oracle[2:]]) == 1.0
    env.reset(seed=3, options={"split": "train"})
    content_free = say(f"Do you want me to go ahead with order {order_id}? (yes/no)")
    assert play(env, [oracle[0], content_free, *oracle[2:]]) == 0.0

    env = make("information-gathering", 2)
    for seed in range(6):
        env.reset(seed=seed, options={"split": "train"})
        asked = {
            "order": "What's the order number?",
            "reason": "Why do you want to cancel?",
            "address": "Where should it ship (the full address)?",
            "item": "Which item is it?",
            "payment": "Which payment method do you want it refunded to?",
        }
        text = " ".join(asked[name] for name in env.scenario.details["missing"])
        assert play(env, [say(text), *env.oracle_actions()[1:]]) == 1.0, text


def test_amounts_ignore_ids_and_read_formats():
    assert amounts("Order #W1234567 (item 1234567890): $1,234.50, USD 12 and 7.5.") == [1234.5, 12.0, 7.5]
