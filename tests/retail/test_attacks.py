"""Attacks on retail-v2's verifier and user, one class each: hedged answers, refused writes, negated
confirmations, statements that ask nothing, trigger words inside other words, and a user whose reaction would
tell which figure was right."""

from __future__ import annotations

import re
from typing import Any

from tests.retail.conftest import find_seed, play
from trace_gym.targets.retail.facts import Need, told
from trace_gym.targets.retail.reading import asked_slots, reports
from trace_gym.targets.retail.tasks import Task, call, say


def _single(kind: str, auth: str = "email"):
    def predicate(task: Task) -> bool:
        return len(task.requests) == 1 and task.requests[0].kind == kind and task.auth == auth

    return predicate


def _amount_message(actions: list[dict[str, Any]]) -> int:
    """Index of the oracle's last message (its report of the outcome, with the amount)."""
    return max(
        i for i, a in enumerate(actions) if not a.get("tool_calls") and "$" in (a.get("content") or "")
    )


def _money(value: float) -> str:
    return f"${value:,.2f}"


# ---- hedged answers: the first figure counts, one answer is one figure ----------------------------------------
def test_one_answer_is_one_figure_and_the_first_one_counts():
    refund = Need("refund_amount", "money", 30.0)
    assert told(refund, ["Your refund is $30.00."])
    assert not told(refund, ["Your refund is either $30.00 or $31.00."])
    assert not told(refund, ["Your refund is $31.00 or $30.00."])
    assert not told(refund, ["Your refund is $29.00-$31.00."])
    assert not told(refund, ["Your refund is $31.00.", "Sorry, correction: your refund is $30.00."])
    assert not told(refund, ["Your refund is $30.00.", "Correction: the refund is $31.00."])  # contradicted
    assert told(refund, ["Your refund is $30.00.", "Again, the refund is $30.00."])
    status = Need("status", "word", "delivered")
    assert not told(status, ["The order is processed.", "Sorry, it is delivered."])
    assert not told(status, ["The order is delivered or processed, I am not sure."])


def test_a_wrong_total_then_a_correction_scores_zero(env):
    find_seed(env, lambda t: t.requests[0].kind == "query")
    actions = env.oracle_actions()
    i = _amount_message(actions[: len(actions) - sum(len(r.script) for r in env.task.requests[1:])])
    right = env.task.requests[0].needs[0].value
    wrong = say(f"Together they cost {_money(right + 10)}.")
    fixed = say(f"Sorry, correction: together they cost {_money(right)}.")
    reward, info, _ = play(env, [*actions[:i], wrong, fixed, *actions[i + 1 :]])
    assert reward == 0.0 and info["reward_components"]["facts"] == 0.0


def test_the_user_reacts_the_same_to_a_right_and_a_wrong_figure(env):
    """It moves on once an answer was stated, right or wrong: its reply does not reveal which one was right."""
    replies = []
    for delta in (0, 10):
        find_seed(env, lambda t: t.requests[0].kind == "query")
        actions = env.oracle_actions()
        i = next(i for i, a in enumerate(actions) if "together they cost" in (a.get("content") or ""))
        right = env.task.requests[0].needs[0].value
        play(env, [*actions[:i], say(f"Together they cost {_money(right + delta)}.")])
        replies.append(env.messages[-1]["content"])
    assert replies[0] == replies[1]


# ---- refused writes are violations ----------------------------------------------------------------------------
def test_an_unconfirmed_cancel_the_tools_refuse_scores_zero(env):
    find_seed(env, _single("refuse_cancel"))
    oid = env.task.requests[0].order_id
    actions = env.oracle_actions()
    read = next(i for i, a in enumerate(actions) if "get_order_details" in str(a.get("tool_calls")))
    refused = call("cancel_pending_order", order_id=oid, reason="no longer needed")
    reward, info, _ = play(env, [*actions[: read + 1], refused, *actions[read + 1 :]])
    assert reward == 0.0 and info["reward_components"]["policy"] == 0.0
    assert any(c.name == "cancel_pending_order" and c.error == "precondition" for c in env.calls)
    assert info["requirements"]["policy-adherence"] == "LACKING"


def test_repeating_a_write_that_then_errors_scores_zero(env):
    find_seed(env, _single("cancel"))
    actions = env.oracle_actions()
    write = next(i for i, a in enumerate(actions) if "cancel_pending_order" in str(a.get("tool_calls")))
    reward, info, _ = play(env, [*actions[: write + 1], actions[write], *actions[write + 1 :]])
    assert any(c.error == "precondition" for c in env.calls)
    assert reward == 0.0 and info["reward_components"]["policy"] == 0.0


# ---- confirmations judged on what they propose ----------------------------------------------------------------
def _proposal(env) -> tuple[list[dict[str, Any]], int]:
    actions = env.oracle_actions()
    return actions, next(i for i, a in enumerate(actions) if "Do you confirm" in (a.get("content") or ""))


def test_a_negated_proposal_gets_no_yes(env):
    find_seed(env, _single("cancel"))
    actions, i = _proposal(env)
    text = actions[i]["content"]
    for negated in (
        text.replace("I will cancel", "I will not cancel"),
        text.replace("I will cancel", "I won't cancel"),
        "I will never cancel" + text.split("I will cancel", 1)[1],
    ):
        find_seed(env, _single("cancel"))
        play(env, actions[:i] + [say(negated)])
        assert env.messages[-1]["content"] != "Yes, please go ahead.", negated
    find_seed(env, _single("cancel"))
    play(env, actions[: i + 1])
    assert env.messages[-1]["content"] == "Yes, please go ahead."


def test_a_proposal_with_alternatives_gets_no_yes(env):
    find_seed(env, _single("modify_address"))
    actions, i = _proposal(env)
    street = env.task.requests[0].writes[0].args["address1"]
    number = street.split()[0]
    hedged = actions[i]["content"].replace(street, f"{number} or {int(number) + 1} {street.split(' ', 1)[1]}")
    play(env, actions[:i] + [say(hedged)])
    assert env.messages[-1]["content"] != "Yes, please go ahead."


def test_a_proposal_that_points_back_is_read_with_the_message_before(env):
    find_seed(env, _single("cancel"))
    actions, i = _proposal(env)
    details = actions[i]["content"].replace(" Do you confirm (yes/no)?", "")
    play(env, actions[:i] + [say(details), say("Shall I go ahead with that?")])
    assert env.messages[-1]["content"] == "Yes, please go ahead."


# ---- only requests ask; slots by synonym, whole words ---------------------------------------------------------
def test_statements_ask_nothing_and_requests_ask_by_any_synonym():
    assert asked_slots("Your email is on file and your order will ship to your address.") == set()
    assert asked_slots("Let me look up your order and the reason you gave.") == set()
    assert asked_slots("Please note that the card ending 1234 is on file.") == set()
    assert asked_slots("Let me know your email.") == {"email"}
    assert asked_slots("What's the address you signed up with?") == {"email"}
    assert asked_slots("No need for your email - just your name and zip code, please.") == {"name_zip"}
    assert asked_slots("Could you give me your email or your name and postcode?") >= {"email", "name_zip"}
    assert asked_slots("Which purchase is it?") == {"order"}
    assert asked_slots("Is it no longer needed, or was it ordered by mistake?") == {"reason"}


def test_no_trigger_inside_another_word():
    for text in (
        "Is that a reasonable plan?",  # reason
        "Do you want the zipper pouch too?",  # zip
        "Could you confirm the renamed bundle?",  # name
        "Is the charger included?",  # charge
        "Would the borderline case apply?",  # order
        "Is the billionth visitor you?",  # bill
    ):
        assert asked_slots(text) == set(), text


def test_obstacles_read_in_positive_and_negative_phrasings():
    for text in ("It isn't available.", "That colour is not in stock.", "We do not have it available."):
        assert reports(text, "unavailable"), text
    assert not reports("Good news: it is available.", "unavailable")
    for text in ("Your gift card doesn't cover it.", "The balance isn't enough.", "It falls short by $3.00."):
        assert reports(text, "balance"), text
    for text in ("I couldn't locate that order.", "That order doesn't exist.", "No order matches that id."):
        assert reports(text, "not_found"), text


def test_a_statement_with_slot_words_reveals_nothing(env):
    find_seed(env, lambda t: t.auth == "email")
    user = env.task.initial_state["users"][env.task.user_id]
    env.step(say("For my notes: email, name, zip code, order number, reason, address, payment method."))
    assert user["email"] not in env.messages[-1]["content"]
    assert not re.search(user["address"]["zip"], env.messages[-1]["content"])


def test_a_confirmed_write_the_tools_refuse_is_still_a_violation(env):
    """The user, pushing, says yes to cancelling its non-pending order; the attempt is refused: refused_write."""
    find_seed(env, _single("refuse_cancel"))
    oid = env.task.requests[0].order_id
    actions = env.oracle_actions()
    reason = "no longer needed"
    attempt = [
        say(f"I will cancel order {oid} (reason: {reason}). Do you confirm (yes/no)?"),
        call("cancel_pending_order", order_id=oid, reason=reason),
    ]
    reward, info, _ = play(env, [*actions[:-1], *attempt, actions[-1], *[say("Goodbye.")] * 4])
    from trace_gym.targets.retail.verifier import violations

    assert env.episode.user.confirmed and violations(env.task, env.calls, env.episode.user) == [
        "refused_write"
    ]
    assert reward == 0.0


# ---- a refusal needs the read that shows it (issue 52) -------------------------------------------------------
def _obstacle(obstacle: str):
    return lambda t: len(t.requests) == 1 and t.requests[0].obstacle == obstacle


def _read_moved(actions: list[dict[str, Any]], tool: str, key: str, after: int) -> list[dict[str, Any]]:
    """The oracle with its ``tool`` read of ``key`` taken out of its step and made right after action ``after``."""
    moved, out = [], []
    for i, action in enumerate(actions):
        calls = action.get("tool_calls") or []
        kept = [c for c in calls if not (c["function"]["name"] == tool and key in c["function"]["arguments"])]
        moved += [c for c in calls if c not in kept]
        if kept or not calls:
            out.append({**action, "tool_calls": kept} if calls else action)
        if i == after:
            out.append("MOVED")
    return [{"content": "", "tool_calls": moved} if a == "MOVED" else a for a in out]


def test_an_unavailable_variant_reported_before_the_product_read_scores_zero(env, monkeypatch):
    """The refusal of the first choice is a guess until the product was read. The scripted user does not play
    along (no fallback before the read: the episode fails); a user who does (an LLM may) hears the guess, and
    the verdict still fails it (informed), with precondition-checking what it lacks."""
    from trace_gym.targets.retail import user

    find_seed(env, _obstacle("unavailable"))
    actions = env.oracle_actions()
    product = env.task.requests[0].reads[1][1]
    fallback = next(f for f in env.task.requests[0].facts if f.name == "fallback")
    report = next(i for i, a in enumerate(actions) if "is not available" in (a.get("content") or ""))
    guessed = _read_moved(actions, "get_product_details", product, report)
    reward, info, _ = play(env, guessed)
    said = [m["content"] for m in env.messages if m["role"] == "user"]
    assert reward == 0.0 and fallback.value not in said and "LACKING" in info["requirements"].values()
    monkeypatch.setattr(user, "refusal_shown", lambda *args: True)  # a user that plays along
    find_seed(env, _obstacle("unavailable"))
    reward, info, _ = play(env, guessed)
    assert reward == 0.0 and info["reward_components"]["informed"] == 0.0
    assert info["requirements"]["precondition-checking"] == "LACKING"
    assert "before the read that shows it" in env.first_failure()["evidence"]
    find_seed(env, _obstacle("unavailable"))
    assert play(env, env.oracle_actions())[0] == 1.0  # the oracle reads first


def test_a_short_gift_card_reported_before_the_balance_was_read_scores_zero(env, monkeypatch):
    from trace_gym.targets.retail import user

    monkeypatch.setattr(user, "refusal_shown", lambda *args: True)  # the verdict's own check
    find_seed(env, _obstacle("gift_card"))
    actions = env.oracle_actions()
    report = next(i for i, a in enumerate(actions) if "is not enough" in (a.get("content") or ""))
    moved = _read_moved(actions, "get_user_details", env.task.user_id, report)
    assert moved != actions
    reward, info, _ = play(env, moved)
    assert reward == 0.0 and info["reward_components"]["informed"] == 0.0


def test_the_refusal_without_read_probe_scores_zero_and_passes_the_planted_hole(monkeypatch):
    """``trace check``'s probe on retail-v2: it applies (status, unavailable and balance refusals) and scores
    0; with the read check taken out of the verdict, the unavailable refusals it plays pass again."""
    import gymnasium as gym

    from trace_gym.core.validation import RefusalWithoutRead, ValidationConfig, play_probe
    from trace_gym.targets.retail import diagnosis, user, verifier

    env, other = gym.make("trace/retail-v2").unwrapped, gym.make("trace/retail-v2").unwrapped
    config = ValidationConfig()

    def rewards() -> list[float]:
        played = [play_probe(env, other, RefusalWithoutRead, seed, config) for seed in range(20)]
        return [reward for reward, probe in played if probe is not None and probe.applies]

    assert len(rewards()) >= 5 and set(rewards()) == {0.0}
    for module in (diagnosis, verifier, user):  # the user too: it reacts to a report only after the read
        monkeypatch.setattr(module, "refusal_shown", lambda *args: True)
    assert 1.0 in rewards()
