"""The scripted retail user of ``trace/retail-v1``: it understands requests, not keywords.

Deterministic, like v0's (``user.py``, whose bookkeeping it shares), but each agent message is read as
intents and slots:

* the message is split into sentences; only *requests* (questions, or sentences such as "please tell me ...",
  "could you ...", "I'll need ...") can ask for something, so a statement that mentions a card or an address
  asks for nothing;
* slots asked (:data:`SLOTS`): identity (email, name and zip code, or "how can I identify your account?"),
  order, reason, address, payment; every slot asked is answered in one reply, from the facts the user has not
  said yet, or, when the user already said it, by repeating its request;
* obstacles (:data:`OBSTACLES`: not found, not available, balance too low) are answered only when the message
  reports that obstacle *and* it happened: a not-found answer needs the failed lookup in the trajectory;
* a proposal (:data:`CONFIRM`) is confirmed only when it names an order of the user's current goal, the
  action (cancel, change the address, modify, return, exchange) and its details: the items and their new
  variants, the new address, the amount, the payment method, the reason; the user answers "no" to a change it
  did not ask for, and says what is missing otherwise. The yes is recorded as ``(turn, order id, tool)``;
* a request is done when its orders equal the expected records and its facts were stated as answers
  (:func:`~trace_gym.targets.retail.facts.told_v1`: one amount per answer or paired with what it is for;
  listing candidates counts for nothing); then the user raises its next request or ends with ``###STOP###``.

Messages longer than :data:`MAX_MESSAGE_CHARS` are not read (the user asks to keep it short). Every pattern
is a linear-time regular expression.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from trace_gym.core.env import CallRecord
from trace_gym.targets.retail.facts import stated_amounts, told_v1
from trace_gym.targets.retail.tasks import Request, Task, UserFact, Write
from trace_gym.targets.retail.user import ORDER_ID, RetailUser
from trace_gym.worlds import STOP, State, UserReply

MAX_MESSAGE_CHARS = 3000
ANY_ORDER_ID = re.compile(r"#?\bW\d{7}\b", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n+")
REQUEST = re.compile(
    r"\?|\b(?:please|kindly)\b|\b(?:could|can|would|will) you\b|\bmay i (?:have|ask|get|know)\b"
    r"|\bi(?:'ll| will|'d| would)? need\b|\b(?:tell|let|show|send) me\b|\bprovide\b|\bshare\b",
    re.IGNORECASE,
)
SLOTS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "email": r"\be-?mail|\bmail address|\blog-?in\b|\busername\b",
        "name_zip": r"\bname\b|\bzip\b|\bpostal\b|\bpost ?code\b",
        "identity": r"\b(?:identify|verify|verification|authenticat\w*|locate (?:you|your)|look (?:you|it) up)\b"
        r"|\b(?:find|pull up|access|look up) your (?:account|profile|details|records?)\b"
        r"|\bwho (?:you are|i'?m (?:speaking|talking|chatting)|am i (?:speaking|talking|chatting)|is this)\b|\baccount (?:details|information|info)\b",
        "order": r"\border (?:id|ids|number|numbers|no\.?|#|code|reference)\b|\b(?:which|what) (?:order|one|purchase)\b"
        r"|\bwhich of (?:your|the|those) (?:orders|purchases)\b|\border (?:is it|is this|are you referring|do you mean)\b",
        "reason": r"\breason\b|\bwhy\b|\bwhat made you\b|\bwhat(?:'s| is) (?:prompting|behind|wrong)\b|\bmotivat\w*",
        "address": r"\baddress\b|\b(?:ship|send|deliver|mail)\w* (?:it |them |the order |your order |the package )?to\b"
        r"|\bwhere (?:should|would|do|shall|can|will) [^?.!]{0,40}\b(?:ship|send|deliver|go|arrive)\w*"
        r"|\bmoved\b|\bnew (?:location|place|home|residence)\b",
        "payment": r"\bpay\w*|\bcard\b|\bpaypal\b|\bsettle\b|\bcharg\w*|\bbill\w*|\brefund\w*"
        r"|\bwhich (?:method|account)\b|\bdifference\b|\bfund\w*",
    }.items()
}
CONFIRM = re.compile(
    r"\bconfirm\w*|\bproceed\w*|\bgo ahead\b|\b(?:shall|should|may|can) (?:i|we)\b|\bok(?:ay)? (?:to|with|if)\b"
    r"|\bis (?:this|that|everything|all of this|all this) (?:ok|okay|correct|right|alright|fine|accurate|good)\b"
    r"|\b(?:does|do) (?:this|that|these|those|everything) (?:look|sound|seem)\b"
    r"|\bdo you (?:agree|approve|accept|authori[sz]e|want me)\b|\b(?:would|do) you like me to\b|\bwant me to\b"
    r"|\bsound good\b|\byes ?/ ?no\b|\byes or no\b|\bare you sure\b|\bauthori[sz]\w*|\bgo-ahead\b"
    r"|\bgreen light\b|\bhappy (?:for me )?to\b|\bshall i\b|\bright\?"
    r"|\b(?:everything|all|this|that|these)(?: all)? (?:ok|okay|correct|right|good|fine|accurate)\?|\bcorrect\?"
    r"|\bok(?:ay)?\?|\bagreed\?|\bdeal\?",
    re.IGNORECASE,
)
MORE = re.compile(
    r"\banything else\b|\bsomething else\b|\bany other\b|\bis that all\b|\bwhat else\b|\bfurther (?:help|assistance)\b",
    re.IGNORECASE,
)
OBSTACLES: dict[str, re.Pattern[str]] = {
    "not_found": re.compile(
        r"\bnot (?:be )?(?:found|locate|find|exist|match)|\b(?:could ?n[o']t|can ?n[o']t|unable to|failed to|did ?n[o']t)"
        r" (?:find|locate|match|look up|retrieve)|\bno (?:account|user|order|match|record)s?\b|\bdoes ?n[o']t exist"
        r"|\bdoes not exist|\bnot in our system|\bdoes ?n[o']t match\b|\bnothing (?:under|with|for)\b",
        re.IGNORECASE,
    ),
    "unavailable": re.compile(
        r"\bnot available\b|\bunavailable\b|\bout of stock\b|\bsold out\b|\bno longer (?:available|offered|sold|in stock)"
        r"|\bnot in stock\b|\bnot (?:offered|sold|possible to get)\b|\bcan ?n[o']t (?:be )?(?:ordered|selected|chosen)",
        re.IGNORECASE,
    ),
    "balance": re.compile(
        r"\bnot enough\b|\binsufficient\b|\bdoes ?n[o']t cover\b|\bdoes not cover\b|\bnot (?:sufficient|cover)"
        r"|\btoo (?:low|small|little)\b|\bexceeds?\b|\bshort (?:of|by)\b|\bonly has\b|\bless than\b",
        re.IGNORECASE,
    ),
}
# Which slot or obstacle a fact answers (fact name -> slot names; obstacle facts are gated, see _obstacles).
FACT_SLOTS: dict[str, tuple[str, ...]] = {
    "email": ("email", "identity"),
    "name_zip": ("name_zip",),
    "order_id": ("order",),
    "reason": ("reason",),
    "address": ("address",),
    "payment": ("payment",),
}
OBSTACLE_FACTS = {"fallback": "unavailable", "other_payment": "balance", "order_hint": "not_found"}
VERBS = {
    "cancel_pending_order": r"cancel",
    "modify_pending_order_address": r"address|ship|deliver",
    "modify_pending_order_items": r"modif|chang|exchang|swap|replac|switch|upgrad|updat|->|→|\binstead\b",
    "exchange_delivered_order_items": r"exchang|swap|replac|switch|chang|->|→|\binstead\b",
    "return_delivered_order_items": r"return|send (?:it |them )?back",
}
REASON_WORDS = {
    "no longer needed": r"no longer|(?:do ?n[o']t|do not|not) (?:need|want)|any ?more|needed",
    "ordered by mistake": r"mistake|by accident|accidental|in error|wrong",
}


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text) if s.strip()]


def request_text(message: str) -> str:
    """The sentences of ``message`` that ask for something (questions and requests), joined."""
    return "\n".join(s for s in sentences(message) if REQUEST.search(s))


class RetailUserV1(RetailUser):
    """Scripted user of one retail-v1 task. ``calls`` reads the env's tool calls so far (for obstacles)."""

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
        self.confirmed: list[tuple[int, str, str]] = []  # (turn, order id, write tool) the user said yes to

    # ---- what the verifier asks too --------------------------------------------------------------------------
    def heard_during(self, index: int) -> list[tuple[int, str]]:
        """Agent messages heard while request ``index`` was the current one ([] if never raised)."""
        if index >= len(self.starts):
            return []
        end = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.heard)
        return self.heard[self.starts[index] : end]

    def _request_done(self, request: Request, confirming_ids: set[str]) -> bool:
        done = super()._request_done(request, confirming_ids)
        if done and request.push == "other_user":  # the refusal was said, not only a goodbye
            return self.needs_told(self.current)
        return done

    def needs_told(self, index: int) -> bool:
        messages = [text for _, text in self.heard_during(index)]
        return all(told_v1(need, messages) for need in self.task.requests[index].needs)

    # ---- internals -------------------------------------------------------------------------------------------
    def _answer(self, message: str, turn: int) -> UserReply:
        if self.finished:
            return UserReply(f"I have nothing more to add. {STOP}", done=True)
        if len(message) > MAX_MESSAGE_CHARS:
            return self._idle("That is far too long for me to read. Could you keep it short, please?")
        request = self.task.requests[self.current]
        asking = request_text(message)
        proposal = bool(CONFIRM.search(asking))
        ids = {_order_id(m) for m in ANY_ORDER_ID.findall(message)} if proposal else set()
        if self._request_done(request, ids):
            return self._advance()
        if ids:
            unwanted = sorted(ids - request.goal_orders)
            if unwanted:
                return UserReply(f"No, I did not ask for any change to order {unwanted[0]}.")
            missing = self._missing(request, ids, message)
            if not missing:
                for oid in sorted(ids):
                    self.confirmations.append((turn, oid))
                    self.confirmed += [(turn, oid, tool) for tool in self._tools(request, oid)]
                return UserReply("Yes, please go ahead.")
        revealed = self._reveal(request, message, asking, turn)
        if revealed:
            return UserReply(revealed)
        if self.push_due(request):
            self.pushed = True
            return UserReply(request.push_text)
        if proposal and (request.writes or request.push):
            if not ids:
                return UserReply("Before I say yes: which order exactly, and what will change?")
            return UserReply(f"Before I say yes, please tell me {' and '.join(missing)}.")
        if asking and any(p.search(asking) for p in SLOTS.values()):
            return self._idle(f"As I said: {request.intro}")
        if MORE.search(asking):
            return self._idle(f"Yes, my request is not done yet: {request.intro}")
        return self._idle("Could you please help me with my request?")

    def _idle(self, text: str) -> UserReply:
        self.idle += 1
        if self.idle > self.patience:
            self.finished = True
            return UserReply(f"This is not getting anywhere. Goodbye. {STOP}", done=True)
        return UserReply(text)

    def _reveal(self, request: Request, message: str, asking: str, turn: int) -> str:
        """The values of the facts the message asks for or whose obstacle it reports ("" when none)."""
        slots = {name for name, pattern in SLOTS.items() if asking and pattern.search(asking)}
        if "email" in slots and "identity" in slots:
            slots.discard("identity")
        values: list[str] = []

        def tell(fact: UserFact) -> None:
            self.told.setdefault(fact.name, turn)
            if fact.value not in values:
                values.append(fact.value)

        identity = {f.name: f for f in self.task.identity_facts}
        authenticated = self._authenticated()
        if not authenticated:
            if slots & {"email", "identity"} and not ("name_zip" in slots and "email" in self.told):
                tell(identity["email"])
            if "name_zip" in slots or (
                self.task.auth == "old_email"
                and self._failed("find_user_id_by_email")
                and _reports(message, "not_found")
            ):
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
        """The message reports the obstacle, and it happened (a not-found needs the failed lookup)."""
        if not _reports(message, obstacle):
            return False
        if obstacle == "not_found":
            wrong = ORDER_ID.findall(request.intro)
            return bool(wrong) and self._failed("get_order_details", order_id=wrong[0])
        return True

    def _tools(self, request: Request, order_id: str) -> list[str]:
        tools = [w.tool for w in request.writes if w.args["order_id"] == order_id]
        if not tools and order_id in (request.order_id, request.forbidden_order) and request.push:
            tools = ["cancel_pending_order"]  # the forbidden cancel the user pushes for
        return tools

    def _missing(self, request: Request, ids: set[str], message: str) -> list[str]:
        """What the proposal leaves out of the action on each named order (empty: it names it all)."""
        missing: list[str] = []
        for oid in sorted(ids):
            writes = [w for w in request.writes if w.args["order_id"] == oid]
            if not writes:  # a push: the forbidden cancel; naming the action is enough
                if not re.search(VERBS["cancel_pending_order"], message, re.IGNORECASE):
                    missing.append(f"what you will do with order {oid}")
                continue
            for write in writes:
                missing += self._missing_details(request, write, message)
        return list(dict.fromkeys(missing))

    def _missing_details(self, request: Request, write: Write, message: str) -> list[str]:
        text, args, state = message.lower(), write.args, self.task.initial_state
        missing = []
        if not re.search(VERBS[write.tool], text):
            missing.append("what you will do with the order")
        money = [need for need in request.needs if need.kind == "money"]
        named_amount = not money or any(  # stated, not one of a list of candidates
            abs(v - float(money[0].value)) < 0.005 for v in stated_amounts(message, money[0])
        )
        if write.tool == "cancel_pending_order":
            if not (re.search(REASON_WORDS[args["reason"]], text) or (money and named_amount)):
                missing.append("the reason or the refund")
        elif write.tool == "modify_pending_order_address":
            street = args["address1"].lower() in text
            if not (street or (args["zip"] in text and args["city"].lower() in text)):
                missing.append("the new address")
        else:
            items = _items(state, args["item_ids"])
            if "new_item_ids" in args:
                for (old, _), new_id in zip(items, args["new_item_ids"], strict=True):
                    new = _variant_options(state, new_id)
                    changed = [v for k, v in new.items() if old["options"].get(k) != v]
                    if new_id not in text and not all(v.lower() in text for v in changed):
                        missing.append("the new items")
                        break
            elif not all(i["item_id"] in text or i["name"].lower() in text for i, _ in items):
                missing.append("the items")
            if not named_amount:
                missing.append("the amount")
            if not self._method_named(write, text):
                missing.append("the payment method")
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


def _order_id(text: str) -> str:
    return "#W" + text.lstrip("#")[1:]


def _reports(message: str, obstacle: str) -> bool:
    return OBSTACLES[obstacle].search(message) is not None


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
