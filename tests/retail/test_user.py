"""The scripted retail user: reveals facts when asked, confirms only its goal, pushes, moves on, gives up."""

from __future__ import annotations

import json

from tests.retail.conftest import find_seed, play
from trace_gym.targets.retail.tasks import say
from trace_gym.worlds import STOP


def last_user(env) -> str:
    return next(m["content"] for m in reversed(env.messages) if m["role"] == "user")


def test_reveals_identity_only_when_asked(env):
    find_seed(env, lambda t: t.auth == "email")
    user = env.task.initial_state["users"][env.task.user_id]
    assert user["email"] not in env.messages[1]["content"]  # the opening states the request only
    env.step(say("Sure, let me look into that."))
    assert user["email"] not in last_user(env)
    env.step(say("What is your email address?"))
    assert user["email"] in last_user(env)
    env.step(say("Could you also give me your name and zip code?"))
    assert user["address"]["zip"] in last_user(env)


def test_old_email_then_name_and_zip_after_not_found(env):
    find_seed(env, lambda t: t.auth == "old_email")
    assert "My email is" in env.messages[1]["content"]
    env.step(say("I could not find an account with that email."))  # no failed lookup: nothing happened
    assert env.task.initial_state["users"][env.task.user_id]["address"]["zip"] not in last_user(env)
    env.step(env.oracle_actions()[0])  # the lookup with the old email, which fails
    env.step(say("I could not find an account with that email."))
    assert env.task.initial_state["users"][env.task.user_id]["address"]["zip"] in last_user(env)


def test_confirms_only_orders_of_its_goal(env):
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].kind == "cancel", difficulty=1)
    goal = env.task.requests[0].order_id
    other = next(o for o in env.task.initial_state["orders"] if o != goal)
    env.step(say("Do you want me to proceed?"))  # nothing proposed yet
    assert "which order exactly" in last_user(env)
    env.step(say(f"Shall I cancel order {other}?"))
    assert last_user(env).startswith("No")
    env.step(say(f"Shall I cancel order {goal}?"))  # no reason, no refund: not a proposal to say yes to
    assert last_user(env).startswith("Before I say yes")
    proposal = next(
        a["content"] for a in env.oracle_actions() if "Do you confirm" in (a.get("content") or "")
    )
    env.step(say(proposal))
    assert last_user(env) == "Yes, please go ahead."
    assert [o for _, o in env.episode.user.confirmations] == [goal]


def test_gives_up_after_its_patience(env):
    find_seed(env, lambda t: True)
    reward, info, ended = play(env, [say("The weather is nice.")] * 10)
    assert ended and reward == 0.0 and STOP in last_user(env)
    assert env.turn == 5  # patience 4: the fifth idle message ends the conversation


def test_pushes_once_then_accepts_the_refusal(env):
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].kind == "refuse_cancel", difficulty=1)
    actions = env.oracle_actions()
    play(env, actions[:-1])
    assert last_user(env) == env.task.requests[0].push_text
    reward, _, ended = play(env, actions[-1:])
    assert ended and reward == 1.0 and STOP in last_user(env)


def test_raises_the_next_request_when_one_is_done(env):
    find_seed(env, lambda t: len(t.requests) == 2 and not t.requests[0].push, difficulty=2)
    first = env.task.requests[0].script
    cut = len(env.oracle_actions()) - len(env.task.requests[1].script)
    play(env, env.oracle_actions()[:cut])
    assert first and last_user(env) == f"Thank you! One more thing: {env.task.requests[1].intro}"
    assert env.episode.user.current == 1


def test_reveals_a_fallback_when_told_a_variant_is_unavailable_after_the_product_was_read(env):
    """Issue 52: before the product was read, "out of stock" is a guess and the user does not play along."""
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].obstacle == "unavailable")
    fallback = next(f for f in env.task.requests[0].facts if f.name == "fallback")
    env.step(say("Unfortunately that variant is out of stock."))
    assert last_user(env) != fallback.value and "fallback" not in env.episode.user.told
    read = next(a for a in env.oracle_actions() if "get_product_details" in json.dumps(a))
    play(env, env.oracle_actions()[: env.oracle_actions().index(read) + 1])
    env.step(say("Unfortunately that variant is out of stock."))
    assert last_user(env) == fallback.value
    assert "fallback" in env.episode.user.told


def test_a_yes_no_question_about_a_stated_proposal_gets_its_answer(env):
    """Issue 52: "Are you good with that?" after the proposal asks for the yes; the same question with no
    action stated (or a negated one) gets none."""
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].kind == "cancel", difficulty=1)
    goal = env.task.requests[0].order_id
    proposal = next(
        a["content"] for a in env.oracle_actions() if "Do you confirm" in (a.get("content") or "")
    )
    plan = proposal.removesuffix(" Do you confirm (yes/no)?")
    env.step(say(f"Your order {goal} is in our system. Are you good with that?"))  # nothing proposed
    assert "yes" not in last_user(env).lower()  # not read as a proposal at all
    env.step(say(plan.replace("I will cancel", "I will not cancel") + " Are you good with that?"))
    assert "yes" not in last_user(env).lower()
    env.step(say(plan))
    env.step(say("Ready for me to do it?"))  # points back at the plan said just before
    assert last_user(env) == "Yes, please go ahead."
    assert [o for _, o in env.episode.user.confirmations] == [goal]


def test_a_proposal_by_its_outcome_in_full_gets_its_yes_and_a_negated_or_other_one_none(env):
    """Round eleven: "Order #W... would then go to <the new address>. Sound right?" proposes the change by its
    outcome; negated, or beside another action, it proposes nothing."""
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].kind == "modify_address", difficulty=1)
    request = env.task.requests[0]
    args = request.writes[0].args
    address = f"{args['address1']}, {args['city']}, {args['state']} {args['zip']}, {args['country']}"
    oid = request.order_id
    play(env, [a for a in env.oracle_actions() if "Do you confirm" not in (a.get("content") or "")][:-3])
    env.step(say(f"Order {oid} won't go to {address}. Sound right?"))
    assert "go ahead" not in last_user(env)
    env.step(say(f"I'll cancel order {oid} and it would go to {address}. Sound right?"))
    assert "go ahead" not in last_user(env)
    env.step(say(f"Order {oid} would then go to {address}. Are you happy with that?"))  # no fixed phrase
    assert last_user(env) == "Yes, please go ahead."
