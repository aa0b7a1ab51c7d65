"""Task templates composed from capability needs, and the task generator.

A task is a user (who must be authenticated) with one or several requests, in order. Each request is built
by a template (``cancel``, ``modify_address``, ``modify_items``, ``return``, ``exchange``, ``refuse_cancel``,
``refuse_other``, ``transfer``, ``query``) with variants (how the order is referred to, what is hidden until
asked, which obstacle is bound to happen) and declares the capabilities it requires. Building a request also
yields its expected writes, the facts the agent must tell, the facts the user reveals when asked, and the
oracle's part of the conversation. The generator applies the expected writes to a running copy of the
database, so later requests are built on the state earlier ones leave, and the expected final state is the
running copy at the end.

Generation happens in two passes: first every order the requests need is created (so that descriptions such
as "my order with the Desk Lamp" can be checked for uniqueness against all orders), then each request is
built in order. Static changes made while building (a variant's availability, a gift card's balance, an extra
payment method) are applied to the initial and the running database alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_gym.targets.retail.data import (
    IdMaker,
    make_address,
    make_database,
    make_order,
    money,
    order_total,
    pick,
)
from trace_gym.targets.retail.facts import Need, fmt
from trace_gym.targets.retail.tools import CANCEL_REASONS, TOOLS, price_difference
from trace_gym.worlds import State, clone

ADDRESS_VERSION = 1  # data.py's address generator with zip codes that match the state (version 0: the toy example env of synthesis)

CAPABILITIES = (
    "precondition-checking",
    "structured-reasoning",
    "multi-step-completion",
    "precise-arguments",
    "information-gathering",
    "error-recovery",
    "policy-adherence",
)
KINDS = (
    "cancel",
    "modify_address",
    "modify_items",
    "return",
    "exchange",
    "refuse_cancel",
    "refuse_other",
    "transfer",
    "query",
)
MAIN_KINDS = ("cancel", "modify_address", "modify_items", "return", "exchange")

REASON_TEXT = {"no longer needed": "I no longer need it", "ordered by mistake": "I ordered it by mistake"}
# How a user may give a cancellation reason in its own words (for an LLM-played user, see ``UserFact.markers``).
REASON_MARKERS = {
    "no longer needed": r"no longer need|(?:don't|don’t|do not|not) (?:need|want)|any ?more",
    "ordered by mistake": r"mistake|by accident|accidental",
}
# (what the user says, what the transfer summary says the user "wants")
OUT_OF_SCOPE = (
    ("I was charged twice by my bank for one of my orders and I want to dispute the second charge.",
     "to dispute a duplicate bank charge"),
    ("I would like to change the email address of my account.", "to change the email address of the account"),
    ("A package of mine arrived damaged and I want compensation for the damage.",
     "compensation for a damaged package"),
    ("I would like to open a business account with invoice payments.", "to open a business account"),
    ("I want to file a complaint about the courier who delivered my last order.",
     "to file a complaint about a courier"),
)  # fmt: skip


@dataclass(frozen=True)
class UserFact:
    """Something the user reveals when the agent asks for it (``user.py`` decides what a message asks).

    ``markers`` (regular expressions, matched case-insensitively) make the fact told when the user says it in
    its own words (an LLM-played user, ``llm_user.py``): the fact is told once every marker has appeared in
    what the user said. They are the fact's distinctive values (an email, an order id, a name and zip code, a
    street, a card's last four digits); ``value`` always matches them. They are not part of ``describe()``.
    """

    name: str
    value: str
    markers: tuple[str, ...] = ()

    @property
    def patterns(self) -> tuple[str, ...]:
        """What must appear for the fact to be told: its markers, or else the whole value."""
        return self.markers or (re.escape(self.value),)

    def told_at(self, said: Sequence[tuple[int, str]]) -> int | None:
        """The turn by which every marker appeared in ``said`` ((turn, user message), in order), or None.
        Without markers, the whole value must appear."""
        turns = []
        for pattern in self.patterns:
            turn = next((t for t, text in said if re.search(pattern, text, re.IGNORECASE)), None)
            if turn is None:
                return None
            turns.append(turn)
        return max(turns)


def exact(*values: str) -> tuple[str, ...]:
    """Markers for literal values, as whole words; an order id's leading ``#`` is optional."""
    markers = []
    for value in values:
        body = "#?" + re.escape(value[1:]) if value.startswith("#") else re.escape(value)
        markers.append(rf"(?<!\w){body}(?!\w)")
    return tuple(markers)


@dataclass(frozen=True)
class Write:
    """An expected write call; ``depends`` names user facts that must be told before it (never invent)."""

    tool: str
    args: dict[str, Any]
    depends: tuple[str, ...] = ()


@dataclass
class Request:
    """One user request and everything the user, the verifier and the oracle need about it."""

    kind: str
    variant: str
    intro: str = ""
    order_id: str | None = None
    capabilities: set[str] = field(default_factory=set)
    writes: list[Write] = field(default_factory=list)
    needs: list[Need] = field(default_factory=list)
    facts: list[UserFact] = field(default_factory=list)
    reads: list[tuple[str, str]] = field(default_factory=list)  # (tool, id) to call before the write
    reasoned: bool = False  # the target (order or amount) must be found by reasoning over records
    push: str | None = None  # "status" / "other_user": the user pushes against the policy once
    push_text: str = ""
    transfer: bool = False
    obstacle: str | None = None
    forbidden_order: str | None = None  # another user's order the agent must not touch
    expected_orders: dict[str, Any] = field(default_factory=dict)  # order records once the request is done
    script: list[dict[str, Any]] = field(default_factory=list)  # the oracle's actions
    asks: list[str] = field(default_factory=list)  # the oracle's questions for hidden user facts (ablations)

    @property
    def goal_orders(self) -> set[str]:
        """Orders the user wants changed (and will confirm changes of)."""
        orders = {write.args["order_id"] for write in self.writes}
        if self.push == "status" and self.order_id:
            orders.add(self.order_id)  # the user confirms the forbidden cancel too: that is the push
        if self.forbidden_order:
            orders.add(self.forbidden_order)
        return orders

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "variant": self.variant,
            "intro": self.intro,
            "order_id": self.order_id,
            "capabilities": sorted(self.capabilities),
            "writes": [{"tool": w.tool, "args": w.args, "depends": list(w.depends)} for w in self.writes],
            "needs": [{"name": n.name, "kind": n.kind, "value": n.value} for n in self.needs],
            "facts": [{"name": f.name, "value": f.value} for f in self.facts],
            "push": self.push,
            "transfer": self.transfer,
            "obstacle": self.obstacle,
            "forbidden_order": self.forbidden_order,
        }


@dataclass
class Task:
    user_id: str
    auth: str  # "email" / "name_zip" / "old_email"
    opening: str
    identity_facts: list[UserFact]
    requests: list[Request]
    capabilities: list[str]
    initial_state: State
    expected_state: State
    oracle: list[dict[str, Any]]
    asks: list[str] = field(default_factory=list)  # the oracle's identity questions (ablations)

    @property
    def transfer_required(self) -> bool:
        return any(request.transfer for request in self.requests)

    def describe(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "auth": self.auth,
            "opening": self.opening,
            "capabilities": self.capabilities,
            "requests": [request.describe() for request in self.requests],
        }


# ---- oracle actions --------------------------------------------------------------------------------------------
def say(text: str) -> dict[str, Any]:
    return {"content": text}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return calls((name, arguments))


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "content": "",
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(pairs)
        ],
    }


def read_orders(order_ids: list[str]) -> list[dict[str, Any]]:
    """Batched reads (at most 8 calls per turn, the env's limit)."""
    return [
        calls(*[("get_order_details", {"order_id": o}) for o in order_ids[i : i + 8]])
        for i in range(0, len(order_ids), 8)
    ]


# ---- the generation context ------------------------------------------------------------------------------------
@dataclass
class Context:
    rng: np.random.Generator
    difficulty: int
    state: State  # the initial database
    ids: IdMaker
    user: dict[str, Any]
    running: State | None = None  # the database as the requests so far leave it
    # What earlier requests rely on, so that later static changes cannot break them:
    locks: dict[str, bool] = field(default_factory=dict)  # item id -> the availability it must keep
    cards_paid: set[str] = field(default_factory=set)  # gift cards that pay a difference in a write
    cards_short: set[str] = field(default_factory=set)  # gift cards whose low balance is an obstacle

    @property
    def now(self) -> State:
        assert self.running is not None
        return self.running

    def mutate(self, change: Callable[[State], None]) -> None:
        """A static change (availability, balance, payment method): applied to both databases."""
        change(self.state)
        if self.running is not None:
            change(self.running)

    def new_order(self, status: str, n_items: int, user: dict[str, Any] | None = None) -> str:
        owner = user or self.user
        order = make_order(self.rng, self.ids, owner, self.state["products"], status, n_items)
        self.state["orders"][order["order_id"]] = order
        owner["orders"].append(order["order_id"])
        return order["order_id"]

    def chance(self, probability: float) -> bool:
        return bool(self.rng.random() < probability)

    def method_text(self, method_id: str) -> str:
        method = self.state["users"][self.user["user_id"]]["payment_methods"][method_id]
        if method["source"] == "credit_card":
            return f"{method['brand']} credit card ending in {method['last_four']}"
        return "PayPal account" if method["source"] == "paypal" else "gift card"

    def method_markers(self, method_id: str) -> tuple[str, ...]:
        """What names the method in the user's words: a card's last four digits, "PayPal", "gift card"."""
        method = self.state["users"][self.user["user_id"]]["payment_methods"][method_id]
        if method["source"] == "credit_card":
            return exact(method["last_four"])
        return exact("paypal") if method["source"] == "paypal" else (r"gift ?card",)

    def ensure_method(self, source: str) -> str:
        """The user's payment method of a source, adding one if the user has none."""
        methods = self.state["users"][self.user["user_id"]]["payment_methods"]
        for method_id, method in sorted(methods.items()):
            if method["source"] == source:
                return method_id
        method_id = f"{source}_{self.ids.digits(7)}"
        method: dict[str, Any] = {"id": method_id, "source": source}
        if source == "credit_card":
            method.update(brand=pick(self.rng, ("visa", "mastercard", "amex")), last_four=self.ids.digits(4))
        elif source == "gift_card":
            method["balance"] = money(self.rng.uniform(5, 400))
        user_id = self.user["user_id"]
        self.mutate(lambda s: s["users"][user_id]["payment_methods"].__setitem__(method_id, clone(method)))
        return method_id

    def set_balance(self, method_id: str, balance: float) -> bool:
        """Give a gift card ``balance`` now, by shifting its initial balance by the same amount (so that
        earlier requests' charges and refunds still apply); False, and no change, if that goes below 0."""
        user_id = self.user["user_id"]
        delta = money(balance - self.now["users"][user_id]["payment_methods"][method_id]["balance"])
        if self.state["users"][user_id]["payment_methods"][method_id]["balance"] + delta < 0:
            return False

        def shift(state: State) -> None:
            method = state["users"][user_id]["payment_methods"][method_id]
            method["balance"] = money(method["balance"] + delta)

        self.mutate(shift)
        return True

    def apply(self, request: Request) -> None:
        """Run the request's expected writes on the running database; a failure is a generator bug."""
        assert self.running is not None
        for write in request.writes:
            tool = TOOLS[write.tool]
            problem = tool.argument_errors(write.args) or tool.failed_precondition(self.running, write.args)
            if problem:
                raise AssertionError(f"generator bug: expected write {write} fails: {problem}")
            tool.handler(self.running, write.args)  # in place: the running copy is ours
        for write in request.writes:
            order_id = write.args["order_id"]
            request.expected_orders[order_id] = clone(self.now["orders"][order_id])


def options_text(options: dict[str, str]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in options.items())


def changed_options(old: dict[str, str], new: dict[str, str]) -> str:
    return options_text({key: value for key, value in new.items() if old.get(key) != value})


def _item(ctx: Context, order_id: str, product_name: str) -> dict[str, Any]:
    return next(i for i in ctx.now["orders"][order_id]["items"] if i["name"] == product_name)


def _unique_product(ctx: Context, order_id: str) -> str | None:
    """A product name found in this order and in no other order of the user (for "my order with the X")."""
    others = [o for o in ctx.now["users"][ctx.user["user_id"]]["orders"] if o != order_id]
    taken = {item["name"] for o in others for item in ctx.now["orders"][o]["items"]}
    names = sorted(item["name"] for item in ctx.now["orders"][order_id]["items"] if item["name"] not in taken)
    return pick(ctx.rng, names) if names else None


def _confirm(text: str) -> dict[str, Any]:
    return say(f"{text} Do you confirm (yes/no)?")


# ---- templates: first pass (orders), second pass (build) -------------------------------------------------------
def prepare(ctx: Context, kind: str) -> Request:
    """Create the orders a request of this kind needs and pick its variant."""
    rng, hard = ctx.rng, ctx.difficulty
    if kind == "cancel":
        variant = pick(rng, ("id", "id", "ask_id", "product", "extreme", "wrong_id"))
        request = Request(kind, variant, order_id=ctx.new_order("pending", int(rng.integers(1, 4))))
        if variant == "extreme":
            ctx.new_order("pending", int(rng.integers(1, 4)))  # at least one other pending order to compare
        return request
    if kind == "modify_address":
        return Request(kind, "ask_address", order_id=ctx.new_order("pending", int(rng.integers(1, 4))))
    if kind in ("modify_items", "exchange"):
        status = "pending" if kind == "modify_items" else "delivered"
        n_change = 2 if hard == 3 and ctx.chance(0.4) else 1
        obstacles = (
            ("none", "none", "unavailable", "gift_card")
            if kind == "modify_items"
            else ("none", "none", "unavailable")
        )
        variant = pick(rng, obstacles) if hard > 1 else "none"
        return Request(kind, variant, order_id=ctx.new_order(status, n_change + int(rng.integers(0, 2))))
    if kind == "return":
        return Request(kind, "return", order_id=ctx.new_order("delivered", int(rng.integers(2, 5))))
    if kind == "refuse_cancel":
        return Request(kind, "status", order_id=ctx.new_order(pick(rng, ("processed", "delivered")), 2))
    if kind == "refuse_other":
        others = sorted(u for u in ctx.state["users"] if u != ctx.user["user_id"])
        other = ctx.state["users"][pick(rng, others)]
        request = Request(kind, "other_user")
        request.forbidden_order = ctx.new_order("pending", int(rng.integers(1, 3)), user=other)
        return request
    if kind == "transfer":
        return Request(kind, "out_of_scope")
    if kind == "query":
        variant = pick(rng, ("sum_delivered", "sum_pending"))
        status = "delivered" if variant == "sum_delivered" else "pending"
        for _ in range(int(rng.integers(1, 3))):
            ctx.new_order(status, int(rng.integers(1, 4)))
        return Request(kind, variant)
    raise ValueError(f"unknown request kind {kind!r}")


def build(ctx: Context, request: Request, hidden: float) -> None:
    """Fill in the request (texts, writes, needs, facts, oracle script) on the running database."""
    {
        "cancel": _build_cancel,
        "modify_address": _build_modify_address,
        "modify_items": _build_change_items,
        "exchange": _build_change_items,
        "return": _build_return,
        "refuse_cancel": _build_refuse_cancel,
        "refuse_other": _build_refuse_other,
        "transfer": _build_transfer,
        "query": _build_query,
    }[request.kind](ctx, request, hidden)


def _build_cancel(ctx: Context, r: Request, hidden: float) -> None:
    assert r.order_id is not None
    oid, user_orders = r.order_id, ctx.now["users"][ctx.user["user_id"]]["orders"]
    reason = pick(ctx.rng, CANCEL_REASONS)
    total = order_total(ctx.now["orders"][oid])
    r.capabilities |= {"precondition-checking", "precise-arguments"}
    depends: list[str] = []
    product = _unique_product(ctx, oid) if r.variant in ("product", "wrong_id") else None
    if r.variant in ("product", "wrong_id") and product is None:
        r.variant = "id"
    if r.variant == "extreme":
        pending = {
            o: order_total(ctx.now["orders"][o])
            for o in user_orders
            if ctx.now["orders"][o]["status"] == "pending"
        }
        if max(pending.values()) == pending[oid]:
            which = "most expensive"
        elif min(pending.values()) == pending[oid]:
            which = "cheapest"
        else:
            product = _unique_product(ctx, oid)
            r.variant = "product" if product else "id"
    script: list[dict[str, Any]] = []
    if r.variant == "id":
        r.intro = f"I'd like to cancel my order {oid}"
        script.append(call("get_order_details", order_id=oid))
    elif r.variant == "ask_id":
        r.intro = "I'd like to cancel one of my orders"
        r.facts.append(UserFact("order_id", f"It's order {oid}.", exact(oid)))
        r.capabilities.add("information-gathering")
        depends.append("order_id")
        r.asks.append("Which order is it? Please tell me the order id.")
        script += [
            say("Which order is it? Please tell me the order id."),
            call("get_order_details", order_id=oid),
        ]
    elif r.variant == "product":
        r.intro = f"I'd like to cancel my order with the {product} in it"
        r.capabilities.add("structured-reasoning")
        r.reasoned = True
        script += read_orders(list(user_orders))
    elif r.variant == "extreme":
        r.intro = f"I'd like to cancel the {which} of my pending orders"
        r.capabilities.add("structured-reasoning")
        r.reasoned = True
        script += read_orders(list(user_orders))
        # the extreme is over every pending order, and which are pending is read off each record
        r.reads += [("get_order_details", o) for o in user_orders if o != oid]
    else:  # wrong_id: the user remembers a number that does not exist; the error is bound to happen
        wrong = "#W" + ctx.ids.digits(7)
        r.intro = f"I'd like to cancel my order {wrong}"
        r.obstacle = "wrong_order_id"
        r.capabilities |= {"error-recovery", "structured-reasoning"}
        r.reasoned = True
        r.facts.append(
            UserFact(
                "order_hint",
                f"Oh, maybe I got the number wrong. It's my order with the {product} in it.",
                exact(str(product)),
            )
        )
        depends.append("order_hint")
        script += [
            call("get_order_details", order_id=wrong),
            say(f"I could not find order {wrong}. Is there anything else you remember about this order?"),
            *read_orders(list(user_orders)),
        ]
    if hidden and ctx.chance(hidden):
        r.intro += "."
        r.facts.append(UserFact("reason", f"{REASON_TEXT[reason]}.", (REASON_MARKERS[reason],)))
        r.capabilities.add("information-gathering")
        depends.append("reason")
        r.asks.append(f"Could you tell me the reason for cancelling order {oid}?")
        script.append(say(r.asks[-1]))
    else:
        r.intro += f", because {REASON_TEXT[reason]}."
    r.writes.append(Write("cancel_pending_order", {"order_id": oid, "reason": reason}, tuple(depends)))
    r.needs.append(Need("refund_amount", "money", total))
    r.reads.append(("get_order_details", oid))
    script += [
        _confirm(
            f"I will cancel order {oid} (reason: {reason}); {fmt(total)} will be refunded to the original "
            "payment method."
        ),
        call("cancel_pending_order", order_id=oid, reason=reason),
        say(
            f"Order {oid} is now cancelled and {fmt(total)} will be refunded to the original payment method."
        ),
    ]
    r.script = script


def _build_modify_address(ctx: Context, r: Request, hidden: float) -> None:
    assert r.order_id is not None
    oid = r.order_id
    address = make_address(ctx.rng, ADDRESS_VERSION)
    while address == ctx.now["orders"][oid]["address"]:
        address = make_address(ctx.rng, ADDRESS_VERSION)
    line = ", ".join(v for v in (address["address1"], address["address2"], address["city"]) if v)
    text = f"{line}, {address['state']} {address['zip']}, {address['country']}"
    r.intro = f"I have moved. Could you change the shipping address of my order {oid} to my new address?"
    r.capabilities |= {"precondition-checking", "precise-arguments", "information-gathering"}
    markers = exact(address["address1"], address["city"], address["zip"])
    r.facts.append(UserFact("address", f"My new address is {text}.", markers))
    r.writes.append(Write("modify_pending_order_address", {"order_id": oid, **address}, ("address",)))
    r.reads.append(("get_order_details", oid))
    r.asks.append(f"What is the new shipping address for order {oid}?")
    r.script = [
        call("get_order_details", order_id=oid),
        say(f"What is the new shipping address for order {oid}?"),
        _confirm(f"I will change the shipping address of order {oid} to {text}."),
        call("modify_pending_order_address", order_id=oid, **address),
        say(f"Done: order {oid} will now be shipped to {text}."),
    ]


def _pick_changes(
    ctx: Context, oid: str, count: int, pricier: bool
) -> list[tuple[dict[str, Any], list[str]]]:
    """Items of the order to change, each with candidate variant ids of its product (pricier if asked)."""
    picks = []
    for item in ctx.now["orders"][oid]["items"]:
        variants = ctx.now["products"][item["product_id"]]["variants"]
        candidates = sorted(v for v in variants if v != item["item_id"] and ctx.locks.get(v, True))
        if pricier:
            candidates = [v for v in candidates if variants[v]["price"] > item["price"]]
        if len(candidates) >= 2:
            picks.append((item, candidates))
    order = [int(i) for i in ctx.rng.permutation(len(picks))]
    return [picks[i] for i in order[:count]]


def _set_available(ctx: Context, product_id: str, item_id: str, available: bool) -> None:
    ctx.locks[item_id] = available
    ctx.mutate(lambda s: s["products"][product_id]["variants"][item_id].__setitem__("available", available))


def _payment_choice(
    ctx: Context,
    r: Request,
    hidden: float,
    pay: str,
    method: str,
    question: str,
    depends: list[str],
    script: list[dict[str, Any]],
) -> None:
    """The user names the payment method in the request, or (with chance ``hidden``) only when asked."""
    if hidden and ctx.chance(hidden):
        r.facts.append(UserFact("payment", pay, ctx.method_markers(method)))
        r.capabilities.add("information-gathering")
        depends.append("payment")
        r.asks.append(question)
        script.append(say(question))
    else:
        r.intro += " " + pay


def _build_change_items(ctx: Context, r: Request, hidden: float) -> None:
    assert r.order_id is not None
    oid, rng = r.order_id, ctx.rng
    exchange = r.kind == "exchange"
    order = ctx.now["orders"][oid]
    n_change = 2 if len(order["items"]) >= 2 and ctx.difficulty == 3 and rng.random() < 0.5 else 1
    changes = _pick_changes(ctx, oid, n_change, pricier=r.variant == "gift_card")
    if r.variant == "gift_card" and not changes:
        r.variant = "none"
    if not changes:
        changes = _pick_changes(ctx, oid, n_change, pricier=False)
    old_ids, new_ids, first_choice, phrases, fallback_phrases = [], [], [], [], []
    fallback_values: list[str] = []
    for index, (item, candidates) in enumerate(changes):
        chosen = candidates[int(rng.integers(len(candidates)))]
        rest = [c for c in candidates if c != chosen]
        variants = ctx.now["products"][item["product_id"]]["variants"]
        if r.variant == "unavailable" and index == 0 and ctx.locks.get(chosen) is None:
            fallback = rest[int(rng.integers(len(rest)))]
            _set_available(ctx, item["product_id"], chosen, False)
            _set_available(ctx, item["product_id"], fallback, True)
            first_choice.append(chosen)
            # every option: the changed ones alone may fit two available variants
            fallback_phrases.append(options_text(variants[fallback]["options"]))
            fallback_values += list(variants[fallback]["options"].values())
            phrases.append(
                f"the {item['name']} to the one with {changed_options(item['options'], variants[chosen]['options'])}"
            )
            chosen = fallback
        else:
            _set_available(ctx, item["product_id"], chosen, True)
            phrases.append(
                f"the {item['name']} to the one with {changed_options(item['options'], variants[chosen]['options'])}"
            )
        old_ids.append(item["item_id"])
        new_ids.append(chosen)
    if r.variant == "unavailable" and not first_choice:
        r.variant = "none"  # the drawn first choice must stay available for an earlier request
    difference = price_difference(ctx.now, {"item_ids": old_ids, "new_item_ids": new_ids})
    user_id = ctx.user["user_id"]
    depends: list[str] = []
    if r.variant == "gift_card":
        card = ctx.ensure_method("gift_card")
        balance = money(difference * rng.uniform(0.1, 0.8))
        if card in ctx.cards_paid or not ctx.set_balance(card, balance):
            r.variant = "none"  # earlier refunds to this card make the obstacle impossible: plain request
        else:
            wanted, method = card, ctx.ensure_method(pick(rng, ("credit_card", "paypal")))
            ctx.cards_short.add(card)
    if r.variant != "gift_card":
        methods = sorted(m for m in ctx.now["users"][user_id]["payment_methods"] if m not in ctx.cards_short)
        wanted = method = pick(rng, methods)
        current = ctx.now["users"][user_id]["payment_methods"][method]
        if current["source"] == "gift_card" and current["balance"] < difference:
            ctx.set_balance(method, money(difference + rng.uniform(5, 100)))
        if current["source"] == "gift_card":
            ctx.cards_paid.add(method)
    verb = "exchange" if exchange else "change"
    where = f"my delivered order {oid}" if exchange else f"my pending order {oid}"
    r.intro = f"In {where}, I'd like to {verb} " + " and ".join(phrases) + "; everything else the same."
    pay = f"Please use my {ctx.method_text(wanted)} for any price difference."
    script: list[dict[str, Any]] = [
        calls(
            ("get_order_details", {"order_id": oid}),
            *[("get_product_details", {"product_id": item["product_id"]}) for item, _ in changes],
        )
    ]
    r.capabilities |= {"precondition-checking", "precise-arguments", "structured-reasoning"}
    r.reads += [("get_order_details", oid)] + [
        ("get_product_details", item["product_id"]) for item, _ in changes
    ]
    _payment_choice(
        ctx,
        r,
        hidden,
        pay,
        wanted,
        "Which payment method should I use for the price difference?",
        depends,
        script,
    )
    if r.variant == "unavailable":
        item = changes[0][0]
        r.obstacle = "unavailable"
        r.capabilities.add("error-recovery")
        r.facts.append(
            UserFact(
                "fallback",
                f"Oh, too bad. Then I'll take the one with {fallback_phrases[0]} instead.",
                exact(*fallback_values),
            )
        )
        depends.append("fallback")
        variants = ctx.now["products"][item["product_id"]]["variants"]
        script.append(
            say(
                f"I'm sorry, the {item['name']} with {changed_options(item['options'], variants[first_choice[0]]['options'])} is not available."
            )
        )
    if r.variant == "gift_card":
        r.obstacle = "gift_card"
        r.capabilities.add("error-recovery")
        r.facts.append(
            UserFact(
                "other_payment",
                f"I see. Then please use my {ctx.method_text(method)} instead.",
                ctx.method_markers(method),
            )
        )
        depends.append("other_payment")
        script.append(
            say(
                f"The price difference is {fmt(difference)}, but your gift card balance of {fmt(balance)} is not enough to cover it."
            )
        )
    tool = "exchange_delivered_order_items" if exchange else "modify_pending_order_items"
    args = {"order_id": oid, "item_ids": old_ids, "new_item_ids": new_ids, "payment_method_id": method}
    r.writes.append(Write(tool, args, tuple(depends)))
    r.needs.append(Need("price_difference", "money", abs(difference)))
    direction = "charged to" if difference > 0 else "refunded to"
    pairs = "; ".join(f"{o} -> {n}" for o, n in zip(old_ids, new_ids, strict=True))
    action = "request an exchange in" if exchange else "modify"
    script += [
        _confirm(
            f"I will {action} order {oid}: items {pairs}. The price difference of {fmt(abs(difference))} will be {direction} {method}."
        ),
        call(tool, **args),
        say(
            f"Done for order {oid}: the price difference of {fmt(abs(difference))} is {direction} your {ctx.method_text(method)}."
        ),
    ]
    r.script = script


def _build_return(ctx: Context, r: Request, hidden: float) -> None:
    assert r.order_id is not None
    oid, rng = r.order_id, ctx.rng
    items = ctx.now["orders"][oid]["items"]
    count = int(rng.integers(1, min(3, len(items)) + 1))
    chosen = [items[int(i)] for i in sorted(rng.choice(len(items), size=count, replace=False))]
    refund = money(sum(item["price"] for item in chosen))
    original = ctx.now["orders"][oid]["payment_history"][0]["payment_method_id"]
    methods = ctx.now["users"][ctx.user["user_id"]]["payment_methods"]
    gift = sorted(m for m, v in methods.items() if v["source"] == "gift_card" and m != original)
    method = pick(rng, [original, *gift])
    names = " and ".join(f"the {item['name']}" for item in chosen)
    r.intro = f"I'd like to return {names} from my order {oid}."
    r.capabilities |= {"precondition-checking", "precise-arguments"}
    if count > 1:
        r.capabilities.add("structured-reasoning")
    pay = f"Please refund the money to my {ctx.method_text(method)}."
    depends: list[str] = []
    script: list[dict[str, Any]] = [call("get_order_details", order_id=oid)]
    _payment_choice(
        ctx,
        r,
        hidden,
        pay,
        method,
        "Which payment method should the refund go to: the original one or a gift card?",
        depends,
        script,
    )
    args = {"order_id": oid, "item_ids": [item["item_id"] for item in chosen], "payment_method_id": method}
    r.writes.append(Write("return_delivered_order_items", args, tuple(depends)))
    r.needs.append(Need("refund_amount", "money", refund))
    r.reads.append(("get_order_details", oid))
    script += [
        _confirm(
            f"I will request a return of items {', '.join(args['item_ids'])} of order {oid}; the refund of {fmt(refund)} goes to {method}."
        ),
        call("return_delivered_order_items", **args),
        say(
            f"The return for order {oid} is requested: {fmt(refund)} will be refunded to your {ctx.method_text(method)}."
        ),
    ]
    r.script = script


def _build_refuse_cancel(ctx: Context, r: Request, hidden: float) -> None:
    assert r.order_id is not None
    oid, status = r.order_id, ctx.now["orders"][r.order_id]["status"]
    r.intro = f"Please cancel my order {oid}, I don't need it any more."
    r.push = "status"
    r.push_text = "But I really don't want it any more. Can't you make an exception and cancel it anyway?"
    r.capabilities |= {"policy-adherence", "precondition-checking"}
    r.needs.append(Need("status", "word", status))
    r.reads.append(("get_order_details", oid))
    r.script = [
        call("get_order_details", order_id=oid),
        say(f"I'm sorry, but order {oid} is already {status}, so it cannot be cancelled."),
        say(
            f"I understand, but an order that is {status} cannot be cancelled under our policy; only pending orders can."
        ),
    ]


def _build_refuse_other(ctx: Context, r: Request, hidden: float) -> None:
    assert r.forbidden_order is not None
    other = ctx.now["users"][ctx.now["orders"][r.forbidden_order]["user_id"]]
    first, last = other["name"]["first_name"], other["name"]["last_name"]
    r.intro = (
        f"My friend {first} {last} asked me to cancel their order {r.forbidden_order} too. Can you do that?"
    )
    r.push = "other_user"
    r.push_text = f"I have all of {first}'s details and they said it's fine. Please just cancel it for them."
    r.capabilities.add("policy-adherence")
    # the refusal must be said, with whose account it is, not just a goodbye
    r.needs.append(Need("refusal", "refusal", "another person's account"))
    r.script = [
        say(
            f"I'm sorry, but I can only help with your own account. I cannot access or change {first}'s order; they need to contact us themselves."
        ),
        say("I understand, but I cannot act on another person's account, even with their permission."),
    ]


def _build_transfer(ctx: Context, r: Request, hidden: float) -> None:
    index = int(ctx.rng.integers(len(OUT_OF_SCOPE)))
    text, wants = OUT_OF_SCOPE[index]
    r.intro = text
    r.transfer = True
    r.capabilities.add("policy-adherence")
    r.script = [call("transfer_to_human_agents", summary=f"User {ctx.user['user_id']} wants {wants}.")]


def _build_query(ctx: Context, r: Request, hidden: float) -> None:
    status = "delivered" if r.variant == "sum_delivered" else "pending"
    user_orders = list(ctx.now["users"][ctx.user["user_id"]]["orders"])
    chosen = [o for o in user_orders if ctx.now["orders"][o]["status"] == status]
    total = money(sum(order_total(ctx.now["orders"][o]) for o in chosen))
    r.intro = f"First, could you tell me how much my {status} orders cost in total?"
    r.capabilities.add("structured-reasoning")
    # the total is a fact only the orders' records give: read them before telling it
    r.capabilities.add("precondition-checking")
    # every order's record: which orders are pending (or delivered) is itself read off them, so a total told
    # after reading only the right ones was a guess about the others (oracle_without_last_call, difficulty 1)
    r.reads += [("get_order_details", o) for o in user_orders]
    r.reasoned = True
    r.needs.append(Need("total", "money", total))
    r.script = [
        *read_orders(user_orders),
        say(
            f"You have {len(chosen)} {status} orders ({', '.join(chosen)}); together they cost {fmt(total)}."
        ),
    ]


# ---- the generator ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Level:
    """Per difficulty: how many requests, how likely hidden facts and the authentication obstacle are."""

    requests: tuple[int, ...]
    hidden: float
    old_email: float
    kinds: dict[str, float]


_KINDS_1 = {
    "cancel": 3,
    "modify_address": 2,
    "modify_items": 2,
    "return": 2,
    "exchange": 2,
    "refuse_cancel": 1.5,
    "query": 1,
}
_KINDS_23 = dict(_KINDS_1, refuse_other=1.2, transfer=1.2, query=1.2)
LEVELS: dict[int, Level] = {
    1: Level(requests=(1,), hidden=0.3, old_email=0.1, kinds=_KINDS_1),
    2: Level(requests=(1, 2, 2), hidden=0.5, old_email=0.2, kinds=_KINDS_23),
    3: Level(requests=(2, 3, 3), hidden=0.6, old_email=0.25, kinds=_KINDS_23),
}


def _kinds(rng: np.random.Generator, level: Level) -> list[str]:
    names = sorted(level.kinds)
    weights = np.array([level.kinds[n] for n in names], dtype=float)
    count = int(level.requests[int(rng.integers(len(level.requests)))])
    drawn = [names[int(i)] for i in rng.choice(len(names), size=count, p=weights / weights.sum())]
    singles = ("query", "refuse_other", "transfer")  # at most one of each
    kinds: list[str] = []
    for kind in drawn:
        kinds.append(pick(rng, MAIN_KINDS) if kind in singles and kind in kinds else kind)
    main = [k for k in kinds if k not in singles]
    if not main and any(k in ("refuse_other", "transfer") for k in kinds):
        main = [pick(rng, MAIN_KINDS)]  # a push or a transfer always comes after a request that needs work
    ordered = [k for k in kinds if k == "query"] + main
    ordered += [k for k in kinds if k == "refuse_other"] + [k for k in kinds if k == "transfer"]
    return ordered


def generate_task(rng: np.random.Generator, difficulty: int) -> Task:
    """Draw the database and a task on it; everything comes from ``rng``.

    Nothing whose position could give the answer away is left in creation order: the user's order list and
    the database's order table are shuffled after the task's orders are created (``test_positions.py``
    checks that the target order's position is uniform)."""
    state, ids = make_database(rng, difficulty, ADDRESS_VERSION)
    level = LEVELS[difficulty]
    user = state["users"][pick(rng, sorted(state["users"]))]
    ctx = Context(rng, difficulty, state, ids, user)
    kinds = _kinds(rng, level)
    requests = [prepare(ctx, kind) for kind in kinds]
    # Shuffle the user's order list (and the order table) so that the task's orders are not the last ones.
    user["orders"] = [user["orders"][int(i)] for i in rng.permutation(len(user["orders"]))]
    table = list(state["orders"].items())
    state["orders"] = dict(table[int(i)] for i in rng.permutation(len(table)))
    ctx.running = clone(state)
    for request in requests:
        build(ctx, request, level.hidden)
        ctx.apply(request)

    first, last, zip_code = user["name"]["first_name"], user["name"]["last_name"], user["address"]["zip"]
    name_zip = f"My name is {first} {last} and my zip code is {zip_code}."
    name_zip_markers = exact(first, last, zip_code)
    auth = "old_email" if ctx.chance(level.old_email) else pick(rng, ("email", "email", "email", "name_zip"))
    user_id = user["user_id"]
    oracle: list[dict[str, Any]] = []
    asks: list[str] = []
    if auth == "old_email":
        old = f"{first.lower()}{int(rng.integers(10, 99))}@{pick(rng, ('oldmail.com', 'mail.net', 'inbox.org'))}"
        opening = f"Hi! My email is {old}. " + requests[0].intro
        identity = [
            UserFact("email", f"The only email I know is {old}.", exact(old)),
            UserFact("name_zip", name_zip, name_zip_markers),
        ]
        asks.append(
            "I could not find an account with that email. Could you tell me your first and last name and your zip code?"
        )
        oracle += [
            call("find_user_id_by_email", email=old),
            say(asks[-1]),
            call("find_user_id_by_name_zip", first_name=first, last_name=last, zip=zip_code),
        ]
    elif auth == "name_zip":
        opening = "Hi! " + requests[0].intro
        forgot = f"I don't remember which email I used. {name_zip}"
        identity = [
            UserFact("email", forgot, exact(zip_code)),
            UserFact("name_zip", name_zip, name_zip_markers),
        ]
        asks.append(
            "I can help with that. First, could you tell me your email so that I can authenticate you?"
        )
        oracle += [
            say(asks[-1]),
            call("find_user_id_by_name_zip", first_name=first, last_name=last, zip=zip_code),
        ]
    else:
        opening = "Hi! " + requests[0].intro
        identity = [
            UserFact("email", f"My email is {user['email']}.", exact(user["email"])),
            UserFact("name_zip", name_zip, name_zip_markers),
        ]
        asks.append(
            "I can help with that. First, could you tell me your email so that I can authenticate you?"
        )
        oracle += [
            say(asks[-1]),
            call("find_user_id_by_email", email=user["email"]),
        ]
    oracle.append(call("get_user_details", user_id=user_id))
    for request in requests:
        oracle += request.script
    for request in requests:
        if request.writes:  # every write needs a confirmation that names it: a policy rule
            request.capabilities.add("policy-adherence")
    capabilities = set().union(*(r.capabilities for r in requests))
    capabilities.add("information-gathering")  # the user's identity is always asked for
    if auth == "old_email":
        capabilities.add("error-recovery")
    if len(requests) >= 2:
        capabilities.add("multi-step-completion")
    return Task(
        user_id=user_id,
        auth=auth,
        opening=opening,
        identity_facts=identity,
        requests=requests,
        capabilities=[c for c in CAPABILITIES if c in capabilities],
        initial_state=state,
        expected_state=ctx.now,
        oracle=oracle,
        asks=asks,
    )
