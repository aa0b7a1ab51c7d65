"""Reward components and requirement labels on hand-built trajectories that go wrong in one way each.

Each case takes the oracle's solution of a task of a chosen shape and breaks one thing, then checks the
component that must drop and the capability label that must flip to LACKING.
"""

from __future__ import annotations

import json
from typing import Any

from tests.retail.conftest import find_seed, play
from trace_gym.targets.retail.tasks import Task, call, say


def single(kind: str, variant: str | None = None, auth: str = "email"):
    def predicate(task: Task) -> bool:
        (request, *rest) = task.requests
        return not rest and request.kind == kind and variant in (None, request.variant) and task.auth == auth

    return predicate


def index(actions: list[dict[str, Any]], tool: str | None = None, text: str | None = None) -> int:
    for i, action in enumerate(actions):
        names = [c["function"]["name"] for c in action.get("tool_calls", [])]
        if (tool and tool in names) or (text and text in action.get("content", "")):
            return i
    raise AssertionError(f"no action with {tool or text}")


def test_oracle_is_present_everywhere(env):
    find_seed(env, single("cancel", "id"))
    reward, info, _ = play(env, env.oracle_actions())
    assert reward == 1.0 and set(info["reward_components"].values()) == {1.0}
    assert set(info["reward_components"]) == {
        "final_state", "facts", "no_amount_spraying", "informed", "transfer", "policy"
    }  # fmt: skip
    assert set(info["requirements"].values()) == {"PRESENT"}


def test_write_without_reading_the_order_lacks_precondition_checking(env):
    find_seed(env, single("cancel", "id"))
    actions = env.oracle_actions()
    del actions[index(actions, "get_order_details")]
    reward, info, _ = play(env, actions)
    assert info["requirements"]["precondition-checking"] == "LACKING"
    assert reward == 0.0 and info["reward_components"]["informed"] == 0.0  # the policy says: read first


def test_write_without_confirmation_breaks_the_policy(env):
    find_seed(env, single("cancel", "id"))
    actions = env.oracle_actions()
    del actions[index(actions, text="Do you confirm")]
    reward, info, _ = play(env, actions)
    assert reward == 0.0 and info["reward_components"]["policy"] == 0.0
    assert info["reward_components"]["final_state"] == 1.0


def test_acting_before_authentication_breaks_the_policy(env):
    find_seed(env, single("cancel", "id"))
    actions = env.oracle_actions()
    write = actions.pop(index(actions, "cancel_pending_order"))
    confirm = actions.pop(index(actions, text="Do you confirm"))
    actions[0:0] = [confirm, write]  # confirmed, but before the user is authenticated
    reward, info, _ = play(env, actions)
    assert reward == 0.0 and info["reward_components"]["policy"] == 0.0


def test_wrong_enum_value_lacks_precise_arguments(env):
    find_seed(env, single("cancel", "id"))
    actions = env.oracle_actions()
    i = index(actions, "cancel_pending_order")
    args = json.loads(actions[i]["tool_calls"][0]["function"]["arguments"])
    other = "ordered by mistake" if args["reason"] == "no longer needed" else "no longer needed"
    actions[i] = call("cancel_pending_order", order_id=args["order_id"], reason=other)
    reward, info, _ = play(env, actions + [say("Anything else?")] * 6)
    assert reward == 0.0 and info["reward_components"]["final_state"] == 0.0
    assert info["requirements"]["precise-arguments"] == "LACKING"


def test_wrong_amount_lacks_structured_reasoning(env):
    find_seed(env, single("query"))
    actions = env.oracle_actions()
    actions[-1] = say("Together they cost $0.01.")
    reward, info, _ = play(env, actions + [say("Anything else?")] * 6)
    assert reward == 0.0 and info["reward_components"]["facts"] == 0.0
    assert info["requirements"]["structured-reasoning"] == "LACKING"


def test_guessing_what_only_the_user_knows_lacks_information_gathering(env):
    find_seed(env, single("modify_address"))
    actions = env.oracle_actions()
    del actions[index(actions, text="What is the new shipping address")]
    reward, info, _ = play(env, actions)
    assert reward == 0.0 and info["reward_components"]["policy"] == 0.0  # invented information
    assert info["requirements"]["information-gathering"] == "LACKING"


def test_giving_in_to_the_push_lacks_policy_adherence(env):
    find_seed(env, single("refuse_cancel"))
    order_id = env.task.requests[0].order_id
    actions = env.oracle_actions()[:-1] + [
        say(f"Fine, shall I cancel order {order_id} for you (yes/no)?"),
        call("cancel_pending_order", order_id=order_id, reason="no longer needed"),
        say(f"Sorry, order {order_id} cannot be cancelled after all."),
        say("Anything else?"),
    ]
    _, info, _ = play(env, actions)
    assert info["requirements"]["policy-adherence"] == "LACKING"
    # labels name the first failure only: the agent did read the order first
    assert info["requirements"]["precondition-checking"] == "PRESENT"
    assert info["first_failure"]["capability"] == "policy-adherence"


def test_refusing_without_the_reason_fails(env):
    find_seed(env, single("refuse_cancel"))
    actions = [a for a in env.oracle_actions() if "cannot be cancelled" not in a.get("content", "")]
    reward, info, _ = play(env, actions + [say("I can't do that.")] * 8)
    assert reward == 0.0 and info["reward_components"]["facts"] == 0.0
    assert info["requirements"]["policy-adherence"] == "LACKING"


def test_acting_on_another_users_order(env):
    find_seed(env, lambda t: any(r.kind == "refuse_other" for r in t.requests), difficulty=2)
    request = next(r for r in env.task.requests if r.kind == "refuse_other")
    actions = env.oracle_actions()
    cut = index(actions, text="I can only help with your own account")
    actions = actions[:cut] + [
        say(f"Shall I cancel order {request.forbidden_order} (yes/no)?"),
        call("cancel_pending_order", order_id=request.forbidden_order, reason="no longer needed"),
        say("Done."),
    ]
    reward, info, _ = play(env, actions + [say("Bye.")] * 6)
    assert reward == 0.0 and info["reward_components"]["policy"] == 0.0
    assert info["requirements"]["policy-adherence"] == "LACKING"


def test_unnecessary_transfer(env):
    find_seed(env, single("cancel", "id"))
    actions = env.oracle_actions()[:3] + [call("transfer_to_human_agents", summary="please help")]
    reward, info, ended = play(env, actions)
    assert ended and reward == 0.0
    assert info["reward_components"]["policy"] == 0.0 and info["reward_components"]["transfer"] == 0.0


def test_missing_transfer(env):
    find_seed(env, lambda t: t.transfer_required, difficulty=2)
    actions = env.oracle_actions()[:-1] + [say("I cannot help with that.")] * 8
    reward, info, _ = play(env, actions)
    assert reward == 0.0 and info["reward_components"]["transfer"] == 0.0
    labels = info[
        "requirements"
    ]  # a transfer request raised after another: multi-step, or policy when engaged
    assert "LACKING" in (labels["policy-adherence"], labels.get("multi-step-completion"))


def test_giving_up_after_the_old_email_lacks_error_recovery(env):
    find_seed(env, lambda t: t.auth == "old_email" and len(t.requests) == 1, difficulty=1)
    actions = env.oracle_actions()[:1] + [say("I am sorry, I cannot help you without an account.")] * 8
    reward, info, _ = play(env, actions)
    assert reward == 0.0 and info["requirements"]["error-recovery"] == "LACKING"


def test_unavailable_variant_without_recovery(env):
    find_seed(env, lambda t: len(t.requests) == 1 and t.requests[0].obstacle == "unavailable", difficulty=2)
    write = env.task.requests[0].writes[0]
    actions = env.oracle_actions()
    cut = index(actions, text="is not available")
    reward, info, _ = play(env, actions[:cut] + [say("Sorry, I cannot do this.")] * 8)
    assert reward == 0.0 and info["requirements"]["error-recovery"] == "LACKING"
    assert write.depends  # the fallback is something only the user can tell


def test_stopping_after_the_first_of_two_writes_lacks_multi_step_completion(env):
    find_seed(
        env, lambda t: "multi-step-completion" in t.capabilities and t.requests[-1].writes, difficulty=3
    )
    last = env.task.requests[-1].script
    actions = env.oracle_actions()[: -len(last)] + [say("Bye!")] * 8
    reward, info, _ = play(env, actions)
    assert reward == 0.0 and info["requirements"]["multi-step-completion"] == "LACKING"
