"""Precise arguments: copy ids and values into tool calls exactly.

The user wants a new shipping address (said in one sentence, to be split into exact fields) or other variants
of items (described by their options; the exact item id must be looked up among variants that differ in one
option). Near misses (a suite number folded into the street, a state spelled out, a sibling variant) change
the wrong thing and score 0.
"""

from __future__ import annotations

import numpy as np

from trace_gym.synthesis.catalog.base import (
    PA,
    Builder,
    CapabilityEnv,
    Scenario,
    Step,
    Write,
    address_phrase,
    call,
    method_phrase,
    options_phrase,
    say,
    write_step,
)


class PreciseArgumentsEnv(CapabilityEnv):
    """Fill tool arguments exactly: address fields split from a sentence, item ids matching every option."""

    capability = PA
    description = (
        "Exact tool arguments: split an address into fields, pick the variant matching every option."
    )
    tool_names = (
        "get_order_details",
        "get_product_details",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "calculate",
    )
    policy_headings = ("Allowed actions",)
    key_components = ("final_state", "policy")
    hint = (
        "Copy ids and values exactly as the tools and the user give them. Split an address into its fields "
        "(a suite or apartment goes in address2, the state as its two-letter code). For a new variant, read "
        "the product and choose the item id whose options match every option the user asked for."
    )
    isolates = "exact arguments: address fields and the item id whose options match all of the user's"
    transfer_reason = (
        "every retail write takes exact ids and fields, and its verifier compares the final database byte "
        "for byte; retail failures include wrong variants and malformed addresses"
    )
    levels = {
        1: "a new shipping address given in one sentence",
        2: "one item changed to the variant with the options the user names",
        3: "two items of one order changed in a single call",
    }

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        b = Builder(rng, n_products=4, variants=(6, 9))
        b.order(b.pick(("processed", "delivered")))
        if difficulty == 1:
            order = b.order("pending", int(rng.integers(1, 3)))
            address = b.address()
            opening = (
                f"Hi, please change the shipping address of my order {order['order_id']} to "
                f"{address_phrase(address)}."
            )
            write = Write("modify_pending_order_address", {"order_id": order["order_id"], **address})
            lookups: list[Step] = []
            done = f"The shipping address of order {order['order_id']} is updated."
        else:
            order = b.order("pending", difficulty - 1)
            items = order["items"]
            targets = []
            for item in items:
                product, current = b.variant(item["item_id"])
                candidates = sorted(
                    v
                    for v, record in product["variants"].items()
                    if v != item["item_id"] and record["available"]
                )
                if not candidates:
                    target = b.ensure_sibling(item["item_id"])
                else:
                    target = product["variants"][b.pick(candidates)]
                sibling = b.ensure_sibling(target["item_id"])
                if sibling["item_id"] == item["item_id"]:  # the near miss must be a third variant
                    sibling["available"] = True
                targets.append((item, product, target))
            methods = [m for m in b.user["payment_methods"].values() if m["source"] != "gift_card"]
            method = methods[0] if methods else next(iter(b.user["payment_methods"].values()))
            if method["source"] == "gift_card":
                method["balance"] = 2000.0
            wants = " and ".join(
                f"the {item['name']} to the one with {options_phrase(target['options'])}"
                for item, _, target in targets
            )
            opening = (
                f"Hi, in my pending order {order['order_id']} I'd like to change {wants}. Please use "
                f"{method_phrase(method)} for the price difference."
            )
            write = Write(
                "modify_pending_order_items",
                {
                    "order_id": order["order_id"],
                    "item_ids": [item["item_id"] for item, _, _ in targets],
                    "new_item_ids": [target["item_id"] for _, _, target in targets],
                    "payment_method_id": method["id"],
                },
            )
            lookups = [Step(call("get_product_details", product_id=p["product_id"])) for _, p, _ in targets]
            done = f"The items of order {order['order_id']} are changed."
        steps = [*lookups, write_step(write, b), Step(say(done))]
        scenario = Scenario(
            user_id=b.user["user_id"],
            state=b.state,
            opening=opening,
            requests=[opening],
            request_steps=[steps],
            writes=[write],
        )
        return scenario, b
