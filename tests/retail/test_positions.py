"""Nothing's position gives the answer away: the order a request is about sits anywhere in the user's order
list (as get_user_details shows it), uniformly, and the order table does not end with the task's orders."""

from __future__ import annotations

import numpy as np

SEEDS = 400


def _positions(env) -> tuple[list[int], list[int]]:
    """(index of the first request's order in the user's order list, length of the list) per seed."""
    index, length = [], []
    for seed in range(SEEDS):
        env.reset(seed=seed, options={"split": "train"})
        task = env.task
        target = task.requests[0].order_id or task.requests[0].forbidden_order
        orders = task.initial_state["users"][task.user_id]["orders"]
        if target in orders and len(orders) >= 2:
            index.append(orders.index(target))
            length.append(len(orders))
    return index, length


def test_the_target_order_is_uniformly_placed_in_the_users_list(env):
    index, length = _positions(env)
    k = np.array(length, dtype=float)
    first = np.array(index) == 0
    last = np.array(index) == k - 1
    # Under uniform placement, P(first) = P(last) = 1/k and the relative rank i/(k-1) has mean 1/2.
    expected, spread = (1 / k).sum(), np.sqrt((1 / k * (1 - 1 / k)).sum())
    assert len(index) >= 200
    assert abs(first.sum() - expected) < 4 * spread, (first.sum(), expected)
    assert abs(last.sum() - expected) < 4 * spread, (last.sum(), expected)
    rank = np.array(index) / (k - 1)
    assert abs(rank.mean() - 0.5) < 4 * np.sqrt((rank.var() + 1e-9) / len(rank))


def test_the_task_orders_are_not_the_last_rows_of_the_order_table(env):
    at_end = 0
    for seed in range(100):
        env.reset(seed=seed, options={"split": "train"})
        table = list(env.task.initial_state["orders"])
        mine = {r.order_id for r in env.task.requests if r.order_id}
        at_end += bool(mine) and set(table[-len(mine) :]) == mine
    assert at_end < 20
