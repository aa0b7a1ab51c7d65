"""Every retail tool: its answers, each of its errors, and each declared precondition."""

from __future__ import annotations

import pytest

from trace_gym.targets.retail.tools import WRITE_TOOLS, make_tools
from trace_gym.worlds import World


def ok(world: World, name: str, **args):
    result = world.call(name, args)
    assert result.error is None, result.output
    return result.output


def refused(world: World, name: str, kind: str = "precondition", **args) -> str:
    before = world.state_hash()
    result = world.call(name, args)
    assert result.error == kind, result.output
    assert result.output.startswith("Error: ")
    assert world.state_hash() == before  # a refused call never changes the database
    return result.output


def test_fourteen_tools_with_unique_names_and_kinds():
    tools = make_tools()
    assert len(tools) == 14 and len({t.name for t in tools}) == 14
    kinds = {t.name: t.kind for t in tools}
    assert {n for n, k in kinds.items() if k == "write"} == set(WRITE_TOOLS)
    assert kinds["transfer_to_human_agents"] == "transfer" and kinds["respond_to_user"] == "reply"
    assert kinds["calculate"] == "think"
    for tool in tools:
        if tool.kind == "write":
            assert tool.preconditions, f"{tool.name} declares no precondition"


def test_find_user(world):
    assert ok(world, "find_user_id_by_email", email="Ava.Kim1111@example.com ") == "ava_kim_1111"
    assert "no user found" in refused(world, "find_user_id_by_email", email="ava@old.com")
    assert (
        ok(world, "find_user_id_by_name_zip", first_name="ava", last_name="KIM", zip="78701")
        == "ava_kim_1111"
    )
    assert "no user found" in refused(
        world, "find_user_id_by_name_zip", first_name="Ava", last_name="Kim", zip="1"
    )
    refused(world, "find_user_id_by_email", kind="schema")


def test_reads_and_not_found(world):
    assert '"orders":["#W0000001"' in ok(world, "get_user_details", user_id="ava_kim_1111")
    assert "not found" in refused(world, "get_user_details", user_id="nobody_1")
    assert '"status":"processed"' in ok(world, "get_order_details", order_id="#W0000002")
    assert "not found" in refused(world, "get_order_details", order_id="#W9999999")
    assert '"2000000003"' in ok(world, "get_product_details", product_id="1000000001")
    assert "not found" in refused(world, "get_product_details", product_id="42")
    assert ok(world, "list_all_product_types") == '{"Desk Lamp":"1000000002","T-Shirt":"1000000001"}'
    assert "Transfer successful" in ok(world, "transfer_to_human_agents", summary="x")
    assert ok(world, "respond_to_user", message="hi") == "Message delivered to the user."


@pytest.mark.parametrize(
    ("expression", "answer"),
    [("1 + 2", "3.00"), ("(80 - 60) * 2 / 4", "10.00"), ("1,234.5 - 0.25", "1234.25"), ("-3", "-3.00")],
)
def test_calculate(world, expression, answer):
    assert ok(world, "calculate", expression=expression) == answer


@pytest.mark.parametrize(
    ("expression", "message"),
    [("__import__('os')", "only contain numbers"), ("1 +", "could not parse"), ("1/0", "division by zero"),
     ("1" * 201, "too long"), ("9.9e999 ** 2", "only contain"), ("True + 1", "only contain")],
)  # fmt: skip
def test_calculate_errors(world, expression, message):
    kind = "schema" if len(expression) > 200 else "precondition"  # the schema's maxLength comes first
    assert message in refused(world, "calculate", kind, expression=expression)


def test_every_string_argument_has_a_length_limit():
    for tool in make_tools():
        for name, schema in tool.parameters["properties"].items():
            limited = (
                schema.get("maxLength") or schema.get("enum") or schema.get("items", {}).get("maxLength")
            )
            assert limited, f"{tool.name}.{name} has no length limit"


@pytest.mark.parametrize(
    "expression", ["1e308 * 10", "1e308 + 1e308", "-1e308 * 10", "1e308 / 1e-308", "1e308 * 10 - 1e308 * 10"]
)
def test_calculate_refuses_non_finite_results(world, expression):
    message = refused(world, "calculate", expression=expression)
    assert "too large" in message


def test_cancel(world):
    assert "not found" in refused(world, "cancel_pending_order", order_id="#W9", reason="no longer needed")
    for order_id, status in (
        ("#W0000002", "processed"),
        ("#W0000003", "delivered"),
        ("#W0000005", "cancelled"),
    ):
        message = refused(world, "cancel_pending_order", order_id=order_id, reason="no longer needed")
        assert f"is {status}; this action needs a pending order" in message
    refused(world, "cancel_pending_order", kind="schema", order_id="#W0000001", reason="changed my mind")
    ok(world, "cancel_pending_order", order_id="#W0000001", reason="ordered by mistake")
    order = world.state["orders"]["#W0000001"]
    assert order["status"] == "cancelled" and order["cancel_reason"] == "ordered by mistake"
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 80.0,
        "payment_method_id": "credit_card_1000001",
    }


def test_cancel_refunds_a_gift_card_at_once(world):
    world.state["orders"]["#W0000001"]["payment_history"][0]["payment_method_id"] = "gift_card_1000002"
    ok(world, "cancel_pending_order", order_id="#W0000001", reason="no longer needed")
    assert world.state["users"]["ava_kim_1111"]["payment_methods"]["gift_card_1000002"]["balance"] == 90.0


ADDRESS = {
    "address1": "5 Elm Street",
    "address2": "Suite 2",
    "city": "Boston",
    "state": "MA",
    "country": "USA",
    "zip": "02101",
}


def test_modify_address(world):
    assert "needs a pending order" in refused(
        world, "modify_pending_order_address", order_id="#W0000003", **ADDRESS
    )
    assert "not found" in refused(world, "modify_pending_order_address", order_id="#W1", **ADDRESS)
    refused(world, "modify_pending_order_address", kind="schema", order_id="#W0000001", city="Boston")
    ok(world, "modify_pending_order_address", order_id="#W0000001", **ADDRESS)
    assert world.state["orders"]["#W0000001"]["address"] == ADDRESS


def modify(world, kind="precondition", order_id="#W0000001", items=("2000000001",), new=("2000000002",), pay="credit_card_1000001", tool="modify_pending_order_items"):  # fmt: skip
    args = {
        "order_id": order_id,
        "item_ids": list(items),
        "new_item_ids": list(new),
        "payment_method_id": pay,
    }
    return refused(world, tool, kind=kind, **args) if kind else ok(world, tool, **args)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"order_id": "#W0000002"}, "needs a pending order"),
        ({"order_id": "#W0000042"}, "not found"),
        ({"items": ("2000000005",)}, "not found in order"),
        ({"items": ("2000000001", "2000000001"), "new": ("2000000002", "2000000002")}, "same item twice"),
        ({"items": ("2000000001", "2000000004"), "new": ("2000000002",)}, "pair up one to one"),
        ({"new": ("2000000005",)}, "not a variant of the same product"),
        ({"new": ("2000000001",)}, "same as the current item"),
        ({"new": ("2000000003",)}, "is not available"),
        ({"new": ("7777777777",)}, "not found in the catalog"),
        ({"pay": "paypal_2000001"}, "not found for the user"),
        ({"items": ("2000000004",), "new": ("2000000005",), "pay": "gift_card_1000002"}, "not enough"),
    ],
)
def test_modify_items_preconditions(world, overrides, message):
    assert message in modify(world, **overrides)


def test_modify_items_once_with_charge_and_refund(world):
    modify(world, kind=None, items=("2000000001", "2000000004"), new=("2000000002", "2000000005"))
    order = world.state["orders"]["#W0000001"]
    assert [i["item_id"] for i in order["items"]] == ["2000000002", "2000000005"]
    assert order["items_modified"] and order["payment_history"][-1]["amount"] == 25.0
    assert "only once" in modify(world, items=("2000000002",), new=("2000000001",))
    # A negative difference is refunded; to a gift card at once.
    world.state["orders"]["#W0000004"]["user_id"] = "ava_kim_1111"
    world.state["orders"]["#W0000004"]["items"][0]["item_id"] = "2000000005"
    modify(
        world,
        kind=None,
        order_id="#W0000004",
        items=("2000000005",),
        new=("2000000004",),
        pay="gift_card_1000002",
    )
    assert world.state["users"]["ava_kim_1111"]["payment_methods"]["gift_card_1000002"]["balance"] == 30.0


def test_return(world):
    args = {"order_id": "#W0000003", "item_ids": ["2000000001"], "payment_method_id": "credit_card_1000001"}
    assert "needs a delivered order" in refused(
        world, "return_delivered_order_items", **{**args, "order_id": "#W0000001"}
    )
    assert "not found in order" in refused(
        world, "return_delivered_order_items", **{**args, "item_ids": ["2000000002"]}
    )
    assert "not found for the user" in refused(
        world, "return_delivered_order_items", **{**args, "payment_method_id": "paypal_2000001"}
    )
    world.state["users"]["ava_kim_1111"]["payment_methods"]["paypal_1000003"] = {
        "id": "paypal_1000003",
        "source": "paypal",
    }
    message = refused(
        world, "return_delivered_order_items", **{**args, "payment_method_id": "paypal_1000003"}
    )
    assert "original payment method" in message
    ok(
        world,
        "return_delivered_order_items",
        **{**args, "item_ids": ["2000000004", "2000000001"], "payment_method_id": "gift_card_1000002"},
    )
    order = world.state["orders"]["#W0000003"]
    assert order["status"] == "return requested" and order["return_refund_amount"] == 80.0
    assert order["return_items"] == ["2000000001", "2000000004"]
    assert "needs a delivered order" in refused(world, "return_delivered_order_items", **args)  # once only


def test_exchange(world):
    tool = "exchange_delivered_order_items"
    assert "needs a delivered order" in modify(world, tool=tool)
    assert "is not available" in modify(world, tool=tool, order_id="#W0000003", new=("2000000003",))
    assert "not enough" in modify(world, tool=tool, order_id="#W0000003", items=("2000000004",), new=("2000000005",), pay="gift_card_1000002")  # fmt: skip
    modify(world, kind=None, tool=tool, order_id="#W0000003", items=("2000000004",), new=("2000000005",))
    order = world.state["orders"]["#W0000003"]
    assert order["status"] == "exchange requested" and order["exchange_price_difference"] == 20.0
    assert order["exchange_new_items"] == ["2000000005"]


@pytest.mark.parametrize("expression", ["1+\udc80", "\ud800", "1\x00+2"])
def test_calculate_refuses_text_it_cannot_parse(world, expression):
    """Lone surrogates (JSON escapes like "\\udc80") and null bytes are answered as errors, never raised."""
    before = world.state_hash()
    result = world.call("calculate", {"expression": expression})
    assert result.error in ("schema", "precondition") and result.output.startswith("Error:")
    assert world.state_hash() == before


def test_no_tool_receives_text_that_is_not_valid_unicode(world):
    result = world.call("find_user_id_by_email", {"email": "a\udc80@example.com"})
    assert result.error == "schema" and "lone surrogate" in result.output
