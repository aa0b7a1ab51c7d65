"""The retail tools: OpenAI function schemas, declared preconditions, and handlers over the database.

Reads return JSON records; writes return the updated order. A refused call raises :class:`ToolError` (or fails
a declared :class:`Precondition`) with a message that names the problem, e.g. ``order #W1234567 is
delivered; only pending orders can be cancelled``. The world engine runs every write on a copy, so a refused
write never changes the database. Capability envs reuse these exact tools over small fresh states.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from trace_gym.targets.retail.data import money
from trace_gym.worlds import Precondition, State, Tool, ToolError

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")


# ---- lookups ---------------------------------------------------------------------------------------------------
def _order(state: State, order_id: str) -> dict[str, Any]:
    order = state["orders"].get(order_id)
    if order is None:
        raise ToolError(f"order {order_id!r} not found")
    return order


def _user(state: State, user_id: str) -> dict[str, Any]:
    user = state["users"].get(user_id)
    if user is None:
        raise ToolError(f"user {user_id!r} not found")
    return user


def _variant(state: State, item_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    for product in state["products"].values():
        if item_id in product["variants"]:
            return product, product["variants"][item_id]
    return None


# ---- read handlers ---------------------------------------------------------------------------------------------
def find_user_id_by_email(state: State, args: dict[str, Any]) -> Any:
    email = args["email"].strip().lower()
    for user_id, user in sorted(state["users"].items()):
        if user["email"].lower() == email:
            return user_id
    raise ToolError(f"no user found with email {args['email']!r}")


def find_user_id_by_name_zip(state: State, args: dict[str, Any]) -> Any:
    first, last = args["first_name"].strip().lower(), args["last_name"].strip().lower()
    for user_id, user in sorted(state["users"].items()):
        name = user["name"]
        if (
            name["first_name"].lower() == first
            and name["last_name"].lower() == last
            and user["address"]["zip"] == args["zip"].strip()
        ):
            return user_id
    raise ToolError(
        f"no user found with name {args['first_name']} {args['last_name']} and zip {args['zip']!r}"
    )


def get_user_details(state: State, args: dict[str, Any]) -> Any:
    return _user(state, args["user_id"])


def get_order_details(state: State, args: dict[str, Any]) -> Any:
    return _order(state, args["order_id"])


def get_product_details(state: State, args: dict[str, Any]) -> Any:
    product = state["products"].get(args["product_id"])
    if product is None:
        raise ToolError(f"product {args['product_id']!r} not found")
    return product


def list_all_product_types(state: State, args: dict[str, Any]) -> Any:
    return {product["name"]: product_id for product_id, product in sorted(state["products"].items())}


_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _arithmetic(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.operand))
    raise ToolError("the expression may only contain numbers, + - * / and parentheses")


def calculate(state: State, args: dict[str, Any]) -> Any:
    expression = args["expression"]
    if len(expression) > 200:
        raise ToolError("the expression is too long (at most 200 characters)")
    try:
        value = _arithmetic(ast.parse(expression.replace(",", ""), mode="eval"))
    except (SyntaxError, ValueError):  # ValueError: null bytes, text that is not valid Unicode
        raise ToolError(f"could not parse the expression {expression!r}") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, RecursionError):
        raise ToolError("the result is too large") from None
    if not math.isfinite(value):  # float + - * / overflow to inf (or inf - inf to nan) without raising
        raise ToolError("the result is too large (not a finite number)")
    return f"{round(value, 2):.2f}"


def transfer_to_human_agents(state: State, args: dict[str, Any]) -> Any:
    return "Transfer successful. A human agent will take over the conversation."


def respond_to_user(state: State, args: dict[str, Any]) -> Any:
    return "Message delivered to the user."


# ---- preconditions ---------------------------------------------------------------------------------------------
def _order_exists(state: State, args: dict[str, Any]) -> str | None:
    return None if args["order_id"] in state["orders"] else f"order {args['order_id']!r} not found"


def _status_is(*statuses: str) -> Callable[[State, dict[str, Any]], str | None]:
    def check(state: State, args: dict[str, Any]) -> str | None:
        status = state["orders"][args["order_id"]]["status"]
        if status in statuses:
            return None
        return f"order {args['order_id']} is {status}; this action needs a {' or '.join(statuses)} order"

    return check


def _not_modified(state: State, args: dict[str, Any]) -> str | None:
    if state["orders"][args["order_id"]].get("items_modified"):
        return (
            f"the items of order {args['order_id']} were already modified; items can be modified only once "
            "per order"
        )
    return None


def _items_in_order(state: State, args: dict[str, Any]) -> str | None:
    item_ids = args["item_ids"]
    if len(set(item_ids)) != len(item_ids):
        return "item_ids contains the same item twice"
    present = {item["item_id"] for item in state["orders"][args["order_id"]]["items"]}
    missing = [item_id for item_id in item_ids if item_id not in present]
    if missing:
        return f"item(s) {', '.join(missing)} not found in order {args['order_id']}"
    return None


def _new_items_valid(state: State, args: dict[str, Any]) -> str | None:
    old, new = args["item_ids"], args["new_item_ids"]
    if len(old) != len(new):
        return f"item_ids has {len(old)} items but new_item_ids has {len(new)}; they must pair up one to one"
    for old_id, new_id in zip(old, new, strict=True):
        found = _variant(state, new_id)
        if found is None:
            return f"item {new_id!r} not found in the catalog"
        product, variant = found
        if old_id not in product["variants"]:
            return f"new item {new_id} is not a variant of the same product as item {old_id}"
        if new_id == old_id:
            return f"new item {new_id} is the same as the current item"
        if not variant["available"]:
            return f"item {new_id} ({product['name']}) is not available"
    return None


def _method_of_user(state: State, args: dict[str, Any]) -> str | None:
    user = state["users"][state["orders"][args["order_id"]]["user_id"]]
    if args["payment_method_id"] not in user["payment_methods"]:
        return (
            f"payment method {args['payment_method_id']!r} not found for the user of order {args['order_id']}"
        )
    return None


def price_difference(state: State, args: dict[str, Any]) -> float:
    """New minus old price of the paired items (positive: the user pays)."""
    old = sum(_variant(state, i)[1]["price"] for i in args["item_ids"])  # type: ignore[index]
    new = sum(_variant(state, i)[1]["price"] for i in args["new_item_ids"])  # type: ignore[index]
    return money(new - old)


def _gift_card_covers(state: State, args: dict[str, Any]) -> str | None:
    user = state["users"][state["orders"][args["order_id"]]["user_id"]]
    method = user["payment_methods"][args["payment_method_id"]]
    difference = price_difference(state, args)
    if method["source"] == "gift_card" and difference > method["balance"] + 1e-9:
        return (
            f"the balance of gift card {method['id']} is not enough to pay the price difference of "
            f"{difference:.2f}"
        )
    return None


def _refund_method_allowed(state: State, args: dict[str, Any]) -> str | None:
    order = state["orders"][args["order_id"]]
    user = state["users"][order["user_id"]]
    method = user["payment_methods"][args["payment_method_id"]]
    original = order["payment_history"][0]["payment_method_id"]
    if method["id"] != original and method["source"] != "gift_card":
        return (
            f"refunds of order {order['order_id']} go to the original payment method ({original}) or to a "
            "gift card of the user"
        )
    return None


# ---- write handlers --------------------------------------------------------------------------------------------
def _record_payment(user: dict[str, Any], order: dict[str, Any], amount: float, method_id: str) -> None:
    """Charge (amount > 0) or refund (amount < 0) the difference; gift card balances move at once."""
    if amount == 0:
        return
    kind = "payment" if amount > 0 else "refund"
    order["payment_history"].append(
        {"transaction_type": kind, "amount": money(abs(amount)), "payment_method_id": method_id}
    )
    method = user["payment_methods"][method_id]
    if method["source"] == "gift_card":
        method["balance"] = money(method["balance"] - amount)


def cancel_pending_order(state: State, args: dict[str, Any]) -> Any:
    order = state["orders"][args["order_id"]]
    user = state["users"][order["user_id"]]
    for entry in [e for e in order["payment_history"] if e["transaction_type"] == "payment"]:
        _record_payment(user, order, -entry["amount"], entry["payment_method_id"])
    order["status"] = "cancelled"
    order["cancel_reason"] = args["reason"]
    return order


def modify_pending_order_address(state: State, args: dict[str, Any]) -> Any:
    order = state["orders"][args["order_id"]]
    order["address"] = {key: args[key].strip() for key in ADDRESS_FIELDS}
    return order


def _swap_items(state: State, order: dict[str, Any], args: dict[str, Any]) -> None:
    for old_id, new_id in zip(args["item_ids"], args["new_item_ids"], strict=True):
        item = next(i for i in order["items"] if i["item_id"] == old_id)
        _, variant = _variant(state, new_id)  # type: ignore[misc]
        item.update(item_id=new_id, price=variant["price"], options=dict(variant["options"]))


def modify_pending_order_items(state: State, args: dict[str, Any]) -> Any:
    order = state["orders"][args["order_id"]]
    difference = price_difference(state, args)
    _swap_items(state, order, args)
    _record_payment(state["users"][order["user_id"]], order, difference, args["payment_method_id"])
    order["items_modified"] = True
    return order


def return_delivered_order_items(state: State, args: dict[str, Any]) -> Any:
    order = state["orders"][args["order_id"]]
    refund = money(sum(i["price"] for i in order["items"] if i["item_id"] in args["item_ids"]))
    order["status"] = "return requested"
    order["return_items"] = sorted(args["item_ids"])
    order["return_payment_method_id"] = args["payment_method_id"]
    order["return_refund_amount"] = refund
    return order


def exchange_delivered_order_items(state: State, args: dict[str, Any]) -> Any:
    order = state["orders"][args["order_id"]]
    difference = price_difference(state, args)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(args["item_ids"])
    order["exchange_new_items"] = sorted(args["new_item_ids"])
    order["exchange_payment_method_id"] = args["payment_method_id"]
    order["exchange_price_difference"] = difference
    return order


# ---- schemas ---------------------------------------------------------------------------------------------------
def _params(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


# Length limits of arguments: generous for any real value, small enough that a hostile call cannot make a
# tool store (and every later step copy and hash) megabytes.
MAX_STRING = 200
MAX_TEXT = 4000  # messages to the user and transfer summaries
MAX_ITEMS = 20


def _str(description: str, max_length: int = MAX_STRING) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "description": description}


def _ids(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string", "maxLength": MAX_STRING},
        "minItems": 1,
        "maxItems": MAX_ITEMS,
        "description": description,
    }


ORDER_ID = _str("The order id, with its '#', e.g. '#W0123456'.")
PAYMENT = _str(
    "A payment method id of the user, e.g. 'credit_card_1234567', 'paypal_1234567', 'gift_card_1234567'."
)
ORDER_EXISTS = Precondition("the order exists", _order_exists)
PENDING = Precondition("order.status == pending", _status_is("pending"))
DELIVERED = Precondition("order.status == delivered", _status_is("delivered"))
NOT_MODIFIED = Precondition("the order's items were not modified before", _not_modified)
ITEMS_IN_ORDER = Precondition("every item id is an item of the order, listed once", _items_in_order)
NEW_ITEMS_VALID = Precondition(
    "each new item is an available, different variant of the same product as the item it replaces",
    _new_items_valid,
)
METHOD_OF_USER = Precondition("the payment method belongs to the order's user", _method_of_user)
GIFT_CARD_COVERS = Precondition("a gift card's balance covers the price difference", _gift_card_covers)
REFUND_METHOD = Precondition(
    "the refund goes to the original payment method or to a gift card of the user", _refund_method_allowed
)


def make_tools() -> list[Tool]:
    """The 14 retail tools, in a fixed order (the action space's order)."""
    return [
        Tool(
            "find_user_id_by_email",
            "Find a user id by email. Use it to authenticate the user.",
            _params(email=_str("The user's email, e.g. 'ava.kim1234@example.com'.")),
            find_user_id_by_email,
        ),
        Tool(
            "find_user_id_by_name_zip",
            "Find a user id by first name, last name and zip code. Use it to authenticate the user when the "
            "email is unknown or not found.",
            _params(
                first_name=_str("The first name, e.g. 'Ava'."),
                last_name=_str("The last name, e.g. 'Kim'."),
                zip=_str("The zip code of the user's address, e.g. '90210'."),
            ),
            find_user_id_by_name_zip,
        ),
        Tool(
            "get_user_details",
            "Get a user's details: name, email, address, payment methods (with gift card balances) and order ids.",
            _params(user_id=_str("The user id, e.g. 'ava_kim_1234'.")),
            get_user_details,
        ),
        Tool(
            "get_order_details",
            "Get an order's details: status, items (item id, product id, options, price), address and payment "
            "history.",
            _params(order_id=ORDER_ID),
            get_order_details,
        ),
        Tool(
            "get_product_details",
            "Get a product's details: its variants with item id, options, price and availability.",
            _params(product_id=_str("The product id, a ten-digit string, e.g. '6086499569'.")),
            get_product_details,
        ),
        Tool(
            "list_all_product_types",
            "List the names of all product types with their product ids.",
            _params(),
            list_all_product_types,
        ),
        Tool(
            "calculate",
            "Evaluate an arithmetic expression (numbers, + - * / and parentheses); the result has two decimals.",
            _params(expression=_str("e.g. '(12.5 + 30) * 2'.")),
            calculate,
            kind="think",
        ),
        Tool(
            "cancel_pending_order",
            "Cancel a pending order. Every payment is refunded to the payment method it came from (gift cards "
            "at once, other methods in 5-7 business days). Needs the user's explicit confirmation.",
            _params(
                order_id=ORDER_ID,
                reason={"type": "string", "enum": list(CANCEL_REASONS), "description": "The user's reason."},
            ),
            cancel_pending_order,
            kind="write",
            preconditions=(ORDER_EXISTS, PENDING),
        ),
        Tool(
            "modify_pending_order_address",
            "Change the shipping address of a pending order. Needs the user's explicit confirmation.",
            _params(
                order_id=ORDER_ID,
                address1=_str("Street address, e.g. '12 Oak Street'."),
                address2=_str("Second address line, e.g. 'Suite 100', or an empty string."),
                city=_str("City."),
                state=_str("Two-letter state code, e.g. 'TX'."),
                country=_str("Country, e.g. 'USA'."),
                zip=_str("Zip code, e.g. '78701'."),
            ),
            modify_pending_order_address,
            kind="write",
            preconditions=(ORDER_EXISTS, PENDING),
        ),
        Tool(
            "modify_pending_order_items",
            "Replace items of a pending order by other variants of the same products (item_ids[i] becomes "
            "new_item_ids[i]). The price difference is charged to or refunded to the given payment method; a "
            "gift card must cover a positive difference. Can be done only once per order, so collect every "
            "change first. Needs the user's explicit confirmation.",
            _params(
                order_id=ORDER_ID,
                item_ids=_ids("Item ids of the order to replace, e.g. ['1008292230']."),
                new_item_ids=_ids("The new item ids, in the same order as item_ids."),
                payment_method_id=PAYMENT,
            ),
            modify_pending_order_items,
            kind="write",
            preconditions=(
                ORDER_EXISTS,
                PENDING,
                NOT_MODIFIED,
                ITEMS_IN_ORDER,
                NEW_ITEMS_VALID,
                METHOD_OF_USER,
                GIFT_CARD_COVERS,
            ),
        ),
        Tool(
            "return_delivered_order_items",
            "Request the return of items of a delivered order. The refund (the items' prices) goes to the "
            "original payment method or to a gift card of the user. Needs the user's explicit confirmation.",
            _params(
                order_id=ORDER_ID,
                item_ids=_ids("Item ids of the order to return."),
                payment_method_id=PAYMENT,
            ),
            return_delivered_order_items,
            kind="write",
            preconditions=(ORDER_EXISTS, DELIVERED, ITEMS_IN_ORDER, METHOD_OF_USER, REFUND_METHOD),
        ),
        Tool(
            "exchange_delivered_order_items",
            "Request the exchange of items of a delivered order for other variants of the same products "
            "(item_ids[i] becomes new_item_ids[i]). The price difference is charged to or refunded to the given "
            "payment method; a gift card must cover a positive difference. Needs the user's explicit confirmation.",
            _params(
                order_id=ORDER_ID,
                item_ids=_ids("Item ids of the order to exchange."),
                new_item_ids=_ids("The new item ids, in the same order as item_ids."),
                payment_method_id=PAYMENT,
            ),
            exchange_delivered_order_items,
            kind="write",
            preconditions=(
                ORDER_EXISTS,
                DELIVERED,
                ITEMS_IN_ORDER,
                NEW_ITEMS_VALID,
                METHOD_OF_USER,
                GIFT_CARD_COVERS,
            ),
        ),
        Tool(
            "transfer_to_human_agents",
            "Transfer the user to a human agent, with a summary of the issue. Only for requests that no tool "
            "can handle. Ends the conversation.",
            _params(summary=_str("A summary of the user's issue for the human agent.", MAX_TEXT)),
            transfer_to_human_agents,
            kind="transfer",
        ),
        Tool(
            "respond_to_user",
            "Send a message to the user (the same as answering in plain text).",
            _params(message=_str("The message to the user.", MAX_TEXT)),
            respond_to_user,
            kind="reply",
        ),
    ]


# Built once at import: the JSON Schema checks of the tools cost more than a whole reset. Keyed by name, in the
# order of make_tools() (the order the env offers them in).
TOOLS: dict[str, Tool] = {tool.name: tool for tool in make_tools()}
WRITE_TOOLS = tuple(name for name, tool in TOOLS.items() if tool.kind == "write")
