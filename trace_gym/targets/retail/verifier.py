"""The retail verifier: reward, its components, and the capability labels of step 1.

Reward is 1.0 only when all four components are 1.0:

* ``final_state``: the database's hash equals the expected one (every requested change, nothing else);
* ``facts``: every fact the task requires (refund amounts, price differences, totals, the status that makes
  a request impossible) was told to the user after the request was raised (amounts matched by value);
* ``transfer``: a transfer happened if and only if the task needs one;
* ``policy``: no rule was broken: ``before_authentication`` (a user-data tool called before the user was
  authenticated), ``other_user`` (another user's account or orders read or acted on, or authenticated),
  ``unconfirmed_write`` (a write without a "yes" of the user to that order since the last write on it),
  ``invented_information`` (identity or a detail only the user knows used before the user said it),
  ``unnecessary_transfer``.

``requirements`` labels each capability the task declares PRESENT or LACKING from the trajectory (see
:func:`requirements`); they are the algorithmic labels of the capability analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from trace_gym.core.env import CallRecord, Evaluation, Label
from trace_gym.targets.retail.tasks import Request, Task
from trace_gym.targets.retail.tools import WRITE_TOOLS
from trace_gym.targets.retail.user import RetailUser
from trace_gym.worlds import State, state_hash

USER_DATA_TOOLS = frozenset(
    {"get_user_details", "get_order_details", "transfer_to_human_agents", *WRITE_TOOLS}
)
AUTH_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")


def attempted(call: CallRecord) -> bool:
    """The call reached the world (well-formed and a known tool), whether or not it was refused."""
    return call.error not in ("parse", "unknown_tool", "schema")


def _owner(task: Task, order_id: Any) -> str | None:
    order = task.initial_state["orders"].get(order_id) if isinstance(order_id, str) else None
    return order["user_id"] if order else None


def _said_before(user: RetailUser, value: str, turn: int) -> bool:
    return any(value.strip().lower() in text.lower() for t, text in user.said if t < turn)


# Consumes the confirmation that covers a successful write: the confirmations left, or None when none covers it.
ConfirmationRule = Callable[[list[tuple[Any, ...]], CallRecord], "list[tuple[Any, ...]] | None"]


def _one_yes_per_write(
    confirmations: list[tuple[Any, ...]], call: CallRecord
) -> list[tuple[Any, ...]] | None:
    """v0: any earlier yes on the order covers the write; each yes covers one write."""
    order_id = call.arguments.get("order_id")
    index = next((i for i, c in enumerate(confirmations) if c[1] == order_id and c[0] < call.turn), None)
    return None if index is None else confirmations[:index] + confirmations[index + 1 :]


def violations(task: Task, calls: Sequence[CallRecord], user: RetailUser) -> list[str]:
    return check_violations(task, calls, user, list(user.confirmations), _one_yes_per_write)


def check_violations(
    task: Task,
    calls: Sequence[CallRecord],
    user: RetailUser,
    confirmations: list[tuple[Any, ...]],
    confirmed: ConfirmationRule,
) -> list[str]:
    """Policy violations of a trajectory; ``confirmed`` is the version's rule for which yes covers a write."""
    found: list[str] = []
    authenticated = False
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
        if call.name in WRITE_TOOLS and call.error is None:
            left = confirmed(confirmations, call)
            if left is None:
                found.append("unconfirmed_write")
            else:
                confirmations = left
            expected = writes_by_order.get(order_id)
            if expected and any(user.told.get(fact, call.turn) >= call.turn for fact in expected.depends):
                found.append("invented_information")
    return sorted(set(found))


def evaluate(task: Task, state: State, calls: Sequence[CallRecord], user: RetailUser) -> Evaluation:
    broken = violations(task, calls, user)
    transferred = any(c.name == "transfer_to_human_agents" and c.error is None for c in calls)
    components = {
        "final_state": float(state_hash(state) == state_hash(task.expected_state)),
        "facts": float(all(user.needs_told(i) for i in range(len(task.requests)))),
        "transfer": float(transferred == task.transfer_required),
        "policy": float(not broken),
    }
    reward = float(all(value == 1.0 for value in components.values()))
    return Evaluation(reward, components, requirements(task, state, calls, user, broken, components))


def _normal(args: dict[str, Any]) -> str:
    """Arguments compared up to the order of the (item, new item) pairs."""
    if "item_ids" in args:
        pairs = sorted(zip(args["item_ids"], args.get("new_item_ids", args["item_ids"]), strict=False))
        args = {**args, "item_ids": [p[0] for p in pairs]} | (
            {"new_item_ids": [p[1] for p in pairs]} if "new_item_ids" in args else {}
        )
    return repr(sorted(args.items()))


def requirements(
    task: Task,
    state: State,
    calls: Sequence[CallRecord],
    user: RetailUser,
    broken: list[str],
    components: dict[str, float],
) -> dict[str, Label]:
    """PRESENT / LACKING for each capability the task declares; a capability holds when every request that
    requires it shows it."""

    def ok(passed: bool) -> Label:
        return "PRESENT" if passed else "LACKING"

    def succeeded_before(tool: str, key: str, turn: float) -> bool:
        return any(
            c.name == tool and c.error is None and key in c.arguments.values() and c.turn < turn
            for c in calls
        )

    def on_order(order_id: str | None) -> list[CallRecord]:
        return [
            c
            for c in calls
            if c.name in WRITE_TOOLS and attempted(c) and c.arguments.get("order_id") == order_id
        ]

    def told_turn(index: int) -> float:
        """Turn of the first message after the request was raised that told all of its needs."""
        request = task.requests[index]
        for turn, text in user.heard_since(index):
            if request.needs and all(need.told_in(text) for need in request.needs):
                return turn
        return float("inf")

    def precondition(index: int, request: Request) -> bool:
        tries = on_order(request.order_id)
        if request.push == "status":
            first = told_turn(index)
            return (
                not tries
                and first < float("inf")
                and succeeded_before("get_order_details", request.order_id or "", first)
            )
        if not tries:
            return False
        return all(c.error is None for c in tries) and all(
            succeeded_before(tool, key, tries[0].turn) for tool, key in request.reads
        )

    def precise(request: Request) -> bool:
        done = [c for c in on_order(request.order_id) if c.error is None]
        wanted = sorted(_normal(w.args) for w in request.writes)
        return sorted(_normal(c.arguments) for c in done) == wanted and all(
            c.name == w.tool for c, w in zip(done, request.writes, strict=False)
        )

    def gathered(request: Request) -> bool:
        done = [c for c in on_order(request.order_id) if c.error is None]
        if not done or not user.effect_done(request):
            return False
        return all(
            user.told.get(fact, done[0].turn) < done[0].turn for w in request.writes for fact in w.depends
        )

    def policy(i: int, request: Request) -> bool:
        if request.push == "status":
            return not on_order(request.order_id) and user.needs_told(i)
        if request.push == "other_user":
            return not any(
                attempted(c) and c.arguments.get("order_id") == request.forbidden_order for c in calls
            )
        if request.transfer:
            return components["transfer"] == 1.0
        return True

    checks = {
        "precondition-checking": lambda i, r: precondition(i, r),
        "precise-arguments": lambda i, r: precise(r),
        "structured-reasoning": lambda i, r: user.needs_told(i) and user.effect_done(r),
        "information-gathering": lambda i, r: gathered(r),
        "error-recovery": lambda i, r: user.needs_told(i) and user.effect_done(r),
        "policy-adherence": lambda i, r: policy(i, r),
    }
    labels: dict[str, Label] = {}
    for capability in task.capabilities:
        if capability == "multi-step-completion":
            labels[capability] = ok(all(user.effect_done(r) for r in task.requests))
            continue
        passed = all(
            checks[capability](i, r) for i, r in enumerate(task.requests) if capability in r.capabilities
        )
        if capability == "precise-arguments":
            passed = passed and not any(c.error == "schema" for c in calls)
        elif capability == "policy-adherence":
            passed = passed and not broken
        elif capability == "error-recovery" and task.auth == "old_email":
            recovered = any(
                c.name in AUTH_TOOLS and c.error is None and c.output == task.user_id for c in calls
            )
            passed = passed and recovered and components["final_state"] == 1.0 and components["facts"] == 1.0
        labels[capability] = ok(passed)
    return labels
