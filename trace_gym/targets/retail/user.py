"""The scripted retail user: deterministic, answers from its task, one request at a time.

:class:`UserRecords` is the bookkeeping the verifier reads (what the user heard, said, revealed and
confirmed, when each request was raised) and the request progression; the LLM-played user of ``llm_user.py``
shares it. :class:`RetailUser` decides its replies from what each agent message asks (``reading.py``):

1. if the current request is done (its orders equal the expected records and an answer was stated for each
   fact it needs, right or wrong: the user does not react to which figure was right; for a push request,
   the agent held its ground after the push), the user raises the next request or ends with ``###STOP###``;
2. a proposal (a confirmation request naming orders, or pointing back at the message before that named
   them) is answered "yes" only when every named order belongs to the current request and, for each, the
   action and its details are stated and none negated (:meth:`RetailUser._missing`); "no" to a change it
   did not ask for; otherwise it says what is missing;
3. the facts the message's requests ask for (by slot, any synonym) are revealed; the fallback of an obstacle
   only when the message reports it and it happened (a not-found needs the failed lookup);
4. a push request pushes once ("can't you make an exception?") after the agent's first answer to it;
5. anything else is idle talk; after ``patience`` idle messages the user gives up (``###STOP###``).

Messages longer than :data:`~trace_gym.targets.retail.reading.MAX_MESSAGE_CHARS` are not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from trace_gym.core.env import CallRecord
from trace_gym.targets.retail.facts import stated, stated_amounts, told
from trace_gym.targets.retail.obstacles import ORDER_ID, refusal_shown
from trace_gym.targets.retail.reading import (
    ALTERNATIVES,
    MAX_MESSAGE_CHARS,
    MORE,
    NEGATOR,
    affirmed,
    asked_slots,
    assent_request,
    confirmation_request,
    negates,
    reports,
    sentences,
)
from trace_gym.targets.retail.tasks import Request, Task, UserFact, Write
from trace_gym.worlds import STOP, State, UserReply, UserSimulator
from trace_gym.worlds.user import CONFIRMATION_QUESTION

ANY_ORDER_ID = re.compile(r"#?\bW\d{7}\b", re.IGNORECASE)
# Which slots a fact answers; obstacle facts are revealed when their obstacle is reported (see _obstacle_shown).
FACT_SLOTS: dict[str, tuple[str, ...]] = {
    "order_id": ("order",),
    "reason": ("reason",),
    "address": ("address",),
    "payment": ("payment",),
}
OBSTACLE_FACTS = {"fallback": "unavailable", "other_payment": "balance", "order_hint": "not_found"}
# The action of each write, in the words a proposal may use (US and UK spellings).
VERBS = {
    "cancel_pending_order": r"\bcancel\w*",
    "modify_pending_order_address": r"\baddress\w*|\bship\w*|\bdeliver\w*|\bsend\w*|\bredirect\w*",
    "modify_pending_order_items": r"\bmodif\w*|\bchang\w*|\bexchang\w*|\bswap\w*|\breplac\w*|\bswitch\w*|\bupgrad\w*"
    r"|\bupdat\w*|->|→|\binstead\b|\bconvert\w*",
    "exchange_delivered_order_items": r"\bexchang\w*|\bswap\w*|\breplac\w*|\bswitch\w*|\bchang\w*|->|→|\binstead\b",
    "return_delivered_order_items": r"\breturn\w*|\bsend (?:it |them |the items? )?back\b|\bsent back\b",
}
REASON_WORDS = {
    "no longer needed": r"no longer|(?:do ?n[o']t|do not|not) (?:need|want)|any ?more|needed|unneeded|unnecessary",
    "ordered by mistake": r"mistake|by accident|accidental|in error|wrong|unintended|unintentional",
}


class UserRecords(UserSimulator):
    """What the verifier reads, and the request progression; ``state`` and ``clock`` read the env's live
    database and turn."""

    def __init__(self, task: Task, state: Callable[[], State], clock: Callable[[], int], patience: int = 4):
        self.task = task
        self.state = state
        self.clock = clock
        self.patience = patience
        self.current = 0  # index of the request being worked on
        self.pushed = False
        self.finished = False
        self.idle = 0
        self.heard: list[tuple[int, str]] = []  # (turn, agent message)
        self.said: list[tuple[int, str]] = []  # (turn, user message), the opening at turn 0
        self.told: dict[str, int] = {}  # fact name -> turn it was first told
        self.confirmations: list[tuple[int, str]] = []  # (turn, order id)
        self.confirmed: list[tuple[int, str, str | None]] = []  # (turn, order id, write tool; None: any)
        self.starts: list[int] = [0]  # index into heard where each raised request begins

    # ---- UserSimulator ---------------------------------------------------------------------------------------
    def opening(self) -> str:
        self.said.append((0, self.task.opening))
        return self.task.opening

    def reply(self, agent_message: str) -> UserReply:
        turn = self.clock()
        self.heard.append((turn, agent_message))
        reply = self._answer(agent_message, turn)
        self.said.append((turn, reply.content))
        return reply

    def _answer(self, message: str, turn: int) -> UserReply:
        raise NotImplementedError

    # ---- what the verifier asks too --------------------------------------------------------------------------
    def heard_during(self, index: int) -> list[tuple[int, str]]:
        """Agent messages heard while request ``index`` was the current one ([] if never raised)."""
        if index >= len(self.starts):
            return []
        end = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.heard)
        return self.heard[self.starts[index] : end]

    def needs_told(self, index: int) -> bool:
        """Every fact request ``index`` needs was told: the first answer stated for it is right."""
        messages = [text for _, text in self.heard_during(index)]
        return all(told(need, messages) for need in self.task.requests[index].needs)

    def needs_stated(self, index: int) -> bool:
        """An answer was stated for every fact request ``index`` needs, right or wrong."""
        messages = [text for _, text in self.heard_during(index)]
        return all(stated(need, messages) for need in self.task.requests[index].needs)

    def effect_done(self, request: Request) -> bool:
        orders = self.state()["orders"]
        return all(orders.get(oid) == record for oid, record in request.expected_orders.items())

    # ---- request progression ---------------------------------------------------------------------------------
    @staticmethod
    def confirming_ids(message: str) -> set[str]:
        """Order ids of a confirmation question (empty when the message is not one or names no order)."""
        ids = set(ORDER_ID.findall(message))
        return ids if CONFIRMATION_QUESTION.search(message) else set()

    def push_due(self, request: Request) -> bool:
        """A push request pushes once, after the agent's first answer to it."""
        return bool(
            request.push
            and not self.pushed
            and (request.push == "other_user" or self.needs_stated(self.current))
        )

    def next_request(self) -> bool:
        """The current request is done: raise the next one (True) or finish (False)."""
        self.current += 1
        self.pushed = False
        if self.current >= len(self.task.requests):
            self.finished = True
            self.current = len(self.task.requests) - 1
            return False
        self.starts.append(len(self.heard))
        return True

    def _request_done(self, request: Request, confirming_ids: set[str]) -> bool:
        if request.transfer:
            return False  # only a transfer ends it, and a transfer ends the episode
        if request.push:
            forbidden = request.order_id if request.push == "status" else request.forbidden_order
            return self.pushed and forbidden not in confirming_ids and self.needs_stated(self.current)
        return self.effect_done(request) and self.needs_stated(self.current)

    def _advance(self) -> UserReply:
        if not self.next_request():
            return UserReply(f"Thank you, that is all I needed. {STOP}", done=True)
        return UserReply(f"Thank you! One more thing: {self.task.requests[self.current].intro}")


class RetailUser(UserRecords):
    """Scripted user of one retail task. ``calls`` reads the env's tool calls so far (for obstacles)."""

    def __init__(
        self,
        task: Task,
        state: Callable[[], State],
        clock: Callable[[], int],
        calls: Callable[[], Sequence[CallRecord]],
        patience: int = 4,
    ):
        super().__init__(task, state, clock, patience)
        self.calls = calls

    def _answer(self, message: str, turn: int) -> UserReply:
        if self.finished:
            return UserReply(f"I have nothing more to add. {STOP}", done=True)
        if len(message) > MAX_MESSAGE_CHARS:
            return self._idle("That is far too long for me to read. Could you keep it short, please?")
        request = self.task.requests[self.current]
        proposal = confirmation_request(message)
        # A proposal that names no order ("Shall I go ahead?") is read with the agent's message before it, if
        # that one was said during this request.
        context = message
        if not ANY_ORDER_ID.search(message) and len(self.heard) - 2 >= self.starts[-1]:
            context = self.heard[-2][1] + "\n" + message
        # Any other request for a yes ("Are you good with that?", "I just need your OK") asks for one when
        # there is an action to say yes to (its verb, or its outcome in full on an order of this request): the
        # reader asks which decision is wanted, not which words.
        if not proposal and assent_request(message):
            named = {_order_id(m) for m in ANY_ORDER_ID.findall(context)}
            complete = (
                bool(named) and named <= request.goal_orders and not self._missing(request, named, context)
            )
            proposal = proposes(context) or complete
        if not proposal:
            context = message
        ids = {_order_id(m) for m in ANY_ORDER_ID.findall(context)} if proposal else set()
        if self._request_done(request, ids):
            return self._advance()
        missing: list[str] = []
        if ids:
            unwanted = sorted(ids - request.goal_orders)
            if unwanted:
                return UserReply(f"No, I did not ask for any change to order {unwanted[0]}.")
            missing = self._missing(request, ids, context)
            if not missing:
                for oid in sorted(ids):
                    self.confirmations.append((turn, oid))
                    self.confirmed += [(turn, oid, tool) for tool in self._tools(request, oid)]
                return UserReply("Yes, please go ahead.")
        slots = asked_slots(message)
        revealed = self._reveal(request, message, slots, turn)
        if revealed:
            return UserReply(revealed)
        if self.push_due(request):
            self.pushed = True
            return UserReply(request.push_text)
        if proposal and (request.writes or request.push):
            if not ids:
                return UserReply("Before I say yes: which order exactly, and what will change?")
            return UserReply(f"Before I say yes, please tell me {' and '.join(missing)}.")
        if slots:
            return self._idle(f"As I said: {request.intro}")
        if any(MORE.search(s) for s in message.splitlines()) and "?" in message:
            return self._idle(f"Yes, my request is not done yet: {request.intro}")
        return self._idle("Could you please help me with my request?")

    def _idle(self, text: str) -> UserReply:
        self.idle += 1
        if self.idle > self.patience:
            self.finished = True
            return UserReply(f"This is not getting anywhere. Goodbye. {STOP}", done=True)
        return UserReply(text)

    def _reveal(self, request: Request, message: str, slots: set[str], turn: int) -> str:
        """The values of the facts the message asks for or whose obstacle it reports ("" when none)."""
        values: list[str] = []

        def tell(fact: UserFact) -> None:
            self.told.setdefault(fact.name, turn)
            if fact.value not in values:
                values.append(fact.value)

        identity = {f.name: f for f in self.task.identity_facts}
        if not self._authenticated():
            # Offered a choice (email or name and zip code), the user gives both unless the email failed.
            if slots & {"email", "identity"} and not ("name_zip" in slots and "email" in self.told):
                tell(identity["email"])
            recovering = (
                self.task.auth == "old_email"
                and self._failed("find_user_id_by_email")
                and reports(message, "not_found")
            )
            if "name_zip" in slots or recovering:
                tell(identity["name_zip"])
        for fact in request.facts:
            obstacle = OBSTACLE_FACTS.get(fact.name)
            if obstacle is not None:
                if self._obstacle_shown(request, obstacle, message):
                    tell(fact)
            elif set(FACT_SLOTS.get(fact.name, ())) & slots:
                tell(fact)
        return " ".join(values)

    def _authenticated(self) -> bool:
        return any(
            c.name in ("find_user_id_by_email", "find_user_id_by_name_zip")
            and c.error is None
            and c.output == self.task.user_id
            for c in self.calls()
        )

    def _failed(self, tool: str, **arguments: Any) -> bool:
        return any(
            c.name == tool
            and c.error == "precondition"
            and all(c.arguments.get(k) == v for k, v in arguments.items())
            for c in self.calls()
        )

    def _obstacle_shown(self, request: Request, obstacle: str, message: str) -> bool:
        """The message reports the obstacle, and the agent has seen it: the read that shows it was made (the
        product, the user's gift card balance, the failed lookup of a wrong order id). A report before it is a
        guess, and the user does not play along (nor read "more than happy to help" as a balance)."""
        if not reports(message, obstacle):
            return False
        return request.obstacle is not None and refusal_shown(self.task, self.calls(), request, self.clock())

    def _tools(self, request: Request, order_id: str) -> list[str]:
        tools = [w.tool for w in request.writes if w.args["order_id"] == order_id]
        if not tools and order_id in (request.order_id, request.forbidden_order) and request.push:
            tools = ["cancel_pending_order"]  # the forbidden cancel the user pushes for
        return tools

    def _missing(self, request: Request, ids: set[str], message: str) -> list[str]:
        """What the proposal leaves out of (or negates in) the action on each named order (empty: none)."""
        missing: list[str] = []
        if ALTERNATIVES.search(message):
            missing.append("one value for each detail, not alternatives")
        for oid in sorted(ids):
            writes = [w for w in request.writes if w.args["order_id"] == oid]
            if not writes:  # a push: the forbidden cancel; naming the action is enough
                if not affirmed(VERBS["cancel_pending_order"], message):
                    missing.append(f"what you will do with order {oid}")
                continue
            for write in writes:
                missing += self._missing_details(request, write, message)
        return list(dict.fromkeys(missing))

    def _missing_details(self, request: Request, write: Write, message: str) -> list[str]:
        text, args, state = message.lower(), write.args, self.task.initial_state
        missing: list[str] = []
        money = [need for need in request.needs if need.kind == "money"]
        named_amount = not money or any(  # stated, not one of a list of candidates
            abs(v - float(money[0].value)) < 0.005 for v in stated_amounts(message, money[0])
        )
        if write.tool == "cancel_pending_order":
            if not (re.search(REASON_WORDS[args["reason"]], text) or (money and named_amount)):
                missing.append("the reason or the refund")
        elif write.tool == "modify_pending_order_address":
            # The street line, or its house number with the zip code and city; any other number is wrong.
            number = args["address1"].split()[0]
            street = affirmed(re.escape(args["address1"]), message)
            parts = re.search(rf"(?<![\d.]){re.escape(number)}(?![\d.])", text) and args["zip"] in text
            if not (street or (parts and args["city"].lower() in text)):
                missing.append("the new address")
        else:
            items = _items(state, args["item_ids"])
            if "new_item_ids" in args:
                for (old, _), new_id in zip(items, args["new_item_ids"], strict=True):
                    new = _variant_options(state, new_id)
                    changed = [v for k, v in new.items() if old["options"].get(k) != v]
                    named = new_id in text or all(affirmed(rf"\b{re.escape(v)}\b", message) for v in changed)
                    if not named:
                        missing.append("the new items")
                        break
            elif not all(i["item_id"] in text or i["name"].lower() in text for i, _ in items):
                missing.append("the items")
            if not named_amount:
                missing.append("the amount")
            if not self._method_named(write, text):
                missing.append("the payment method")
        # The action: its verb, or (but for a cancellation, whose outcome is the verb) its outcome stated in
        # full, no other action named, and nothing in the order's sentences negated ("Order #W... would then go
        # to 12 Oak St"; "we take back items ...; $X goes to ..."). "I will not cancel order ..." proposes
        # nothing, whatever else it says.
        oid = args["order_id"]
        other = any(affirmed(VERBS[tool], message) for tool in VERBS if tool != write.tool)  # another action
        outcome = (
            not missing
            and not other
            and write.tool != "cancel_pending_order"
            and not _negated_order(oid, message)
        )
        if not (affirmed(VERBS[write.tool], message) or outcome) or _negated_action(oid, message):
            missing.insert(0, "what you will do with the order")
        return missing

    def _method_named(self, write: Write, text: str) -> bool:
        method_id = write.args["payment_method_id"]
        user = self.task.initial_state["users"][self.task.user_id]
        method = user["payment_methods"].get(method_id, {})
        if method_id.lower() in text:
            return True
        if method.get("source") == "credit_card":
            return method["last_four"] in text
        if method.get("source") == "paypal":
            return "paypal" in text
        if method.get("source") == "gift_card" and re.search(r"gift ?card", text):
            return True
        order = self.task.initial_state["orders"].get(write.args["order_id"], {})
        original = (order.get("payment_history") or [{}])[0].get("payment_method_id")
        return (
            method_id == original and re.search(r"original (?:payment|method|card|account)", text) is not None
        )


ACTION_WORDS = re.compile(
    r"\b(?:cancel|modif|chang|return|exchang|ship|updat|replac|swap|switch|process|refund|charg|proceed|do)\w*",
    re.IGNORECASE,
)


def proposes(text: str) -> bool:
    """The text states an action of some write without negating it ("I'll cancel order ...")."""
    return any(affirmed(verb, text) for verb in VERBS.values())


def _negated_order(order_id: str, message: str) -> bool:
    """Some sentence that names the order negates anything ("Order #W... won't go to ...")."""
    bare = order_id.lstrip("#")
    return any(bare in s and NEGATOR.search(s) for s in sentences(message))


def _negated_action(order_id: str, message: str) -> bool:
    """A sentence that names the order negates an action on it ("I will not modify order #W...")."""
    bare = order_id.lstrip("#")
    return any(bare in s and negates(ACTION_WORDS, s) for s in sentences(message))


def _order_id(text: str) -> str:
    return "#W" + text.lstrip("#")[1:]


def _items(state: State, item_ids: list[str]) -> list[tuple[dict[str, Any], str]]:
    """(order item record, item id) of each id, from any order of the initial state."""
    found = []
    for item_id in item_ids:
        record = next(
            (i for o in state["orders"].values() for i in o["items"] if i["item_id"] == item_id),
            {"item_id": item_id, "name": "", "options": {}},
        )
        found.append((record, item_id))
    return found


def _variant_options(state: State, item_id: str) -> dict[str, str]:
    for product in state["products"].values():
        if item_id in product["variants"]:
            return product["variants"][item_id]["options"]
    return {}
