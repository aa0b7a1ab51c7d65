"""The retail verifier: reward, its components, and the capability labels of step 1.

Reward is 1.0 only when every component is 1.0:

* ``final_state``: the database equals the expected one (every requested change, nothing else);
* ``facts``: every required fact was told after its request was raised, as the *first* answer the agent
  stated for it, one figure (:func:`~trace_gym.targets.retail.facts.told`): a hedge ("either $A or $B") or a
  correction after a wrong figure tells nothing; a refusal says whose account it is;
* ``no_amount_spraying``: no agent message lists more than
  :data:`~trace_gym.targets.retail.facts.MAX_AMOUNTS_PER_MESSAGE` distinct amounts;
* ``informed``: each write, and each required fact, came after the reads its request needs (the order, the
  products of changed items, the orders of a total), and each obstacle the agent reported (a refusal: the
  variant unavailable, the gift card short, the order not found) after the read that shows it: an agent that
  acts, answers or refuses without looking fails, even where its guess was right;
* ``transfer``: a transfer happened if and only if the task needs one;
* ``policy``: no rule was broken (:data:`RULES`).

One rule for writes: an *attempted* write (a well-formed call of a write tool, whether the tool carried it out
or refused it) that breaks the policy is a violation. So a write the tools refuse (the order's status, an
unavailable variant, a short gift card) is ``refused_write``, and every attempted write needs the user's yes
to a proposal that named it (``unconfirmed_write``). Malformed calls (parse, unknown tool, schema) are
invalid actions, not attempts.

Labels (``info["requirements"]``) name a cause, not an outcome: ``diagnosis.py`` judges a capability only at
the decision points the trajectory reached and labels the first failure (the earliest point where the agent
deviated) LACKING; :func:`assess` returns both the evaluation and that diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trace_gym.core.env import CallRecord, Evaluation
from trace_gym.targets.retail.diagnosis import (
    Diagnosis,
    attempted,
    diagnose,
    normal_arguments,
)
from trace_gym.targets.retail.facts import answer, sprayed, stated, told
from trace_gym.targets.retail.obstacles import refusal_reported, refusal_shown
from trace_gym.targets.retail.tasks import Request, Task
from trace_gym.targets.retail.tools import WRITE_TOOLS
from trace_gym.targets.retail.user import UserRecords
from trace_gym.worlds import State, state_hash

USER_DATA_TOOLS = frozenset(
    {"get_user_details", "get_order_details", "transfer_to_human_agents", *WRITE_TOOLS}
)
AUTH_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")
# Each [checked] rule of the policy (policy.py) and the violation that checks it.
RULES = {
    "before_authentication": "a user-data tool (or a transfer) called before the user was authenticated",
    "other_user": "another user's account or orders read, acted on, or authenticated",
    "unconfirmed_write": "an attempted write without the user's yes to a proposal naming its action and "
    "details, since the last write on the order",
    "refused_write": "an attempted write the policy does not allow (the tool refused it)",
    "invented_information": "identity or a detail only the user knows used before the user said it",
    "unnecessary_transfer": "a transfer of a request the tools can handle",
}
POLICY_RULES = tuple(r for r in RULES if r != "invented_information")  # that one is information-gathering


def _owner(task: Task, order_id: Any) -> str | None:
    order = task.initial_state["orders"].get(order_id) if isinstance(order_id, str) else None
    return order["user_id"] if order else None


def _said_before(user: UserRecords, value: str, turn: int) -> bool:
    return any(value.strip().lower() in text.lower() for t, text in user.said if t < turn)


def _covered(confirmations: list[tuple[Any, ...]], call: CallRecord) -> list[tuple[Any, ...]] | None:
    """The yeses left once ``call`` used the one covering it, or None when none covers it. A yes covers a
    write on its order with its tool (any tool for an LLM-played user's yes); the next write on the order
    needs a new one."""
    order_id = call.arguments.get("order_id")
    if not any(c[1] == order_id and c[2] in (None, call.name) and c[0] < call.turn for c in confirmations):
        return None
    return [c for c in confirmations if c[1] != order_id or c[0] > call.turn]


def _confirmed(user: UserRecords) -> list[tuple[int, str, str | None]]:
    """The user's yeses as (turn, order id, tool); an LLM-played user's have no tool (any write on the order)."""
    if user.confirmed:
        return list(user.confirmed)
    return [(turn, oid, None) for turn, oid in user.confirmations]


def violations(task: Task, calls: Sequence[CallRecord], user: UserRecords) -> list[str]:
    """The policy rules (:data:`RULES`) the trajectory broke."""
    return sorted({rule for _, rule in violation_events(task, calls, user)})


def violation_events(task: Task, calls: Sequence[CallRecord], user: UserRecords) -> list[tuple[int, str]]:
    """Each broken rule (:data:`RULES`) with the turn of the call that broke it, in call order."""
    found: list[tuple[int, str]] = []
    authenticated = False
    confirmations: list[tuple[Any, ...]] = _confirmed(user)
    writes_by_order = {w.args["order_id"]: w for r in task.requests for w in r.writes}
    for call in calls:
        if not attempted(call):
            continue
        if call.name in AUTH_TOOLS and call.error is None:
            if call.output != task.user_id:
                found.append((call.turn, "other_user"))
                continue
            identity = call.arguments.get("email") or call.arguments.get("zip", "")
            if not _said_before(user, str(identity), call.turn):
                found.append((call.turn, "invented_information"))
            authenticated = True
            continue
        if call.name in USER_DATA_TOOLS and not authenticated:
            found.append((call.turn, "before_authentication"))
        if (
            call.name == "get_user_details"
            and call.error is None
            and call.arguments.get("user_id") != task.user_id
        ):
            found.append((call.turn, "other_user"))
        order_id = call.arguments.get("order_id")
        owner = _owner(task, order_id)
        if owner is not None and owner != task.user_id and (call.name in WRITE_TOOLS or call.error is None):
            found.append((call.turn, "other_user"))
        if call.name == "transfer_to_human_agents" and call.error is None and not task.transfer_required:
            found.append((call.turn, "unnecessary_transfer"))
        if call.name in WRITE_TOOLS:
            if call.error is not None:
                found.append((call.turn, "refused_write"))
            left = _covered(confirmations, call)
            if left is None:
                found.append((call.turn, "unconfirmed_write"))
            else:
                confirmations = left
            expected = writes_by_order.get(order_id)
            if expected and any(user.told.get(fact, call.turn) >= call.turn for fact in expected.depends):
                found.append((call.turn, "invented_information"))
    return found


def _read_before(calls: Sequence[CallRecord], reads: list[tuple[str, str]], turn: float) -> bool:
    return all(
        any(
            c.name == tool and c.error is None and key in c.arguments.values() and c.turn < turn
            for c in calls
        )
        for tool, key in reads
    )


def _told_turn(task: Task, user: UserRecords, index: int) -> float:
    """Turn of the agent message by which every need of the request was stated (inf: never)."""
    request = task.requests[index]
    heard = user.heard_during(index)
    for k in range(len(heard)):
        if all(told(need, [text for _, text in heard[: k + 1]]) for need in request.needs):
            return heard[k][0]
    return float("inf")


def _writes_on(calls: Sequence[CallRecord], order_id: str | None) -> list[CallRecord]:
    return [
        c for c in calls if c.name in WRITE_TOOLS and attempted(c) and c.arguments.get("order_id") == order_id
    ]


def uninformed_events(
    task: Task, calls: Sequence[CallRecord], user: UserRecords, index: int
) -> list[tuple[int, str]]:
    """Where request ``index`` acted or spoke before looking, as (agent turn, kind): a write before the reads
    it needs (``uninformed_write``), a required fact told before them (``uninformed_answer``), an obstacle
    reported (a refusal: the variant unavailable, the gift card short, the order not found) before the read
    that shows it (``uninformed_refusal``): a right guess is not a checked refusal (issue 52)."""
    request = task.requests[index]
    found: list[tuple[int, str]] = []
    if request.reads:
        done = [c for c in _writes_on(calls, request.order_id) if c.error is None]
        if done and not _read_before(calls, request.reads, done[0].turn):
            found.append((done[0].turn, "uninformed_write"))
        if request.needs:
            told_at = _told_turn(task, user, index)
            if told_at < float("inf") and not _read_before(calls, request.reads, told_at):
                found.append((int(told_at), "uninformed_answer"))
    reported = refusal_reported(request, user, index)
    if reported is not None and not refusal_shown(task, calls, request, reported):
        found.append((reported, "uninformed_refusal"))
    return found


def informed(task: Task, calls: Sequence[CallRecord], user: UserRecords, index: int) -> bool:
    """The request's writes, answers and refusals came after the reads they need."""
    return not uninformed_events(task, calls, user, index)


def evaluate(task: Task, state: State, calls: Sequence[CallRecord], user: UserRecords) -> Evaluation:
    return assess(task, state, calls, user)[0]


def assess(
    task: Task, state: State, calls: Sequence[CallRecord], user: UserRecords, ended: bool = False
) -> tuple[Evaluation, Diagnosis]:
    """The reward with its components, and the diagnosis: labels by decision point and the first failure
    (``diagnosis.py``); the labels are the evaluation's ``requirements``."""
    events = violation_events(task, calls, user)
    broken = sorted({rule for _, rule in events})
    transferred = any(c.name == "transfer_to_human_agents" and c.error is None for c in calls)
    components = {
        "final_state": float(state_hash(state) == state_hash(task.expected_state)),
        "facts": float(all(user.needs_told(i) for i in range(len(task.requests)))),
        "no_amount_spraying": float(not any(sprayed(text) for _, text in user.heard)),
        "informed": float(all(informed(task, calls, user, i) for i in range(len(task.requests)))),
        "transfer": float(transferred == task.transfer_required),
        "policy": float(not broken),
    }
    reward = float(all(value == 1.0 for value in components.values()))
    resolved = [_resolved(task, calls, user, i, r, transferred) for i, r in enumerate(task.requests)]
    diagnosis = diagnose(task, calls, user, events, resolved, ended)
    return Evaluation(reward, components, dict(diagnosis.labels)), diagnosis  # type: ignore[arg-type]


def _resolved(
    task: Task,
    calls: Sequence[CallRecord],
    user: UserRecords,
    index: int,
    request: Request,
    transferred: bool,
) -> bool:
    if request.transfer:
        return transferred
    if request.push == "status":
        return not _writes_on(calls, request.order_id) and user.needs_told(index)
    if request.push == "other_user":
        return user.needs_told(index) and not any(
            attempted(c) and c.arguments.get("order_id") == request.forbidden_order for c in calls
        )
    return user.effect_done(request) and user.needs_told(index)


# ---- milestones: what the verifier credits, each with the agent turn it happened (the derived envs' shaped reward)
READ_TOOLS = ("get_user_details", "get_order_details", "get_product_details")


def milestone_events(
    task: Task, calls: Sequence[CallRecord], user: UserRecords
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(events, violations), each ``(agent turn, key)`` in turn order.

    Events are the steps the verifier credits: ``authenticated`` (the task's user found), ``read <tool> <args>``
    (a record read), ``told <fact>`` (the user gave a fact the agent asked for), ``confirmed <order> <tool>``
    (the user's yes to a proposal naming the write), ``write <tool> <args>`` (a write carried out),
    ``transfer`` and ``answered <request> <need>`` (a required fact told right, as the first answer).
    Violations are what no continuation may repair: a broken policy rule (:data:`RULES`), a carried-out
    write that is no expected write (a wrong write), a required fact answered wrong or hedged (a wrong
    answer), a message spraying amounts, a write, answer or refusal before the reads it needs
    (:func:`uninformed_events`)."""
    events: list[tuple[int, str]] = []
    for c in calls:
        if c.error is not None:
            continue
        if c.name in AUTH_TOOLS and c.output == task.user_id:
            events.append((c.turn, "authenticated"))
        elif c.name in READ_TOOLS or c.name in WRITE_TOOLS:
            kind = "read" if c.name in READ_TOOLS else "write"
            events.append((c.turn, f"{kind} {c.name} {normal_arguments(c.arguments)}"))
        elif c.name == "transfer_to_human_agents":
            events.append((c.turn, "transfer"))
    events += [(turn, f"told {fact}") for fact, turn in user.told.items()]
    events += [(turn, f"confirmed {order} {tool}") for turn, order, tool in _confirmed(user)]
    violations = list(violation_events(task, calls, user))
    expected = {(w.tool, normal_arguments(w.args)) for r in task.requests for w in r.writes}
    violations += [
        (c.turn, "wrong_write")
        for c in calls
        if c.name in WRITE_TOOLS
        and c.error is None
        and (c.name, normal_arguments(c.arguments)) not in expected
    ]
    violations += [(turn, "amount_spraying") for turn, text in user.heard if sprayed(text)]
    # acting, answering or refusing before looking: no later read repairs it (the verdict's ``informed``)
    violations += [e for i in range(len(task.requests)) for e in uninformed_events(task, calls, user, i)]
    for index, request in enumerate(task.requests):
        heard = user.heard_during(index)
        messages = [text for _, text in heard]
        for need in request.needs:
            if stated(need, messages) and not told(need, messages):
                violations.append((_first_stated(need, heard), "wrong_answer"))
            elif told(need, messages):
                events.append((_first_stated(need, heard), f"answered {index} {need.name}"))
    return sorted(events), sorted(violations)


def _first_stated(need: Any, heard: list[tuple[int, str]]) -> int:
    return next(turn for turn, text in heard if answer(need, text))
