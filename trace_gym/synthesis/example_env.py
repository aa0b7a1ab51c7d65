"""An example of a self-contained env module as the LLM generation agent must write one (and a test fixture).

Status lookup: the user asks for the status of an order; the agent must read the order with
``get_order_details`` and tell the status. It follows the env contract with nothing but allowed imports, so
it passes the static check and ``trace check`` in the sandbox.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from trace_gym.core.env import ChatToolEnv, Episode, Evaluation
from trace_gym.targets.retail.data import IdMaker, Sizes, make_order, make_products, make_user
from trace_gym.targets.retail.policy import POLICY
from trace_gym.targets.retail.tools import TOOLS
from trace_gym.worlds import ScriptedUser, Tool

STATUSES = ("pending", "processed", "delivered", "cancelled")


class StatusLookupV0(ChatToolEnv):
    """Read an order and tell the user its status.

    Observation space: the chat so far. Action space: one assistant turn over ``get_order_details`` and
    ``get_product_details``. Reward: 1.0 when the order was read and then its status (and no other) was told, else 0.0.
    Termination: the user ends the conversation once told, or after three idle messages.
    """

    capability = "status-lookup"
    description = "Read an order with get_order_details and tell the user its status."
    difficulty_levels = (1,)
    default_difficulty = 1
    ablatable_capabilities = ()

    def _make_tools(self) -> list[Tool]:
        return [TOOLS["get_order_details"], TOOLS["get_product_details"]]

    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        ids = IdMaker(rng)
        products = make_products(
            rng, ids, Sizes(products=3, users=1, orders_per_user=(1, 1), variants=(2, 3))
        )
        user = make_user(rng, ids, "Ava", "Kim")
        status = STATUSES[int(rng.integers(len(STATUSES)))]
        order = make_order(rng, ids, user, products, status, 1)
        user["orders"].append(order["order_id"])
        state = {"users": {user["user_id"]: user}, "products": products, "orders": {order["order_id"]: order}}
        self.order_id, self.status, self.success = order["order_id"], status, False
        simulator = ScriptedUser(f"Hi, what is the status of my order {self.order_id}?", goal_met=self._told)
        return Episode(
            system_prompt=POLICY.split("\n## ")[0] + f"\nThe user's id is {user['user_id']}.\n",
            state=state,
            user=simulator,
            instance={"order_id": self.order_id, "status": status, "state": state},
            hint="Read the order before you answer.",
            value_pool={"order_id": [self.order_id], "product_id": sorted(products)},
        )

    def _read(self) -> bool:
        return any(
            c.name == "get_order_details" and c.error is None and c.arguments.get("order_id") == self.order_id
            for c in self.calls
        )

    def _told(self) -> bool:
        said = self.agent_messages[-1].lower() if self.agent_messages else ""
        named = {s for s in STATUSES if re.search(rf"\b{s}\b", said)}
        self.success = self.success or (self._read() and named == {self.status})
        return self.success

    def _evaluate(self) -> Evaluation:
        components = {"read": float(self._read()), "told": float(self.success)}
        return Evaluation(
            float(self.success), components, {self.capability: "PRESENT" if self.success else "LACKING"}
        )

    def oracle_actions(self, without: str | None = None) -> list[dict[str, Any]]:
        read = {
            "content": "",
            "tool_calls": [
                {"function": {"name": "get_order_details", "arguments": {"order_id": self.order_id}}}
            ],
        }
        return [read, {"content": f"Your order {self.order_id} is {self.status}."}]
