"""Information gathering: ask the user for what only the user knows before acting.

The user's opening leaves out one to three facts the write needs (which order, the reason, the new address,
which item, where the refund goes); the user tells each one when asked. The account has several orders the
request could be about, so nothing can be inferred. A write that uses a fact the user has not told yet is
invented information and scores 0, even when the guess happens to be right.
"""

from __future__ import annotations

import numpy as np

from trace_gym.synthesis.catalog.base import (
    IG,
    Builder,
    CapabilityEnv,
    Fact,
    Scenario,
    Step,
    Write,
    address_phrase,
    ask,
    call,
    method_phrase,
    say,
    write_step,
)
from trace_gym.targets.retail.tools import CANCEL_REASONS

# What the agent asks, and the words of a question that make the user tell it.
QUESTIONS = {
    "order": ("which order it is (the order id)", ("order id", "order number", "which order")),
    "reason": ("the reason for the cancellation", ("reason", "why")),
    "address": ("the new shipping address", ("address",)),
    "item": ("which item you want to return", ("which item", "what item", "which product")),
    "payment": (
        "which payment method the refund should go to",
        ("payment method", "refund to", "refunded to"),
    ),
}
FACTS = {
    "cancel": ("order", "reason"),
    "address": ("order", "address"),
    "return": ("order", "item", "payment"),
}


class InformationGatheringEnv(CapabilityEnv):
    """Ask the user for the facts only they know (order, reason, address, item, refund method), then act."""

    capability = IG
    description = "Ask the user for the missing facts (order, reason, address, item, refund method) first."
    tool_names = (
        "get_user_details",
        "get_order_details",
        "cancel_pending_order",
        "modify_pending_order_address",
        "return_delivered_order_items",
    )
    policy_headings = ("Information",)
    key_components = ("final_state", "policy")
    dependencies = {"precise-arguments": "the request ends in a write whose arguments must be exact"}
    hint = (
        "Work out which details the action needs that only the user knows (which order, their reason, the new "
        "address, which item, where a refund goes), ask for all of them, and act only on what the user said."
    )
    isolates = "asking the user for the facts a write needs instead of guessing them"
    transfer_reason = (
        "retail users reveal their order, reason, address and payment method only when asked; retail "
        "failures include writes made with guessed details"
    )
    levels = {1: "one missing fact", 2: "two missing facts", 3: "a return with three missing facts"}

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        b = Builder(rng, n_products=5)
        kind = "return" if difficulty == 3 else b.pick(("cancel", "address", "return"))
        status = "delivered" if kind == "return" else "pending"
        candidates = [b.order(status, int(rng.integers(2, 4))) for _ in range(int(rng.integers(2, 4)))]
        b.order(b.pick(("processed", "cancelled")))
        order = b.pick(candidates)
        oid = order["order_id"]
        names = list(FACTS[kind])
        missing = [
            names[int(i)]
            for i in sorted(rng.choice(len(names), size=min(difficulty, len(names)), replace=False))
        ]
        values: dict[str, str] = {"order": f"It is order {oid}."}
        given: dict[str, str] = {"order": f"my order {oid}"}
        if kind == "cancel":
            reason = b.pick(CANCEL_REASONS)
            values["reason"] = f"The reason is '{reason}'."
            given["reason"] = f"(reason: '{reason}')"
            write = Write("cancel_pending_order", {"order_id": oid, "reason": reason})
            default = {"order_id": candidates[0]["order_id"], "reason": CANCEL_REASONS[0]}
            goal = "cancel {order} {reason}"
        elif kind == "address":
            address = b.address()
            values["address"] = f"The new address is {address_phrase(address)}."
            given["address"] = f"to {address_phrase(address)}"
            write = Write("modify_pending_order_address", {"order_id": oid, **address})
            default = {"order_id": candidates[0]["order_id"], **b.user["address"]}
            goal = "change the shipping address of {order} {address}"
        else:
            item = b.pick(order["items"])
            original = order["payment_history"][0]["payment_method_id"]
            allowed = sorted(
                m
                for m, record in b.user["payment_methods"].items()
                if m == original or record["source"] == "gift_card"
            )
            method = b.user["payment_methods"][b.pick(allowed)]
            values["item"] = f"It is the {item['name']}."
            given["item"] = f"the {item['name']} of"
            values["payment"] = f"Please refund it to {method_phrase(method)}."
            given["payment"] = f"and refund it to {method_phrase(method)}"
            write = Write(
                "return_delivered_order_items",
                {"order_id": oid, "item_ids": [item["item_id"]], "payment_method_id": method["id"]},
            )
            first = candidates[0]
            default = {
                "order_id": first["order_id"],
                "item_ids": [first["items"][0]["item_id"]],
                "payment_method_id": first["payment_history"][0]["payment_method_id"],
            }
            goal = "return {item} {order} {payment}"
        blanks = {
            "order": "one of my orders",
            "reason": "",
            "address": "",
            "item": "an item of",
            "payment": "",
        }
        words = {name: (blanks[name] if name in missing else given[name]) for name in names}
        opening = "Hi, I would like to " + " ".join(goal.format(**words).split()) + "."
        write = Write(write.tool, write.args, depends=tuple(missing))
        question = " and ".join(QUESTIONS[name][0] for name in missing)
        steps = [
            ask(f"Sure. Could you tell me {question}?", default_writes=(call(write.tool, **default),)),
            write_step(write, b, {IG: ()}),
            Step(say(f"Done: your request on order {oid} is carried out.")),
        ]
        scenario = Scenario(
            user_id=b.user["user_id"],
            state=b.state,
            opening=opening,
            requests=[opening],
            request_steps=[steps],
            writes=[write],
            facts=[Fact(name, values[name], QUESTIONS[name][1]) for name in missing],
            details={"kind": kind, "missing": missing},
        )
        return scenario, b
