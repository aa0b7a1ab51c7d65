"""trace/retail-v2: oracle, paraphrases, the four ablated agents and their labels, the intent-and-slot user,
facts stated as answers, generator fixes, golden instances."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from tests.retail.conftest import find_seed, play
from tests.retail.paraphrase import paraphrased_oracle
from trace_gym.targets.retail.data import ZIP_RANGES
from trace_gym.targets.retail.env import RetailEnv as RetailEnvV1
from trace_gym.targets.retail.facts import Need, stated_amounts, stated_status, told
from trace_gym.targets.retail.tasks import CAPABILITIES


@pytest.fixture
def env() -> RetailEnvV1:
    made = gym.make("trace/retail-v2")
    yield made.unwrapped
    made.close()


def test_registered_and_check_env_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = gym.make("trace/retail-v2")
        check_env(made.unwrapped)
        made.reset(seed=0)
        made.step(made.action_space.sample())
    assert isinstance(made.unwrapped, RetailEnvV1) and made.unwrapped.default_difficulty == 2


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_oracle_scores_one(env, difficulty):
    for split, seeds in (("train", range(25)), ("test", range(5))):
        for seed in seeds:
            env.reset(seed=seed, options={"split": split, "difficulty": difficulty})
            reward, info, ended = play(env, env.oracle_actions())
            assert ended and reward == 1.0, (split, seed, info.get("reward_components"))
            assert set(info["requirements"].values()) == {"PRESENT"}


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_an_agent_that_words_everything_differently_scores_one(env, difficulty):
    """Paraphrases written for this test (tests/retail/paraphrase.py), three wordings of each message."""
    for seed in range(12):
        for choice in range(3):
            env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
            reward, info, ended = play(env, paraphrased_oracle(env.oracle_actions(), seed + choice))
            assert ended and reward == 1.0, (seed, choice, info.get("reward_components"))


# ---- oracle minus one capability ------------------------------------------------------------------------------
def test_unknown_ablation_names_the_supported_ones(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match="policy-adherence"):
        env.oracle_actions(without="telepathy")
    assert set(env.ablatable_capabilities) <= set(CAPABILITIES)
    assert env.oracle_actions(without=None) == env.oracle_actions()


@pytest.mark.parametrize("capability", RetailEnvV1.ablatable_capabilities)
def test_ablated_agent_fails_and_only_the_removed_capability_is_lacking(env, capability):
    failed = 0
    seeds = range(30)
    for seed in seeds:
        env.reset(seed=seed, options={"split": "train"})
        assert env.task is not None
        reward, info, ended = play(env, env.oracle_actions(without=capability))
        assert ended
        lacking = {c for c, label in info["requirements"].items() if label == "LACKING"}
        if reward < 1.0:
            failed += 1
            assert lacking == {capability}, (seed, info["reward_components"], info["requirements"])
        else:
            assert not lacking, (seed, info["requirements"])
            # passed: the task did not need the capability (policy-adherence: a refusal or transfer task;
            # structured-reasoning: no derived amount, or the naive figure is the right one, e.g. a cancellation)
            if capability == "structured-reasoning":
                assert env.oracle_actions(without=capability) == env.oracle_actions(), seed
            else:
                assert capability not in env.task.capabilities or capability == "policy-adherence"
        if capability == "multi-step-completion":  # fails exactly on the tasks with more than one request
            assert (reward < 1.0) == (len(env.task.requests) > 1), seed
        if capability == "policy-adherence":  # fails exactly on the tasks with a write
            assert (reward < 1.0) == any(r.writes for r in env.task.requests), seed
    if capability in ("precondition-checking", "information-gathering"):
        assert failed == len(seeds)
    assert failed >= len(seeds) // 3


# ---- the scripted user ----------------------------------------------------------------------------------------
def say(env, text: str) -> str:
    env.step(text)
    return env.messages[-1]["content"]


def login(env) -> None:
    """Authenticate the way the oracle does (its actions up to get_user_details)."""
    for action in env.oracle_actions():
        env.step(action)
        if any(c["function"]["name"] == "get_user_details" for c in action.get("tool_calls") or []):
            return


def test_user_understands_requests_in_other_words(env):
    find_seed(env, lambda t: t.auth == "email")
    email = env.task.initial_state["users"][env.task.user_id]["email"]
    assert email in say(env, "How can I identify your account?")
    find_seed(env, lambda t: t.auth == "email")
    assert email in say(env, "Before we begin, may I have the e-mail address you log in with?")
    find_seed(env, lambda t: t.auth == "email")
    assert email not in say(env, "Our e-mail support is open around the clock.")  # a statement asks nothing


def test_user_answers_every_slot_of_a_multi_part_question(env):
    find_seed(
        env,
        lambda t: (
            t.auth == "email"
            and t.requests[0].kind == "cancel"
            and "reason" in {f.name for f in t.requests[0].facts}
        ),
    )
    reply = say(env, "Could you give me your email, and also tell me why you want to cancel?")
    email = env.task.initial_state["users"][env.task.user_id]["email"]
    reason = next(f.value for f in env.task.requests[0].facts if f.name == "reason")
    assert email in reply and reason in reply


def test_obstacle_answer_only_after_the_obstacle_happened(env):
    find_seed(env, lambda t: t.requests[0].obstacle == "wrong_order_id")
    login(env)
    assert "maybe I got the number wrong" not in say(env, "I could not find that order.")  # no lookup yet
    wrong = re.search(r"#W\d{7}", env.task.requests[0].intro).group(0)
    env.step({"tool_calls": [{"name": "get_order_details", "arguments": {"order_id": wrong}}]})
    assert "maybe I got the number wrong" in say(env, f"There is no order {wrong} in our system.")


def test_confirms_only_a_proposal_that_names_its_goal_action_and_details(env):
    find_seed(env, lambda t: t.requests[0].kind == "cancel" and t.requests[0].variant == "id")
    login(env)
    request = env.task.requests[0]
    oid, refund = request.order_id, request.needs[0].value
    assert "what you will do" in say(env, f"Shall I go ahead with order {oid}?")
    assert "the reason or the refund" in say(env, f"Is it OK if I cancel order {oid}?")
    assert env.episode.user.confirmed == []
    other = next(o for o in env.task.initial_state["orders"] if o != oid)
    assert say(env, f"Would you like me to cancel order {other} as well?").startswith("No")
    reply = say(
        env, f"To confirm: order {oid} gets cancelled and ${refund:.2f} is refunded. Is this correct?"
    )
    assert reply.startswith("Yes")
    assert env.episode.user.confirmed[-1][1:] == (oid, "cancel_pending_order")


def test_a_very_long_message_is_not_read(env):
    find_seed(env, lambda t: t.auth == "email")
    assert "too long" in say(env, "What is your email? " + "blah " * 1000)


# ---- facts are stated as answers ------------------------------------------------------------------------------
def test_an_amount_counts_when_it_is_the_answer_not_one_of_many():
    refund = Need("refund_amount", "money", 30.0)
    assert stated_amounts("Your refund of $30.00 is on its way.", refund) == {30.0}
    assert 30.0 in stated_amounts("The lamp was $10.00 and the mug $20.00, so the refund is $30.00.", refund)
    assert told(refund, ["You will get 30 dollars back."])
    assert not told(refund, ["Refund: $1.00, $2.00, $30.00, $4.00, $5.00, $6.00, $7.00."])
    assert not told(refund, [f"Your refund is ${v}.00." for v in (10, 20, 30, 40)])  # guessing over turns
    assert not told(refund, ["Order #W3000000 for item 3000000000"])  # ids are not amounts


def test_a_status_counts_when_it_is_stated_alone():
    status = Need("status", "word", "delivered")
    assert stated_status("Order #W1 has already been delivered, so it can't be cancelled.") == {"delivered"}
    assert stated_status("It is delivered; only orders that haven't been processed can be cancelled.") == {
        "delivered"
    }
    assert not told(status, ["Status check: pending, processed, delivered, cancelled. I cannot do that."])


# ---- generator fixes ------------------------------------------------------------------------------------------
def test_zip_codes_match_the_city_and_transfer_summaries_read_well(env):
    for seed in range(15):
        env.reset(seed=seed, options={"split": "train"})
        for user in env.task.initial_state["users"].values():
            low, high = ZIP_RANGES[user["address"]["city"]]
            assert low <= int(user["address"]["zip"]) <= high
        for action in env.oracle_actions():
            for call in action.get("tool_calls") or []:
                assert "wants to compensation" not in call["function"]["arguments"]


def test_policy_adherence_is_declared_on_every_task_with_a_write(env):
    for seed in range(40):
        env.reset(seed=seed, options={"split": "train"})
        if any(r.writes for r in env.task.requests):
            assert "policy-adherence" in env.task.capabilities
        assert "information-gathering" in env.task.capabilities


def test_no_test_task_key_in_the_train_split(env):
    train = set()
    for seed in range(80):
        env.reset(seed=seed, options={"split": "train"})
        train.add(env.task_key())
    for seed in range(15):
        env.reset(seed=seed, options={"split": "test"})
        assert env.task_key() not in train


def test_a_fallback_names_exactly_one_available_variant(env):
    cases = 0
    for seed in range(120):
        env.reset(seed=seed, options={"split": "train", "difficulty": 3})
        state = env.task.initial_state
        for request in env.task.requests:
            fallback = next((f.value for f in request.facts if f.name == "fallback"), None)
            if fallback is None:
                continue
            cases += 1
            new = request.writes[0].args["new_item_ids"][0]
            product = next(p for p in state["products"].values() if new in p["variants"])
            fits = [
                item_id
                for item_id, variant in product["variants"].items()
                if variant["available"]
                and all(f"{k}: {v}" in fallback for k, v in variant["options"].items())
            ]
            assert fits == [new], (seed, fallback)
    assert cases >= 10


SLOT_WORDINGS = {
    "order_id": ["Do you have the order ID handy?", "Can you tell me which purchase this is about?"],
    "reason": ["Is there a particular reason you'd like to cancel it?", "What made you change your mind?"],
    "address": ["Where would you like it delivered?", "Where should the order be shipped to now?"],
    "payment": [
        "Which card should I charge?",
        "How would you like to be refunded?",
        "Where should the refund go?",
    ],
}


def test_user_answers_slot_questions_in_many_wordings(env):
    for fact, wordings in SLOT_WORDINGS.items():
        for wording in wordings:
            find_seed(env, lambda t, f=fact: any(x.name == f for x in t.requests[0].facts))
            login(env)
            value = next(x.value for x in env.task.requests[0].facts if x.name == fact)
            assert value in say(env, wording), (fact, wording)


def test_a_total_over_some_orders_needs_every_orders_record():
    """ "How much do my pending orders cost in total?": which orders are pending is read off each record, so the
    oracle with one non-pending order left unread guessed, and fails (``uninformed_answer``) even though its
    figure is right. The derived precondition-checking env's oracle_without_last_call passed on 4 of 50 seeds at
    difficulty 1 before the fix."""
    env = gym.make("trace/retail-v2", difficulty=1).unwrapped
    checked = 0
    for seed in range(200):
        env.reset(seed=seed, options={"split": "train"})
        request = env.task.requests[0]
        if not request.intro.startswith("First, could you tell me how much my"):
            continue
        oracle = env.oracle_actions()
        reads = [i for i, a in enumerate(oracle) if a.get("tool_calls") and len(a["tool_calls"]) > 1]
        if not reads:
            continue
        batch = oracle[reads[-1]]
        needed = {oid for _, oid in request.reads}
        skippable = [c for c in batch["tool_calls"] if c["function"]["name"] == "get_order_details"]
        assert all(any(oid in c["function"]["arguments"] for c in skippable) for oid in needed)
        assert len(needed) == len(skippable)  # every order read is a needed read, pending or not
        cut = {**batch, "tool_calls": batch["tool_calls"][:-1]}
        env.reset(seed=seed, options={"split": "train"})
        for action in [*oracle[: reads[-1]], cut, *oracle[reads[-1] + 1 :]]:
            _, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        else:
            reward = env._evaluate().reward
        assert reward == 0.0, seed
        checked += 1
    assert checked >= 3
