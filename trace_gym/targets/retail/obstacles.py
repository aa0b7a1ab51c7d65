"""A request's obstacle and the read that shows it (issue 52): a refusal - the variant unavailable, the gift card
short, the order not found - is checked only once that read was made. The verifier fails a refusal said before
it (``informed``), the labels name precondition-checking, and the scripted user reacts to a report only after
it (as a person on the phone hears "let me check ... it's out of stock", not a guess)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trace_gym.core.env import CallRecord
from trace_gym.targets.retail.tasks import Request, Task

if TYPE_CHECKING:
    from trace_gym.targets.retail.user import UserRecords

ORDER_ID = re.compile(r"#W\d{7}\b")


# The fact a request's obstacle makes the user give (the agent reported the obstacle), by obstacle.
OBSTACLE_FACT = {"unavailable": "fallback", "gift_card": "other_payment", "wrong_order_id": "order_hint"}


def refusal_read(task: Task, request: Request) -> tuple[str, str, bool] | None:
    """The read whose answer shows the request's obstacle, as (tool, key, failed): the product whose variant
    is unavailable, the user's gift card balance, the lookup of the order id that does not exist (a failed
    read); None for a request with no obstacle."""
    if request.obstacle == "unavailable":
        fallback = request.writes[0].args["new_item_ids"][0]  # the first change is the one made unavailable
        products = task.initial_state["products"]
        return "get_product_details", next(p for p, v in products.items() if fallback in v["variants"]), False
    if request.obstacle == "gift_card":
        return "get_user_details", task.user_id, False
    if request.obstacle == "wrong_order_id":
        return "get_order_details", ORDER_ID.findall(request.intro)[0], True
    return None


def refusal_reported(request: Request, user: UserRecords, index: int) -> int | None:
    """The agent turn whose message made the user give the fact of request ``index``'s obstacle (the agent
    reported it), or None. Read from what the user said while the request was current (two requests may have
    a fallback each); an LLM-played user, whose words vary, by the turn its fact was first told."""
    name = OBSTACLE_FACT.get(request.obstacle or "")
    fact = next((f for f in request.facts if f.name == name), None)
    if fact is None:
        return None
    turns = {turn for turn, _ in user.heard_during(index)}
    said = [turn for turn, text in user.said if turn in turns and fact.value in text]
    if said:
        return min(said)
    told = user.told.get(fact.name)
    return told if told in turns else None


def refusal_shown(task: Task, calls: Sequence[CallRecord], request: Request, turn: float) -> bool:
    """The read showing the request's obstacle (:func:`refusal_read`) came before ``turn``."""
    read = refusal_read(task, request)
    if read is None:
        return True
    tool, key, failed = read
    return any(
        c.name == tool
        and (c.error == "precondition" if failed else c.error is None)
        and key in c.arguments.values()
        and c.turn < turn
        for c in calls
    )
