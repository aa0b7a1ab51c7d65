"""Precondition checking: read the record a write depends on, and act only when its state allows it.

The user asks for a cancellation, a return or an exchange of a named order. Half of the instances are
allowed; in the other half the order's status (or the new variant's availability) forbids the action, and the
agent must say why instead of trying. The verifier requires the checking read before the write or the
refusal, and counts a write the tools refuse as a violation, so a blind attempt never scores.
"""

from __future__ import annotations

import numpy as np

from trace_gym.synthesis.catalog.base import (
    PA,
    PC,
    STATUS_WORDS,
    Builder,
    CapabilityEnv,
    Scenario,
    Step,
    Tell,
    Write,
    call,
    check_read,
    method_phrase,
    options_phrase,
    say,
    write_step,
)
from trace_gym.targets.retail.tools import CANCEL_REASONS, TOOLS
from trace_gym.worlds import World, clone

UNAVAILABLE = r"\b(not available|unavailable|out of stock|sold out|no longer available)\b"
NEEDED = {"cancel": "pending", "return": "delivered", "exchange": "delivered"}
KINDS = {1: ("cancel",), 2: ("cancel", "return"), 3: ("cancel", "return", "exchange")}


class PreconditionCheckingEnv(CapabilityEnv):
    """Check an order's status (and a variant's availability) before cancelling, returning or exchanging."""

    capability = PC
    description = (
        "Read the order (and product) before a write; refuse, with the reason, what its state forbids."
    )
    tool_names = (
        "get_order_details",
        "get_product_details",
        "cancel_pending_order",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
        "calculate",
    )
    policy_headings = ("Allowed actions",)
    key_components = ("policy",)
    dependencies = {PA: "an allowed request ends in a write whose arguments must be exact"}
    hint = (
        "Before any change, read the order with get_order_details and check its status against the policy; "
        "for an exchange, read the product and check that the new variant is available. If the state does "
        "not allow the request, do not call the tool: tell the user why."
    )
    isolates = (
        "checking a write's preconditions (order status, variant availability) by reading the record first, "
        "and refusing with the reason instead of attempting a write the state forbids"
    )
    transfer_reason = (
        "retail's writes all carry declared preconditions (order.status == pending / delivered, the new item "
        "available); failures on retail include writes attempted on the wrong status and refusals without "
        "reading the order"
    )
    levels = {
        1: "cancellations only",
        2: "cancellations and returns",
        3: "cancellations, returns and exchanges (exchanges also need the new variant to be available)",
    }

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        b = Builder(rng)
        kind = b.pick(KINDS[difficulty])
        allowed = b.chance(0.5)
        blocker = "status"
        if kind == "exchange" and not allowed and b.chance(0.5):
            blocker = "availability"
        needed = NEEDED[kind]
        if allowed or blocker == "availability":
            status = needed
        else:
            status = b.pick([s for s in STATUS_WORDS if s != needed])
        for _ in range(int(rng.integers(1, 3))):  # other orders of the user, for a realistic account
            b.order(b.pick(STATUS_WORDS), int(rng.integers(1, 3)))
        order = b.order(status, int(rng.integers(1, 3)))
        oid = order["order_id"]
        original = b.user["payment_methods"][order["payment_history"][0]["payment_method_id"]]
        item = b.pick(order["items"])
        reads: tuple[tuple[str, str], ...] = (("get_order_details", oid),)
        extra_read: list[Step] = []
        if kind == "cancel":
            reason = b.pick(CANCEL_REASONS)
            opening = f"Hi, please cancel my order {oid}. The reason is '{reason}'."
            write = Write("cancel_pending_order", {"order_id": oid, "reason": reason})
            done = f"Your order {oid} has been cancelled."
        elif kind == "return":
            opening = (
                f"Hi, I want to return the {item['name']} of my order {oid}. Please refund it to "
                f"{method_phrase(original)}."
            )
            write = Write(
                "return_delivered_order_items",
                {"order_id": oid, "item_ids": [item["item_id"]], "payment_method_id": original["id"]},
            )
            done = f"The return of the {item['name']} of order {oid} is requested."
        else:
            product, _ = b.variant(item["item_id"])
            others = sorted(v for v in product["variants"] if v != item["item_id"])
            new = product["variants"][b.pick(others)]
            new["available"] = allowed or blocker != "availability"
            if original["source"] == "gift_card":  # a short balance would be a second, unrelated blocker
                original["balance"] = 2000.0
            opening = (
                f"Hi, I want to exchange the {item['name']} of my order {oid} for the one with "
                f"{options_phrase(new['options'])}. Use {method_phrase(original)} for any price difference."
            )
            write = Write(
                "exchange_delivered_order_items",
                {
                    "order_id": oid,
                    "item_ids": [item["item_id"]],
                    "new_item_ids": [new["item_id"]],
                    "payment_method_id": original["id"],
                },
            )
            done = f"The exchange of the {item['name']} of order {oid} is requested."
            reads += (("get_product_details", product["product_id"]),)
            extra_read = [check_read("get_product_details", "product_id", product["product_id"])]
        scenario = Scenario(
            user_id=b.user["user_id"],
            state=b.state,
            opening=opening,
            requests=[opening],
            request_steps=[],
            details={"kind": kind, "allowed": allowed, "blocker": None if allowed else blocker},
        )
        if allowed:
            scenario.writes = [write]
            scenario.reads_before_write = {oid: reads}
            steps = [
                check_read("get_order_details", "order_id", oid),
                *extra_read,
                write_step(write, b),
                Step(say(done)),
            ]
        else:
            refused = World(list(TOOLS.values()), clone(b.state)).call(write.tool, write.args)
            assert refused.error == "precondition", refused
            blind = (call(write.tool, **write.args), say(f"Sorry, I could not do that. {refused.output}"))
            if blocker == "status":
                tell = Tell("status", "pattern", rf"\b{status}\b", exclusive=STATUS_WORDS)
                reason = f"it is {status}, and only {needed} orders allow this"
            else:
                tell = Tell("unavailable", "pattern", UNAVAILABLE)
                reason = "the variant you want is not available"
            scenario.tells = [tell]
            scenario.reads_before_tell = reads
            steps = [
                check_read("get_order_details", "order_id", oid, blind=blind),
                *extra_read,
                Step(say(f"I am sorry, I cannot do this for order {oid}: {reason}."), {PC: ()}),
            ]
        scenario.request_steps = [steps]
        return scenario, b
