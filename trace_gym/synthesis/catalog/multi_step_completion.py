"""Multi-step completion: carry out every part of a request with several parts.

The user lists two to four independent changes, each fully specified (order id, reason, address, item,
payment method), in one message. Nothing is hidden and nothing is hard; the agent must simply do all of them
before it says it is done. Stopping after the first part leaves the other orders unchanged and scores 0.
"""

from __future__ import annotations

import numpy as np

from trace_gym.synthesis.catalog.base import (
    MS,
    Builder,
    CapabilityEnv,
    Scenario,
    Step,
    Write,
    address_phrase,
    method_phrase,
    say,
    write_step,
)
from trace_gym.targets.retail.tools import CANCEL_REASONS

ORDINALS = ("First", "Second", "Third", "Fourth")


class MultiStepCompletionEnv(CapabilityEnv):
    """Complete every one of two to four fully specified changes the user asks for in one message."""

    capability = MS
    description = "Carry out every part of a two- to four-part request before saying it is done."
    tool_names = (
        "get_order_details",
        "cancel_pending_order",
        "modify_pending_order_address",
        "return_delivered_order_items",
        "calculate",
    )
    policy_headings = ("Allowed actions",)
    key_components = ("final_state",)
    dependencies = {"precise-arguments": "every part ends in a write whose arguments must be exact"}
    hint = (
        "Make a list of every change the user asked for and work through it; before saying you are done, "
        "check that each one was carried out."
    )
    isolates = "completing every part of a multi-part request instead of stopping after the first"
    transfer_reason = (
        "retail users raise one to three requests in a conversation; retail failures include agents that "
        "handle the first request and stop"
    )
    levels = {1: "two parts", 2: "three parts", 3: "four parts"}

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        b = Builder(rng, n_products=5)
        parts: list[tuple[str, Write]] = []
        for _ in range(difficulty + 1):
            kind = b.pick(("cancel", "address", "return"))
            if kind == "cancel":
                order = b.order("pending", int(rng.integers(1, 3)))
                reason = b.pick(CANCEL_REASONS)
                text = f"cancel order {order['order_id']} (reason: '{reason}')"
                write = Write("cancel_pending_order", {"order_id": order["order_id"], "reason": reason})
            elif kind == "address":
                order = b.order("pending", int(rng.integers(1, 3)))
                address = b.address()
                text = (
                    f"change the shipping address of order {order['order_id']} to {address_phrase(address)}"
                )
                write = Write("modify_pending_order_address", {"order_id": order["order_id"], **address})
            else:
                order = b.order("delivered", int(rng.integers(1, 3)))
                item = b.pick(order["items"])
                method = b.user["payment_methods"][order["payment_history"][0]["payment_method_id"]]
                text = (
                    f"return the {item['name']} of order {order['order_id']}, refunded to "
                    f"{method_phrase(method)}"
                )
                write = Write(
                    "return_delivered_order_items",
                    {
                        "order_id": order["order_id"],
                        "item_ids": [item["item_id"]],
                        "payment_method_id": method["id"],
                    },
                )
            parts.append((text, write))
        requests = [f"{ORDINALS[i]}, please {text}." for i, (text, _) in enumerate(parts)]
        opening = f"Hi, I have {len(parts)} things to sort out. " + " ".join(requests)
        request_steps = [[write_step(write, b)] for _, write in parts]
        request_steps[-1].append(Step(say("All done: every change you asked for has been made.")))
        scenario = Scenario(
            user_id=b.user["user_id"],
            state=b.state,
            opening=opening,
            requests=requests,
            request_steps=request_steps,
            writes=[write for _, write in parts],
        )
        return scenario, b
