"""Structured reasoning: find the records a condition selects and compute over them.

The user refers to orders by a condition ("my pending order with the highest total", "every pending order
above $150") or asks for a total, never by id. The agent must read the account and its orders, select the
right records, act on exactly those and report the computed amount. An agent that takes the first candidate
it sees acts on the wrong order or reports the wrong amount, and scores 0.
"""

from __future__ import annotations

import numpy as np

from trace_gym.synthesis.catalog.base import (
    SR,
    Builder,
    CapabilityEnv,
    Scenario,
    Step,
    Tell,
    Write,
    call,
    calls,
    say,
    total,
    write_step,
)
from trace_gym.targets.retail.data import order_total
from trace_gym.targets.retail.tools import CANCEL_REASONS


class StructuredReasoningEnv(CapabilityEnv):
    """Select orders by a condition over their records, compute the amount, act on exactly those orders."""

    capability = SR
    description = (
        "Select the orders a condition picks (status, highest total, threshold) and compute amounts."
    )
    tool_names = (
        "get_user_details",
        "get_order_details",
        "get_product_details",
        "calculate",
        "cancel_pending_order",
    )
    policy_headings = ("Information",)
    key_components = ("final_state", "facts_told")
    dependencies = {"precise-arguments": "levels 2 and 3 end in cancellations whose arguments must be exact"}
    hint = (
        "Read the user's details to list their orders, read every order, then work out which orders the "
        "request selects (compare statuses and totals) and compute sums with calculate before acting or "
        "answering. Report the computed amount."
    )
    isolates = "reasoning over several records: selecting orders by status, maximum or threshold, and summing amounts"
    transfer_reason = (
        "retail users refer to orders by description and ask for totals and refunds; retail failures include "
        "acting on the wrong order and misreported amounts"
    )
    levels = {
        1: "the total of the user's orders of one status (an answer, no write)",
        2: "cancel the pending order with the highest total and report its refund",
        3: "cancel every pending order above a threshold and report the total refund",
    }

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        b = Builder(rng, n_products=5)
        reason = b.pick(CANCEL_REASONS)
        uid = b.user["user_id"]
        if difficulty == 1:
            status = b.pick(("pending", "delivered", "processed"))
            for _ in range(int(rng.integers(2, 4))):
                b.order(status, int(rng.integers(1, 4)))
            for _ in range(int(rng.integers(1, 3))):
                b.order(
                    b.pick([s for s in ("pending", "processed", "delivered", "cancelled") if s != status])
                )
            b.user["orders"] = [b.user["orders"][int(i)] for i in rng.permutation(len(b.user["orders"]))]
            chosen = [o for o in b.user["orders"] if b.state["orders"][o]["status"] == status]
            opening = f"Hi, what is the total amount of all my {status} orders together?"
            first = chosen[0]
        else:
            pending = [b.order("pending", int(rng.integers(1, 4)))["order_id"] for _ in range(difficulty + 1)]
            b.order(b.pick(("processed", "delivered")))
            b.user["orders"] = [b.user["orders"][int(i)] for i in rng.permutation(len(b.user["orders"]))]
            pending = [o for o in b.user["orders"] if o in pending]  # listing order
            totals = {o: order_total(b.state["orders"][o]) for o in pending}
            ranked = sorted(pending, key=lambda o: totals[o])
            if difficulty == 2:
                chosen = [ranked[-1]]
                opening = (
                    f"Hi, please cancel my pending order with the highest total (reason: '{reason}') and tell "
                    "me how much will be refunded."
                )
            else:
                cut = int(rng.integers(1, len(ranked) - 1))  # at least one below, two above
                low, high = totals[ranked[cut - 1]], totals[ranked[cut]]
                threshold = int((low + high) / 2) if int((low + high) / 2) > low else low
                chosen = [o for o in pending if totals[o] > threshold]
                opening = (
                    f"Hi, please cancel every pending order of mine whose total is above ${threshold} "
                    f"(reason: '{reason}'), and tell me the total refund."
                )
            first = pending[0]
            if chosen == [first]:  # the first candidate must not be the answer
                b.user["orders"].remove(first)
                b.user["orders"].append(first)
                first = [o for o in b.user["orders"] if o in pending][0]
        values = [order_total(b.state["orders"][o]) for o in chosen]
        amount = total(values)
        naive = order_total(b.state["orders"][first])
        scenario = Scenario(
            user_id=uid,
            state=b.state,
            opening=opening,
            requests=[opening],
            request_steps=[],
            tells=[Tell("amount", "money", amount)],
            details={"chosen": chosen},
        )
        steps = [
            Step(call("get_user_details", user_id=uid)),
            Step(calls(*[("get_order_details", {"order_id": o}) for o in b.user["orders"]])),
        ]
        if len(values) > 1:
            expression = " + ".join(f"{v:.2f}" for v in values)
            steps.append(Step(call("calculate", expression=expression), {SR: ()}))
        if difficulty > 1:
            scenario.writes = [
                Write("cancel_pending_order", {"order_id": o, "reason": reason}) for o in chosen
            ]
            naive_write = call("cancel_pending_order", order_id=first, reason=reason)
            for index, write in enumerate(scenario.writes):
                steps.append(write_step(write, b, {SR: (naive_write,) if index == 0 else ()}))
            text = f"Done: I cancelled {', '.join(chosen)}. The refund is ${amount:.2f} in total."
            wrong = f"Done: I cancelled {first}. The refund is ${naive:.2f} in total."
        else:
            text = f"The total of your {status} orders is ${amount:.2f}."
            wrong = f"The total of your {status} orders is ${naive:.2f}."
        steps.append(Step(say(text), {SR: (say(wrong),)}))
        scenario.request_steps = [steps]
        return scenario, b
