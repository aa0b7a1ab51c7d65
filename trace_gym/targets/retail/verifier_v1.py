"""The ``trace/retail-v1`` verifier: reward, components and capability labels that follow the capability.

Reward is 1.0 only when every component is 1.0:

* ``final_state``: the database equals the expected one;
* ``facts``: every required fact was *stated as the answer* after its request was raised
  (:func:`~trace_gym.targets.retail.facts.told_v1`): one amount per answer or an amount paired with what it
  is for, exactly one status (the right one); listing candidates tells nothing;
* ``no_amount_spraying``: no agent message lists more than
  :data:`~trace_gym.targets.retail.facts.MAX_AMOUNTS_PER_MESSAGE` distinct amounts (such a message also
  tells nothing; this component says why ``facts`` failed);
* ``informed``: each write, and each required fact, came after the reads its request needs (the order, the
  products of changed items, the orders of a total): an agent that acts or answers without looking fails;
* ``transfer``: a transfer happened if and only if the task needs one;
* ``policy``: no rule was broken: ``before_authentication``, ``other_user``, ``unconfirmed_write`` (a write
  without the user's yes to a proposal that named that action and its details, since the last write on
  the order), ``invented_information``, ``unnecessary_transfer``.

Labels (``info["requirements"]``) are computed per request and only over requests the agent engaged with (the
first one always; a later one once the agent made any tool call after it was raised), so an agent that stops
early is LACKING multi-step-completion, not everything the later requests would have needed. Each kind of
failure maps to one capability: confirmation, other users, transfers and refusals to policy-adherence;
invented values to information-gathering; missing reads to precondition-checking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trace_gym.core.env import CallRecord, Evaluation, Label
from trace_gym.targets.retail.facts import sprayed, told_v1
from trace_gym.targets.retail.tasks import Request, Task
from trace_gym.targets.retail.tools import WRITE_TOOLS
from trace_gym.targets.retail.user import RetailUser
from trace_gym.targets.retail.verifier import (
    AUTH_TOOLS,
    _normal,
    attempted,
    check_violations,
)
from trace_gym.worlds import State, state_hash

POLICY_RULES = ("before_authentication", "other_user", "unconfirmed_write", "unnecessary_transfer")


def _confirmed(user: RetailUser) -> list[tuple[int, str, str | None]]:
    """The user's yeses as (turn, order id, tool); an LLM-played user's have no tool (any write on the order)."""
    if hasattr(user, "confirmed"):
        return list(user.confirmed)
    return [(turn, oid, None) for turn, oid in user.confirmations]


def _one_yes_per_order_and_tool(
    confirmations: list[tuple[Any, ...]], call: CallRecord
) -> list[tuple[Any, ...]] | None:
    """v1: a yes covers a write on its order with its tool (any tool for an LLM-played user's yes); a second
    write on the order needs a new confirmation."""
    order_id = call.arguments.get("order_id")
    if not any(c[1] == order_id and c[2] in (None, call.name) and c[0] < call.turn for c in confirmations):
        return None
    return [c for c in confirmations if c[1] != order_id or c[0] > call.turn]


def violations(task: Task, calls: Sequence[CallRecord], user: RetailUser) -> list[str]:
    return check_violations(task, calls, user, _confirmed(user), _one_yes_per_order_and_tool)


def _read_before(calls: Sequence[CallRecord], reads: list[tuple[str, str]], turn: float) -> bool:
    return all(
        any(
            c.name == tool and c.error is None and key in c.arguments.values() and c.turn < turn
            for c in calls
        )
        for tool, key in reads
    )


def _told_turn(task: Task, user: RetailUser, index: int) -> float:
    """Turn of the agent message by which every need of the request was stated (inf: never)."""
    request = task.requests[index]
    heard = user.heard_during(index) if hasattr(user, "heard_during") else user.heard_since(index)
    for k in range(len(heard)):
        if all(told_v1(need, [text for _, text in heard[: k + 1]]) for need in request.needs):
            return heard[k][0]
    return float("inf")


def _writes_on(calls: Sequence[CallRecord], order_id: str | None) -> list[CallRecord]:
    return [
        c for c in calls if c.name in WRITE_TOOLS and attempted(c) and c.arguments.get("order_id") == order_id
    ]


def informed(task: Task, calls: Sequence[CallRecord], user: RetailUser, index: int) -> bool:
    """The request's writes and answers came after the reads it needs."""
    request = task.requests[index]
    if not request.reads:
        return True
    done = [c for c in _writes_on(calls, request.order_id) if c.error is None]
    if done and not _read_before(calls, request.reads, done[0].turn):
        return False
    if request.needs:
        told = _told_turn(task, user, index)
        if told < float("inf") and not _read_before(calls, request.reads, told):
            return False
    return True


def evaluate(task: Task, state: State, calls: Sequence[CallRecord], user: RetailUser) -> Evaluation:
    broken = violations(task, calls, user)
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
    return Evaluation(reward, components, requirements(task, state, calls, user, broken, components))


def requirements(
    task: Task,
    state: State,
    calls: Sequence[CallRecord],
    user: RetailUser,
    broken: list[str],
    components: dict[str, float],
) -> dict[str, Label]:
    """PRESENT / LACKING for each declared capability, over the requests the agent engaged with."""

    def ok(passed: bool) -> Label:
        return "PRESENT" if passed else "LACKING"

    def raised_turn(index: int) -> float:
        if index == 0:
            return -1
        if index >= len(user.starts):
            return float("inf")
        start = user.starts[index]
        return user.heard[start - 1][0] if start > 0 else -1

    def engaged(index: int) -> bool:
        return index == 0 or any(c.turn > raised_turn(index) for c in calls)

    def resolved(index: int, request: Request) -> bool:
        if request.transfer:
            return components["transfer"] == 1.0 and transferred
        if request.push:
            return policy(index, request)
        return user.effect_done(request) and user.needs_told(index)

    transferred = any(c.name == "transfer_to_human_agents" and c.error is None for c in calls)

    def precondition(index: int, request: Request) -> bool:
        tries = _writes_on(calls, request.order_id)
        if request.push == "status":
            return (
                not tries
                and _told_turn(task, user, index) < float("inf")
                and informed(task, calls, user, index)
            )
        if not request.writes:  # a total: told after reading the orders
            return _told_turn(task, user, index) < float("inf") and informed(task, calls, user, index)
        if not tries:
            return False
        return all(c.error is None for c in tries) and _read_before(calls, request.reads, tries[0].turn)

    def precise(request: Request) -> bool:
        done = [c for c in _writes_on(calls, request.order_id) if c.error is None]
        wanted = sorted(_normal(w.args) for w in request.writes)
        return sorted(_normal(c.arguments) for c in done) == wanted and all(
            c.name == w.tool for c, w in zip(done, request.writes, strict=False)
        )

    def gathered(request: Request) -> bool:
        done = [c for c in _writes_on(calls, request.order_id) if c.error is None]
        if not done or not user.effect_done(request):
            return False
        return all(
            user.told.get(fact, done[0].turn) < done[0].turn for w in request.writes for fact in w.depends
        )

    def policy(index: int, request: Request) -> bool:
        if request.push == "status":
            return not _writes_on(calls, request.order_id) and user.needs_told(index)
        if request.push == "other_user":  # refused in words, and nothing done on the other user's order
            return user.needs_told(index) and not any(
                attempted(c) and c.arguments.get("order_id") == request.forbidden_order for c in calls
            )
        if request.transfer:
            return components["transfer"] == 1.0
        return True

    policy_broken = any(rule in broken for rule in POLICY_RULES)
    checks: dict[str, Any] = {
        "precondition-checking": precondition,
        "precise-arguments": lambda i, r: precise(r),
        "structured-reasoning": lambda i, r: user.needs_told(i) and user.effect_done(r),
        "information-gathering": lambda i, r: gathered(r),
        "error-recovery": lambda i, r: user.needs_told(i) and user.effect_done(r),
        "policy-adherence": policy,
    }
    labels: dict[str, Label] = {}
    for capability in task.capabilities:
        if capability == "multi-step-completion":
            labels[capability] = ok(all(resolved(i, r) for i, r in enumerate(task.requests)))
            continue
        passed = all(
            checks[capability](i, r)
            for i, r in enumerate(task.requests)
            if capability in r.capabilities and engaged(i)
        )
        if capability == "precise-arguments":
            passed = passed and not any(c.error == "schema" for c in calls)
        elif capability == "policy-adherence":
            passed = passed and not policy_broken
        elif capability == "information-gathering":
            passed = passed and "invented_information" not in broken
        elif capability == "error-recovery" and task.auth == "old_email":
            recovered = any(
                c.name in AUTH_TOOLS and c.error is None and c.output == task.user_id for c in calls
            )
            passed = passed and recovered
        labels[capability] = ok(passed)
    return labels
