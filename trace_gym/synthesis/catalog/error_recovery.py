"""Error recovery: when a tool call fails for a reason outside the agent's control, find another way.

The user authenticates with an email that is no longer on the account (``find_user_id_by_email`` fails; the
user also gave name and zip code, so ``find_user_id_by_name_zip`` works), and/or gives an order id with two
digits swapped (``get_order_details`` fails; the account's order list shows the order with the product the
user named). Every fact needed is in the opening, so recovery needs tools only. Giving up scores 0.
"""

from __future__ import annotations

import numpy as np

from trace_gym.synthesis.catalog.base import (
    ER,
    PC,
    Builder,
    CapabilityEnv,
    Scenario,
    Step,
    Write,
    call,
    calls,
    method_phrase,
    say,
    write_step,
)
from trace_gym.targets.retail.tools import CANCEL_REASONS

ERRORS = {1: (("email",), ("order_id",)), 2: (("email", "order_id"),)}


def swapped(order_id: str, taken: set[str], rng: np.random.Generator) -> str:
    """The order id with two adjacent different digits swapped (a typo), not an existing id."""
    digits = order_id[2:]
    spots = [i for i in range(len(digits) - 1) if digits[i] != digits[i + 1]]
    for index in (int(i) for i in rng.permutation(spots)):
        typo = digits[:index] + digits[index + 1] + digits[index] + digits[index + 2 :]
        if "#W" + typo not in taken:
            return "#W" + typo
    return "#W" + digits[::-1]


class ErrorRecoveryEnv(CapabilityEnv):
    """Recover from failing lookups (an outdated email, a mistyped order id) with other tools, then act."""

    capability = ER
    description = (
        "Recover from failed lookups (outdated email, mistyped order id) by another route, then act."
    )
    tool_names = (
        "find_user_id_by_email",
        "find_user_id_by_name_zip",
        "get_user_details",
        "get_order_details",
        "cancel_pending_order",
        "return_delivered_order_items",
    )
    policy_headings = ("Authentication", "Allowed actions")
    authentication_required = True
    key_components = ("final_state",)
    difficulty_levels = (1, 2)
    dependencies = {"precise-arguments": "the request ends in a write whose arguments must be exact"}
    hint = (
        "When a tool returns an error, read it and try another way to the same goal: if an email is not "
        "found, authenticate by name and zip code; if an order id is not found, read the user's details and "
        "find the order by its items. Do not give up while another tool can help."
    )
    isolates = (
        "recovering from a failed lookup by another route (name and zip code; the account's order list)"
    )
    transfer_reason = (
        "retail users give outdated emails and mistyped order ids; retail failures include agents that stop "
        "at the first tool error"
    )
    levels = {1: "one failing lookup (email or order id)", 2: "both lookups fail"}

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        b = Builder(rng, n_products=5)
        errors = b.pick(ERRORS[difficulty])
        uid = b.user["user_id"]
        kind = b.pick(("cancel", "return"))
        order = b.order("pending" if kind == "cancel" else "delivered", int(rng.integers(1, 3)))
        for _ in range(int(rng.integers(1, 3))):
            b.order(b.pick(("pending", "processed", "delivered")), int(rng.integers(1, 3)))
        b.order("pending", user=b.stranger)
        oid = order["order_id"]
        item = b.pick(order["items"])
        name = b.user["name"]
        email = b.user["email"]
        if "email" in errors:
            email = email.replace("@example.com", "@oldmail.net")
        said_id = swapped(oid, set(b.state["orders"]), rng) if "order_id" in errors else oid
        if kind == "cancel":
            reason = b.pick(CANCEL_REASONS)
            want = f"cancel my order {said_id} (the one with the {item['name']}); the reason is '{reason}'"
            write = Write("cancel_pending_order", {"order_id": oid, "reason": reason})
        else:
            method = b.user["payment_methods"][order["payment_history"][0]["payment_method_id"]]
            want = f"return the {item['name']} of my order {said_id}, refunded to {method_phrase(method)}"
            write = Write(
                "return_delivered_order_items",
                {"order_id": oid, "item_ids": [item["item_id"]], "payment_method_id": method["id"]},
            )
        opening = (
            f"Hi, I am {name['first_name']} {name['last_name']}, zip code {b.user['address']['zip']}, email "
            f"{email}. I would like to {want}."
        )
        give_up_user = say("I am sorry, I could not find your account, so I cannot help with this request.")
        give_up_order = say(f"I am sorry, I could not find order {said_id}, so I cannot help with it.")
        steps = [Step(call("find_user_id_by_email", email=email))]
        if "email" in errors:
            zip_call = call(
                "find_user_id_by_name_zip",
                first_name=name["first_name"],
                last_name=name["last_name"],
                zip=b.user["address"]["zip"],
            )
            steps.append(Step(zip_call, {ER: (give_up_user,)}, halts=frozenset({ER})))
        if "order_id" in errors:
            blind = call(write.tool, **{**write.args, "order_id": said_id})
            steps += [
                Step(call("get_order_details", order_id=said_id), {PC: (blind,)}),
                Step(call("get_user_details", user_id=uid), {ER: (give_up_order,)}, halts=frozenset({ER})),
                Step(calls(*[("get_order_details", {"order_id": o}) for o in b.user["orders"]])),
            ]
        else:
            steps.append(Step(call("get_order_details", order_id=oid), {PC: ()}))
        steps += [write_step(write, b), Step(say(f"Done: your request on order {oid} is carried out."))]
        scenario = Scenario(
            user_id=uid,
            state=b.state,
            opening=opening,
            requests=[opening],
            request_steps=[steps],
            writes=[write],
            details={"errors": list(errors)},
        )
        return scenario, b
