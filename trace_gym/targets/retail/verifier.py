"""The retail verifier: reward, its components, and the capability labels of step 1.

Reward is 1.0 only when every component is 1.0:

* ``final_state``: the database equals the expected one (every requested change, nothing else);
* ``facts``: every required fact was told after its request was raised, as the *first* answer the agent
  stated for it, one figure (:func:`~trace_gym.targets.retail.facts.told`): a hedge ("either $A or $B") or a
  correction after a wrong figure tells nothing; a refusal says whose account it is;
* ``no_amount_spraying``: no agent message lists more than
  :data:`~trace_gym.targets.retail.facts.MAX_AMOUNTS_PER_MESSAGE` distinct amounts;
* ``informed``: each write, and each required fact, came after the reads its request needs (the order, the
  products of changed items, the orders of a total): an agent that acts or answers without looking fails;
* ``transfer``: a transfer happened if and only if the task needs one;
* ``policy``: no rule was broken (:data:`RULES`).

One rule for writes: an *attempted* write (a well-formed call of a write tool, whether the tool carried it out
or refused it) that breaks the policy is a violation. So a write the tools refuse (the order's status, an
unavailable variant, a short gift card) is ``refused_write``, and every attempted write needs the user's yes
to a proposal that named it (``unconfirmed_write``). Malformed calls (parse, unknown tool, schema) are
invalid actions, not attempts.

Labels (``info["requirements"]``) are computed per request and only over requests the agent engaged with (the
first one always; a later one once the agent made any tool call after it was raised), so an agent that stops
early is LACKING multi-step-completion, not everything the later requests would have needed. Each kind of
failure maps to one capability: confirmation, refused writes, other users, transfers and refusals to
policy-adherence; invented values to information-gathering; missing reads to precondition-checking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trace_gym.core.env import CallRecord, Evaluation, Label
from trace_gym.targets.retail.facts import sprayed, told
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


def attempted(call: CallRecord) -> bool:
    """The call reached the world (well-formed and a known tool), whether or not it was refused."""
    return call.error not in ("parse", "unknown_tool", "schema")


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
    found: list[str] = []
    authenticated = False
    confirmations: list[tuple[Any, ...]] = _confirmed(user)
    writes_by_order = {w.args["order_id"]: w for r in task.requests for w in r.writes}
    for call in calls:
        if not attempted(call):
            continue
        if call.name in AUTH_TOOLS and call.error is None:
            if call.output != task.user_id:
                found.append("other_user")
                continue
            identity = call.arguments.get("email") or call.arguments.get("zip", "")
            if not _said_before(user, str(identity), call.turn):
                found.append("invented_information")
            authenticated = True
            continue
        if call.name in USER_DATA_TOOLS and not authenticated:
            found.append("before_authentication")
        if (
            call.name == "get_user_details"
            and call.error is None
            and call.arguments.get("user_id") != task.user_id
        ):
            found.append("other_user")
        order_id = call.arguments.get("order_id")
        owner = _owner(task, order_id)
        if owner is not None and owner != task.user_id and (call.name in WRITE_TOOLS or call.error is None):
            found.append("other_user")
        if call.name == "transfer_to_human_agents" and call.error is None and not task.transfer_required:
            found.append("unnecessary_transfer")
        if call.name in WRITE_TOOLS:
            if call.error is not None:
                found.append("refused_write")
            left = _covered(confirmations, call)
            if left is None:
                found.append("unconfirmed_write")
            else:
                confirmations = left
            expected = writes_by_order.get(order_id)
            if expected and any(user.told.get(fact, call.turn) >= call.turn for fact in expected.depends):
                found.append("invented_information")
    return sorted(set(found))


def _normal(args: dict[str, Any]) -> str:
    """Arguments compared up to the order of the (item, new item) pairs."""
    if "item_ids" in args:
        pairs = sorted(zip(args["item_ids"], args.get("new_item_ids", args["item_ids"]), strict=False))
        args = {**args, "item_ids": [p[0] for p in pairs]} | (
            {"new_item_ids": [p[1] for p in pairs]} if "new_item_ids" in args else {}
        )
    return repr(sorted(args.items()))


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


def informed(task: Task, calls: Sequence[CallRecord], user: UserRecords, index: int) -> bool:
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


def evaluate(task: Task, state: State, calls: Sequence[CallRecord], user: UserRecords) -> Evaluation:
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
    user: UserRecords,
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
