"""Fixtures of the retail tests: a small hand-written database and seed search over generated tasks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

from trace_gym.targets.retail.env import RetailEnv
from trace_gym.targets.retail.tasks import Task
from trace_gym.targets.retail.tools import make_tools
from trace_gym.worlds import World


def _item(item_id: str, product_id: str, name: str, price: float, **options: str) -> dict[str, Any]:
    return {"item_id": item_id, "product_id": product_id, "name": name, "price": price, "options": options}


def _order(
    order_id: str, user_id: str, status: str, items: list[dict[str, Any]], method: str
) -> dict[str, Any]:
    total = round(sum(i["price"] for i in items), 2)
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": {"address1": "1 Main Street", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"},
        "items": items,
        "status": status,
        "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": method}],
    }  # fmt: skip


def small_state() -> dict[str, Any]:
    shirt, lamp = "1000000001", "1000000002"
    red = _item("2000000001", shirt, "T-Shirt", 20.0, color="red", size="S")
    lamp_low = _item("2000000004", lamp, "Desk Lamp", 60.0, brightness="low")
    variants = {
        shirt: {
            "2000000001": ({"color": "red", "size": "S"}, 20.0, True),
            "2000000002": ({"color": "blue", "size": "S"}, 25.0, True),
            "2000000003": ({"color": "green", "size": "S"}, 22.0, False),
        },
        lamp: {
            "2000000004": ({"brightness": "low"}, 60.0, True),
            "2000000005": ({"brightness": "high"}, 80.0, True),
        },
    }
    products = {
        pid: {
            "product_id": pid,
            "name": "T-Shirt" if pid == shirt else "Desk Lamp",
            "variants": {
                vid: {"item_id": vid, "options": opts, "price": price, "available": available}
                for vid, (opts, price, available) in vs.items()
            },
        }
        for pid, vs in variants.items()
    }
    users = {
        "ava_kim_1111": {
            "user_id": "ava_kim_1111",
            "name": {"first_name": "Ava", "last_name": "Kim"},
            "email": "ava.kim1111@example.com",
            "address": {"address1": "1 Main Street", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"},
            "payment_methods": {
                "credit_card_1000001": {"id": "credit_card_1000001", "source": "credit_card", "brand": "visa", "last_four": "1234"},
                "gift_card_1000002": {"id": "gift_card_1000002", "source": "gift_card", "balance": 10.0},
            },
            "orders": ["#W0000001", "#W0000002", "#W0000003", "#W0000005"],
        },
        "liam_lee_2222": {
            "user_id": "liam_lee_2222",
            "name": {"first_name": "Liam", "last_name": "Lee"},
            "email": "liam.lee2222@example.com",
            "address": {"address1": "2 Oak Street", "address2": "", "city": "Denver", "state": "CO", "country": "USA", "zip": "80201"},
            "payment_methods": {"paypal_2000001": {"id": "paypal_2000001", "source": "paypal"}},
            "orders": ["#W0000004"],
        },
    }  # fmt: skip
    orders = {
        "#W0000001": _order(
            "#W0000001", "ava_kim_1111", "pending", [dict(red), dict(lamp_low)], "credit_card_1000001"
        ),
        "#W0000002": _order("#W0000002", "ava_kim_1111", "processed", [dict(red)], "credit_card_1000001"),
        "#W0000003": _order(
            "#W0000003", "ava_kim_1111", "delivered", [dict(red), dict(lamp_low)], "credit_card_1000001"
        ),
        "#W0000004": _order("#W0000004", "liam_lee_2222", "pending", [dict(lamp_low)], "paypal_2000001"),
        "#W0000005": _order("#W0000005", "ava_kim_1111", "cancelled", [dict(red)], "gift_card_1000002"),
    }
    return {"users": users, "products": products, "orders": orders}


@pytest.fixture
def world() -> World:
    return World(make_tools(), small_state())


@pytest.fixture
def env() -> RetailEnv:
    made = gym.make("trace/retail-v2")
    yield made.unwrapped
    made.close()


def find_seed(
    env: RetailEnv, predicate: Callable[[Task], bool], difficulty: int = 2, limit: int = 2000
) -> int:
    """The first train seed whose task satisfies ``predicate`` (the env is left reset on it)."""
    for seed in range(limit):
        env.reset(seed=seed, options={"difficulty": difficulty})
        assert env.task is not None
        if predicate(env.task):
            return seed
    raise AssertionError("no seed with the wanted task shape")


def play(env: RetailEnv, actions: list[Any]) -> tuple[float, dict[str, Any], bool]:
    """Step through actions until the episode ends; returns (reward, last info, ended)."""
    reward, info, ended = 0.0, {}, False
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            ended = True
            break
    return reward, info, ended
