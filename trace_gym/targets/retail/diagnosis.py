"""Step 1's labels by cause (issue 28): decision points, what "reached" means, and the first failure.

A capability is judged only where the trajectory reached its *decision point*, the step where the oracle
exercises it (:func:`decision_points` gives their indexes into the oracle's actions, the capability-env
protocol). Each point has a trigger in the trajectory, the agent's action that needs the capability:

* information-gathering: an authentication call (the identity must have been said), a write (the facts it
  depends on must have been told);
* precondition-checking: a write attempt, or the first figure stated for a request (the request's reads must
  come before it), an obstacle reported (a refusal: the read that shows it must come before it, issue 52);
* precise-arguments: a write attempt (tool and arguments equal to an expected write of the current request),
  a write call the schema rejected;
* structured-reasoning: a write on another of the user's orders in a request whose order is found by
  reasoning, the first figure stated for a request (it must be the right one);
* error-recovery: after the failed authentication, the next authentication or user-data call (it must
  recover); a write on an obstacle request (the obstacle's answer must have been heard);
* policy-adherence: a write attempt (confirmed, allowed), any broken rule, a push or transfer request the
  agent acted on after it was raised (refused, transferred);
* multi-step-completion: a later request the agent answered after it was raised (not with a goodbye).

A point with no trigger (the agent stopped, ran out of turns, was still busy with an earlier request) is not
reached: its capability is ``NA``. The *first failure* is the earliest triggered point where the agent
deviated; its capability is ``LACKING``, every capability with a point passed before it ``PRESENT``, the rest
``NA`` (after the first deviation the trajectory is off the oracle's path and later points judge nothing).
A failed episode with no first failure is explained by its outcome alone (out of turns, stopped, invalid-action
limit), reported beside the table, never as a capability.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trace_gym.core.env import CallRecord
from trace_gym.targets.retail.facts import _right, answer
from trace_gym.targets.retail.obstacles import refusal_read, refusal_reported, refusal_shown
from trace_gym.targets.retail.tasks import Request, Task
from trace_gym.targets.retail.tools import WRITE_TOOLS
from trace_gym.targets.retail.user import UserRecords

NA, PRESENT, LACKING = "NA", "PRESENT", "LACKING"
INF = math.inf
# Which capability a deviation is charged to when several points trigger on one turn (the most specific cause).
PRIORITY = (
    "multi-step-completion",
    "information-gathering",
    "precondition-checking",
    "error-recovery",
    "structured-reasoning",
    "precise-arguments",
    "policy-adherence",
)
CONFIRM_SUFFIX = "Do you confirm (yes/no)?"
AUTH_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")


@dataclass(frozen=True)
class Point:
    """A decision point the trajectory reached: at ``turn`` (agent turn, 1-based) ``capability`` was needed."""

    capability: str
    turn: int
    deviated: bool
    evidence: str
    request: int = -1  # the request it belongs to (-1: authentication)

    def key(self) -> tuple[int, int]:
        return (self.turn, PRIORITY.index(self.capability))


@dataclass(frozen=True)
class Diagnosis:
    labels: dict[str, str]
    first_failure: dict[str, Any] | None
    points: list[Point]


def normal_arguments(args: dict[str, Any]) -> str:
    """Arguments compared up to the order of the (item, new item) pairs."""
    if "item_ids" in args:
        pairs = sorted(zip(args["item_ids"], args.get("new_item_ids", args["item_ids"]), strict=False))
        args = {**args, "item_ids": [p[0] for p in pairs]} | (
            {"new_item_ids": [p[1] for p in pairs]} if "new_item_ids" in args else {}
        )
    return repr(sorted(args.items()))


def attempted(call: CallRecord) -> bool:
    """The call reached the world (well-formed and a known tool), whether or not it was refused."""
    return call.error not in ("parse", "unknown_tool", "schema")


def diagnose(
    task: Task,
    calls: Sequence[CallRecord],
    user: UserRecords,
    events: Sequence[tuple[int, str]],
    resolved: Sequence[bool],
    ended: bool = False,
) -> Diagnosis:
    """Labels by decision point and the first failure (see the module doc). ``events`` are the broken rules
    with their turns (``verifier.violation_events``), ``resolved[i]`` whether request ``i`` was resolved;
    ``ended``: the conversation ended with the agent still talking (not at a turn or invalid-action limit),
    so an unresolved request was given up at its next decision point."""
    points: list[Point] = []
    heard = list(user.heard)
    active = sorted({t for t, text in heard if text.strip()} | {c.turn for c in calls})

    def raised(index: int) -> float:
        if index == 0:
            return 0
        if index >= len(user.starts):
            return INF
        start = user.starts[index]
        return heard[start - 1][0] if start > 0 else 0

    def span(index: int) -> tuple[float, float]:
        return raised(index), raised(index + 1)

    def inside(turn: float, index: int) -> bool:
        lo, hi = span(index)
        return lo < turn <= hi

    # ---- authentication ---------------------------------------------------------------------------------------
    invented = {t for t, rule in events if rule == "invented_information"}
    auth = [c for c in calls if c.name in AUTH_TOOLS and attempted(c) and c.error is None]
    if auth:
        t = auth[0].turn
        points.append(
            Point(
                "information-gathering",
                t,
                t in invented,
                f"{auth[0].name} with an identity the user never said",
            )
        )
    failed_auth = [c for c in calls if c.name in AUTH_TOOLS and c.error is not None and attempted(c)]
    if task.auth == "old_email" and failed_auth:
        after = [
            c
            for c in calls
            if c.turn > failed_auth[0].turn
            and (c.name in AUTH_TOOLS or c.name in WRITE_TOOLS or c.name.startswith("get_"))
        ]
        if after:
            ok = any(
                c.name in AUTH_TOOLS and c.error is None and c.output == task.user_id
                for c in after
                if c.turn <= after[0].turn
            )
            points.append(
                Point(
                    "error-recovery",
                    after[0].turn,
                    not ok,
                    "went on without authenticating after the email was not found",
                )
            )
    # ---- the rules broken, each at its call -------------------------------------------------------------------
    for turn, rule in events:
        if rule == "invented_information":
            points.append(
                Point(
                    "information-gathering",
                    turn,
                    True,
                    "used a detail only the user knows before it was said",
                )
            )
        elif rule in ("refused_write", "unconfirmed_write"):
            continue  # judged at the write below (its request decides which capability)
        else:
            points.append(Point("policy-adherence", turn, True, f"broke the policy: {rule}"))
    # ---- each request the agent engaged with --------------------------------------------------------------------
    rules_at: dict[int, set[str]] = {}
    for turn, rule in events:
        rules_at.setdefault(turn, set()).add(rule)
    for index, request in enumerate(task.requests):
        lo, hi = span(index)
        if lo == INF:
            continue
        mine = [t for t in active if lo < t <= hi]
        if not mine:
            continue  # raised, but the agent never acted on it: not reached
        writes = [c for c in calls if c.name in WRITE_TOOLS and inside(c.turn, index)]
        tried = [c for c in writes if attempted(c)]
        stated_turn = _stated_turn(request, user, index)
        tool_turns = [c.turn for c in calls if inside(c.turn, index)]
        if index > 0:
            worked = bool(tool_turns) or stated_turn < INF or resolved[index]
            points.append(
                Point(
                    "multi-step-completion",
                    mine[0],
                    not worked,
                    f"answered request {index + 1} without working on it",
                )
            )
        before = len(points)
        _request_points(task, request, index, calls, user, tried, writes, stated_turn, mine, rules_at, points)
        points[before:] = [replace(p, request=index) for p in points[before:]]
    final = max([t for t, _ in heard] + [c.turn for c in calls], default=0)
    if ended and final and any(t == final and text.strip() for t, text in heard):  # still talking at the end
        gave_up = _given_up(task, calls, user, resolved, points, active, raised)
        if gave_up is not None:
            points.append(gave_up)
    return _labels(task, points)


def _given_up(task, calls, user, resolved, points, active, raised) -> Point | None:
    """The agent ended the conversation talking with a request unresolved and no deviation in it: it gave up
    at that request's first decision point it never passed (a point is passed by its oracle tool calls, or by
    the facts its questions ask for)."""
    authenticated = any(c.name in AUTH_TOOLS and c.error is None and c.output == task.user_id for c in calls)
    done_calls = {(c.name, _canonical(c.arguments)) for c in calls if c.error is None}
    oracle_points = sorted((i, c) for c, indexes in decision_points(task).items() for i in indexes)
    prefix = len(task.oracle) - sum(len(r.script) for r in task.requests)
    ranges = [(-1, 0, prefix)]
    position = prefix
    for index, request in enumerate(task.requests):
        ranges.append((index, position, position + len(request.script)))
        position += len(request.script)
    for index, lo, hi in ranges:
        unresolved = not authenticated if index < 0 else not resolved[index]
        if not unresolved or any(p.deviated and p.request == index for p in points):
            continue
        if index >= 0:
            start = raised(index)
            if start == INF:
                return None
        else:
            start = 0
        facts = task.identity_facts if index < 0 else task.requests[index].facts
        asked_told = all(
            f.name in user.told for f in facts if f.name not in ("fallback", "other_payment", "order_hint")
        )
        for oracle_index, capability in oracle_points:
            if not lo <= oracle_index < hi:
                continue
            action = task.oracle[oracle_index]
            tools = action.get("tool_calls") or []
            if tools and all(
                (c["function"]["name"], _canonical_text(c["function"]["arguments"])) in done_calls
                for c in tools
            ):
                continue
            asks = task.asks if index < 0 else task.requests[index].asks
            if (action.get("content") or "") in asks and asked_told and capability == "information-gathering":
                continue
            progress = [
                c.turn
                for c in calls
                if c.turn > start
                and c.error is None
                and (c.name, _canonical(c.arguments))
                in {
                    (t["function"]["name"], _canonical_text(t["function"]["arguments"]))
                    for a in task.oracle[lo:hi]
                    for t in a.get("tool_calls") or []
                }
            ]
            after = max(progress, default=start)
            turn = next((t for t in active if t > after), None)
            if turn is None:
                return None
            return Point(
                capability,
                turn,
                True,
                f"gave up: ended the conversation before this step ({capability})",
                index,
            )
        return None
    return None


def _canonical(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True)


def _canonical_text(arguments: str) -> str:
    try:
        return _canonical(json.loads(arguments))
    except ValueError:
        return arguments


def _stated_turn(request: Request, user: UserRecords, index: int) -> float:
    for turn, text in user.heard_during(index):
        if any(answer(need, text) for need in request.needs if need.kind != "refusal"):
            return turn
    return INF


def _read_before(calls: Sequence[CallRecord], reads: list[tuple[str, str]], turn: float) -> bool:
    return all(
        any(
            c.name == tool and c.error is None and key in c.arguments.values() and c.turn < turn
            for c in calls
        )
        for tool, key in reads
    )


def _request_points(task, request, index, calls, user, tried, writes, stated_turn, mine, rules_at, points):
    caps = request.capabilities
    name = f"request {index + 1} ({request.kind})"
    first_write = tried[0].turn if tried else INF
    # precondition-checking: the reads before the first write or figure
    trigger = min(first_write, stated_turn)
    if "precondition-checking" in caps and trigger < INF and request.reads:
        ok = _read_before(calls, request.reads, trigger)
        points.append(
            Point(
                "precondition-checking",
                int(trigger),
                not ok,
                f"{name}: acted or answered before reading the records",
            )
        )
    # a refusal (an obstacle reported) before the read that shows it: a guess, however right (issue 52)
    reported = refusal_reported(request, user, index)
    if reported is not None and refusal_read(task, request) is not None:
        capability = "precondition-checking" if "precondition-checking" in caps else "error-recovery"
        points.append(
            Point(
                capability,
                reported,
                not refusal_shown(task, calls, request, reported),
                f"{name}: reported the {request.obstacle} obstacle before the read that shows it",
            )
        )
    # schema-rejected write calls: wrong arguments
    for c in writes:
        if c.error == "schema":
            points.append(
                Point(
                    "precise-arguments", c.turn, True, f"{name}: {c.name} with arguments the schema rejects"
                )
            )
            break
    wanted = {(w.tool, normal_arguments(w.args)) for w in request.writes}
    user_orders = set(task.initial_state["users"][task.user_id]["orders"])
    obstacle_facts = {f.name for f in request.facts if f.name in ("fallback", "other_payment", "order_hint")}
    for c in tried:
        order_id = c.arguments.get("order_id")
        rules = rules_at.get(c.turn, set())
        if request.push == "status" or not request.writes:
            points.append(
                Point("policy-adherence", c.turn, True, f"{name}: {c.name} on a request no write may serve")
            )
            break
        if request.obstacle and obstacle_facts:
            missing = [f for f in obstacle_facts if user.told.get(f, c.turn) >= c.turn]
            points.append(
                Point(
                    "error-recovery",
                    c.turn,
                    bool(missing),
                    f"{name}: {c.name} without resolving the {request.obstacle} obstacle",
                )
            )
            if missing:
                break
        if request.reasoned and order_id != request.order_id and order_id in user_orders:
            points.append(
                Point(
                    "structured-reasoning",
                    c.turn,
                    True,
                    f"{name}: {c.name} on order {order_id}, not the one meant",
                )
            )
            break
        good = (c.name, normal_arguments(c.arguments)) in wanted
        points.append(
            Point(
                "precise-arguments",
                c.turn,
                not good,
                f"{name}: {c.name}({_short(c.arguments)}) differs from the expected write",
            )
        )
        if not good:
            break
        if "refused_write" in rules or "unconfirmed_write" in rules:
            points.append(
                Point(
                    "policy-adherence",
                    c.turn,
                    True,
                    f"{name}: {c.name} {'refused by the tools' if 'refused_write' in rules else 'without the user confirming it'}",
                )
            )
            break
        points.append(Point("policy-adherence", c.turn, False, ""))
    # a wrong figure: the first answer stated for a need
    if "structured-reasoning" in caps and stated_turn < INF:
        texts = [text for _, text in user.heard_during(index)]
        wrong = []
        for need in request.needs:
            if need.kind == "refusal":
                continue
            first = next((found for found in (answer(need, t) for t in texts) if found), None)
            if first is not None and not _right(need, first):
                wrong.append(f"{need.name} {sorted(map(str, first))} (expected {need.value})")
        points.append(
            Point(
                "structured-reasoning",
                int(stated_turn),
                bool(wrong),
                f"{name}: wrong figure " + "; ".join(wrong),
            )
        )
    # push and transfer requests: acted on after they were raised
    if request.push == "other_user":
        told = user.needs_told(index)
        points.append(
            Point(
                "policy-adherence",
                mine[-1] if not told else mine[0],
                not told,
                f"{name}: never refused the other person's order",
            )
        )
    elif request.push == "status" and stated_turn < INF:
        points.append(Point("policy-adherence", int(stated_turn), False, ""))
    if request.transfer:
        done = any(c.name == "transfer_to_human_agents" and c.error is None for c in calls)
        points.append(
            Point(
                "policy-adherence",
                mine[0] if done else mine[-1],
                not done,
                f"{name}: not transferred to a human agent",
            )
        )


def _short(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return text if len(text) <= 160 else text[:157] + "..."


def _labels(task: Task, points: list[Point]) -> Diagnosis:
    points = sorted(points, key=Point.key)
    first = next((p for p in points if p.deviated), None)
    labels = {c: NA for c in task.capabilities}
    for p in points:
        if first is not None and p.key() >= first.key():
            break
        if p.capability in labels:
            labels[p.capability] = PRESENT
    failure = None
    if first is not None:
        labels[first.capability] = LACKING
        failure = {"capability": first.capability, "turn": first.turn, "evidence": first.evidence}
    return Diagnosis(labels, failure, points)


# ---- the capability-env protocol: the oracle's decision points ---------------------------------------------------
def decision_points(task: Task) -> dict[str, list[int]]:
    """For each capability of the task, the indexes into ``task.oracle`` of the oracle's actions that exercise
    it, in order: the identity question (information-gathering; error-recovery too after an unknown email),
    per request its first action (multi-step-completion, later requests), its questions
    (information-gathering), its first read of the records it is about (precondition-checking), the
    obstacle's explanation (error-recovery), the confirmation that states the figure (policy-adherence,
    structured-reasoning) or the answer of a question (structured-reasoning), the write (precise-arguments),
    the refusal of a push and the transfer (policy-adherence)."""
    points: dict[str, list[int]] = {}

    def add(capability: str, index: int, request: Request | None = None) -> None:
        needed = task.capabilities if request is None else request.capabilities
        if capability in needed and capability in task.capabilities:
            points.setdefault(capability, []).append(index)

    prefix = len(task.oracle) - sum(len(r.script) for r in task.requests)  # authentication + user details
    for index in range(prefix):
        if (task.oracle[index].get("content") or "") in task.asks:
            add("information-gathering", index)
            if task.auth == "old_email":
                add("error-recovery", index)
    position = prefix
    for number, request in enumerate(task.requests):
        targets = {key for _, key in request.reads}
        first: set[str] = set()  # capabilities this request already has a point for (one per request)

        def once(capability: str, index: int, request: Request = request, first: set[str] = first) -> None:
            if capability not in first:
                first.add(capability)
                add(capability, index, request)

        for offset, action in enumerate(request.script):
            index = position + offset
            content = action.get("content") or ""
            calls = action.get("tool_calls") or []
            names = [c["function"]["name"] for c in calls]
            if offset == 0 and number > 0:
                add("multi-step-completion", index)
            if content in request.asks:
                add("information-gathering", index, request)
            if any(n.startswith("get_") and any(t in c["function"]["arguments"] for t in targets)
                   for n, c in zip(names, calls, strict=True)):  # fmt: skip
                once("precondition-checking", index)
            if content.endswith(CONFIRM_SUFFIX):
                add("policy-adherence", index, request)
                once("structured-reasoning", index)
            if any(n in WRITE_TOOLS for n in names):
                add("precise-arguments", index, request)
            if "transfer_to_human_agents" in names:
                add("policy-adherence", index, request)
            if request.push and not calls and offset == (1 if request.push == "status" else 0):
                add("policy-adherence", index, request)
            obstacle_say = request.obstacle and not calls and offset > 0 and content not in request.asks
            if obstacle_say and not content.endswith(CONFIRM_SUFFIX):
                once("error-recovery", index)
            if not request.writes and request.needs and not calls:
                once("structured-reasoning", index)
        position += len(request.script)
    return points
