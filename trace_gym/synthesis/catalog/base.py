"""What every capability family shares: a small retail world, a scripted user, a verifier, ablatable oracles.

A family builds one :class:`Scenario` per seed: a small fresh database made with retail's own generators, the
user's opening and the facts it reveals when asked, the writes the task expects (applied through retail's own
tool handlers to get the expected final state), what the agent must tell, which reads must come first, and the
oracle's script as :class:`Step` objects. A step knows what an agent that lacks one capability does instead,
which is how ``oracle_actions(without=capability)`` builds the "oracle minus one capability" agents of the
isolation matrix. The seven ablations mean the same in every env (and on retail):

* ``precondition-checking``: never reads a record to check a write's preconditions; attempts the write blind;
* ``structured-reasoning``: takes the first candidate record in listing order instead of the one(s) a
  condition or a computation selects, and reports that record's amount;
* ``multi-step-completion``: handles the user's first request only, then says it is done;
* ``precise-arguments``: writes with near-miss arguments (a sibling variant, an order id without its ``#``,
  an address re-formatted instead of copied);
* ``information-gathering``: never asks the user for a missing fact; fills it with a plausible default;
* ``error-recovery``: on a tool error, gives up and tells the user it cannot be done;
* ``policy-adherence``: never asks for confirmation before a write.

The verifier's reward is 1.0 only when every component is 1.0 (a binary, terminal reward: a partly done task
teaches nothing a scripted shortcut could not fake); the components carry the partial credit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from trace_gym.core.env import CallRecord, ChatToolEnv, Episode, Evaluation, Label
from trace_gym.targets.retail.data import STREETS, IdMaker, Sizes, make_order, make_products, make_user, money
from trace_gym.targets.retail.policy import POLICY_V1 as POLICY  # the target's policy
from trace_gym.targets.retail.tasks import Write  # the target's expected-write record, shared
from trace_gym.targets.retail.tools import TOOLS
from trace_gym.worlds import STOP, State, Tool, ToolError, UserReply, UserSimulator, World, clone, state_hash
from trace_gym.worlds.user import CONFIRMATION_QUESTION

CAPABILITIES = (
    "precondition-checking",
    "structured-reasoning",
    "multi-step-completion",
    "precise-arguments",
    "information-gathering",
    "error-recovery",
    "policy-adherence",
)
PC, SR, MS, PA, IG, ER, PO = CAPABILITIES
WRITE_TOOLS = frozenset(name for name, tool in TOOLS.items() if tool.kind == "write")


def _guarded(tool: Tool) -> Tool:
    """The same tool (name, schema, preconditions, messages) whose handler never raises anything but
    ToolError: an unexpected exception (e.g. ``calculate`` on a lone surrogate) is answered as an error, so
    step() never raises whatever a tool's code does with odd input."""
    inner = tool.handler

    def handler(state: State, args: dict[str, Any]) -> Any:
        try:
            return inner(state, args)
        except ToolError:
            raise
        except (ValueError, TypeError, ArithmeticError, RecursionError, LookupError, UnicodeError) as err:
            raise ToolError(f"{tool.name} could not process these arguments ({type(err).__name__})") from None

    return replace(tool, handler=handler)


# Built once at import (the schema checks of a Tool cost more than a reset).
SAFE_TOOLS: dict[str, Tool] = {name: _guarded(tool) for name, tool in TOOLS.items()}
AUTH_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")
USER_DATA_TOOLS = WRITE_TOOLS | {"get_user_details", "get_order_details", "transfer_to_human_agents"}
ORDER_ID = re.compile(r"#W\d{7}\b")
STATUS_WORDS = ("pending", "processed", "delivered", "cancelled")
# A message with more distinct amounts than this tells none of them (spraying numbers is not telling).
MAX_AMOUNTS_PER_EPISODE = 6
AMOUNT = re.compile(r"(?<![\w#.])\$?\d[\d,]*(?:\.\d+)?(?!\.?\d|\w)")
STATE_NAMES = {
    "TX": "Texas", "CO": "Colorado", "WA": "Washington", "MA": "Massachusetts", "IL": "Illinois",
    "AZ": "Arizona", "OR": "Oregon", "GA": "Georgia", "OH": "Ohio", "NC": "North Carolina",
    "CA": "California", "TN": "Tennessee", "PA": "Pennsylvania", "FL": "Florida",
}  # fmt: skip

Action = dict[str, Any]


# ---- actions ---------------------------------------------------------------------------------------------------
def say(text: str) -> Action:
    return {"content": text}


def call(name: str, **arguments: Any) -> Action:
    return calls((name, arguments))


def calls(*pairs: tuple[str, dict[str, Any]]) -> Action:
    return {
        "content": "",
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(pairs)
        ],
    }


@dataclass(frozen=True)
class Step:
    """One oracle turn; ``without[c]`` is what an agent lacking capability ``c`` does instead (``()``: skip)."""

    action: Action
    without: dict[str, tuple[Action, ...]] = field(default_factory=dict)
    halts: frozenset[str] = frozenset()  # lacking one of these, the agent stops after its alternative

    def play(self, lacking: str | None) -> tuple[Action, ...]:
        if lacking is not None and lacking in self.without:
            return self.without[lacking]
        return (self.action,)


# ---- the task as data ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    """Something only the user knows, revealed when the agent's message contains one of ``triggers``."""

    name: str
    value: str
    triggers: tuple[str, ...]


@dataclass(frozen=True)
class Tell:
    """Something the agent must tell: an amount (matched by value) or a word pattern (e.g. an order status)."""

    name: str
    kind: str  # "money" or "pattern"
    value: Any
    exclusive: tuple[str, ...] = ()  # pattern kind: words that, also mentioned, make the message a guess

    def told_in(self, text: str) -> bool:
        if self.kind == "money":
            return any(abs(a - float(self.value)) < 0.005 for a in amounts(text))
        if not re.search(self.value, text, re.IGNORECASE):
            return False
        others = [w for w in self.exclusive if re.search(rf"\b{w}\b", text, re.IGNORECASE)]
        return len(others) <= 2  # the true status and the one needed; naming them all is not telling one


@dataclass
class Scenario:
    """One instance of a family. ``requests`` holds the user's requests (as text, for the instance render)
    and ``request_steps[i]`` the oracle's steps of request i."""

    user_id: str
    state: State
    opening: str
    requests: list[str]
    request_steps: list[list[Step]]
    writes: list[Write] = field(default_factory=list)
    tells: list[Tell] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    confirm_orders: frozenset[str] = frozenset()
    # order -> patterns a confirmation question about it must contain (the action and its details): a yes
    # is given to a stated action, never to a content-free "shall I go ahead with #W...?"
    confirm_details: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reads_before_write: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # order -> reads
    reads_before_tell: tuple[tuple[str, str], ...] = ()  # (tool, key) to read before the first tell
    transfer: bool = False
    details: dict[str, Any] = field(default_factory=dict)  # anything else the instance render should show
    expected: State = field(default_factory=dict)


def amounts(text: str) -> list[float]:
    """Money-like numbers of a message; ids (``#W1234567``, ten-digit ids) are not amounts."""
    found = []
    for match in AMOUNT.findall(ORDER_ID.sub(" ", text)):
        digits = match.lstrip("$").replace(",", "")
        if "." not in digits and len(digits) >= 7:
            continue
        try:
            found.append(float(digits))
        except ValueError:
            continue
    return found


def policy_sections(*headings: str) -> str:
    """Retail-v1's policy preamble plus the named sections, verbatim (matched by heading prefix)."""
    preamble, *sections = POLICY.split("\n## ")
    chosen = []
    for heading in headings:
        found = [s for s in sections if s.lower().startswith(heading.lower())]
        if not found:
            names = [s.splitlines()[0] for s in sections]
            raise LookupError(f"the retail policy has no section {heading!r}; it has {names}")
        chosen.append("## " + found[0].rstrip())
    return "\n\n".join([preamble.rstrip(), *chosen]) + "\n"


# ---- a small fresh world ---------------------------------------------------------------------------------------
@dataclass
class Builder:
    """Draws a small database with retail's generators: a few products, the task's user, a stranger."""

    rng: np.random.Generator
    n_products: int = 4
    variants: tuple[int, int] = (4, 6)
    state: State = field(init=False)
    ids: IdMaker = field(init=False)
    user: dict[str, Any] = field(init=False)
    stranger: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        from trace_gym.targets.retail.data import FIRST_NAMES, LAST_NAMES

        self.ids = IdMaker(self.rng)
        sizes = Sizes(products=self.n_products, users=2, orders_per_user=(1, 1), variants=self.variants)
        products = make_products(self.rng, self.ids, sizes)
        firsts = self.rng.choice(len(FIRST_NAMES), size=2, replace=False)
        lasts = self.rng.choice(len(LAST_NAMES), size=2, replace=False)
        users = [
            make_user(self.rng, self.ids, FIRST_NAMES[int(f)], LAST_NAMES[int(last)])
            for f, last in zip(firsts, lasts, strict=True)
        ]
        self.user, self.stranger = users
        self.state = {"users": {u["user_id"]: u for u in users}, "products": products, "orders": {}}

    def order(self, status: str, n_items: int = 1, user: dict[str, Any] | None = None) -> dict[str, Any]:
        owner = user or self.user
        record = make_order(self.rng, self.ids, owner, self.state["products"], status, n_items)
        self.state["orders"][record["order_id"]] = record
        owner["orders"].append(record["order_id"])
        return record

    def pick(self, values: Sequence[Any]) -> Any:
        return values[int(self.rng.integers(len(values)))]

    def chance(self, probability: float) -> bool:
        return bool(self.rng.random() < probability)

    def address(self) -> dict[str, str]:
        from trace_gym.targets.retail.data import CITIES

        city, code = self.pick(CITIES)
        return {
            "address1": f"{int(self.rng.integers(10, 9999))} {self.pick(STREETS)}",
            "address2": f"Suite {int(self.rng.integers(100, 1000))}" if self.chance(0.5) else "",
            "city": city,
            "state": code,
            "country": "USA",
            "zip": f"{int(self.rng.integers(10000, 99999)):05d}",
        }

    def sibling(self, item_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """An available variant of the same product that differs from ``item_id`` in exactly one option."""
        product, variant = self.variant(item_id)
        for other in sorted(product["variants"].values(), key=lambda v: v["item_id"]):
            diff = [k for k in variant["options"] if other["options"].get(k) != variant["options"][k]]
            if len(diff) == 1 and other["available"]:
                return product, other
        return None

    def ensure_sibling(self, item_id: str) -> dict[str, Any]:
        """A sibling of ``item_id`` (see :meth:`sibling`), added to the product's variants when it has none."""
        found = self.sibling(item_id)
        if found is not None:
            return found[1]
        from trace_gym.targets.retail.data import CATALOG

        product, variant = self.variant(item_id)
        taken = [v["options"] for v in product["variants"].values()]
        prices = {v["price"] for v in product["variants"].values()}
        options, _ = CATALOG[product["name"]]
        for key in variant["options"]:
            for value in options[key]:
                candidate = {**variant["options"], key: value}
                if candidate not in taken:
                    price = money(variant["price"] * float(self.rng.uniform(0.9, 1.1)))
                    while price in prices:
                        price = money(price + 0.37)
                    new_id = self.ids.digits(10)
                    product["variants"][new_id] = {
                        "item_id": new_id,
                        "options": candidate,
                        "price": price,
                        "available": True,
                    }
                    return product["variants"][new_id]
        raise LookupError(f"every option combination of {product['name']} is taken")

    def variant(self, item_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        for product in self.state["products"].values():
            if item_id in product["variants"]:
                return product, product["variants"][item_id]
        raise KeyError(item_id)


def method_phrase(method: dict[str, Any]) -> str:
    """How a user names a payment method: its kind and, in brackets, its id (users read it off their account)."""
    kind = {"credit_card": "credit card", "paypal": "PayPal account", "gift_card": "gift card"}[
        method["source"]
    ]
    return f"my {kind} ({method['id']})"


REASON_MARKERS = {"no longer needed": r"no longer need|(?:not|n't) need", "ordered by mistake": r"mistake"}


def literal(value: str) -> str:
    """A pattern for ``value`` as a whole (a number inside a longer number or a decimal does not count)."""
    return rf"(?<![\w.]){re.escape(value)}(?!\w|\.\d)"


def address_phrase(address: dict[str, str]) -> str:
    parts = [
        address["address1"],
        address["address2"],
        address["city"],
        f"{address['state']} {address['zip']}",
    ]
    return ", ".join(p for p in parts if p) + f", {address['country']}"


def options_phrase(options: dict[str, str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in options.items())


# ---- near-miss arguments (what an agent lacking precise-arguments writes) ---------------------------------------
def near_miss(write: Write, builder: Builder) -> dict[str, Any]:
    args = clone(write.args)
    if "new_item_ids" in args:
        for index, new_id in enumerate(args["new_item_ids"]):
            sibling = builder.sibling(new_id)
            if sibling is not None and sibling[1]["item_id"] not in args["item_ids"]:
                args["new_item_ids"][index] = sibling[1]["item_id"]
                return args
    if "address1" in args:
        if args["address2"]:
            args["address1"], args["address2"] = f"{args['address1']} {args['address2']}", ""
        else:
            args["state"] = STATE_NAMES.get(args["state"], args["state"].lower())
        return args
    args["order_id"] = args["order_id"].lstrip("#")
    return args


# ---- the scripted user -----------------------------------------------------------------------------------------
class CapabilityUser(UserSimulator):
    """Deterministic user: says its opening, confirms writes on its own orders, reveals facts when asked, and
    ends the conversation once the task is done (or after ``patience`` messages that neither ask nor finish).

    A confirmation question must name the order id(s) it is about; the user says yes only when every named
    order is one it wants changed. Its records (what it heard, told, confirmed) feed the verifier.
    """

    def __init__(
        self,
        scenario: Scenario,
        done: Callable[[], bool],
        clock: Callable[[], int],
        patience: int = 3,
    ):
        self.scenario = scenario
        self.done = done
        self.clock = clock
        self.patience = patience
        self.idle = 0
        self.heard: list[tuple[int, str]] = []
        self.told: dict[str, int] = {}
        self.confirmations: list[tuple[int, str]] = []

    def opening(self) -> str:
        return self.scenario.opening

    def reply(self, agent_message: str) -> UserReply:
        turn = self.clock()
        self.heard.append((turn, agent_message))
        if self.done():
            return UserReply(f"Thank you, that is all I needed. {STOP}", done=True)
        named = sorted(set(ORDER_ID.findall(agent_message)))
        if named and CONFIRMATION_QUESTION.search(agent_message):
            if not all(order in self.scenario.confirm_orders for order in named):
                return UserReply("No, please do not do that.")
            details = [p for o in named for p in self.scenario.confirm_details.get(o, ())]
            if all(re.search(p, agent_message, re.IGNORECASE) for p in details):
                self.confirmations.extend((turn, order) for order in named)
                return UserReply("Yes, please go ahead.")
            self.idle += 1
            return UserReply("Before I say yes: what exactly will you do on that order, with which details?")
        text = agent_message.lower()
        asked = [
            fact
            for fact in self.scenario.facts
            if any(re.search(rf"(?<![a-z]){re.escape(t)}", text) for t in fact.triggers)
        ]
        if asked:
            for fact in asked:
                self.told.setdefault(fact.name, turn)
            return UserReply(" ".join(fact.value for fact in asked))
        self.idle += 1
        if self.idle > self.patience:
            return UserReply(f"This is not getting anywhere. Goodbye. {STOP}", done=True)
        return UserReply("Could you please help me with my request?")


# ---- the verifier ----------------------------------------------------------------------------------------------
def attempted(call: CallRecord) -> bool:
    return call.error not in ("parse", "unknown_tool", "schema")


def _normal(args: dict[str, Any]) -> str:
    if "item_ids" in args:
        pairs = sorted(zip(args["item_ids"], args.get("new_item_ids", args["item_ids"]), strict=False))
        args = {**args, "item_ids": [p[0] for p in pairs]}
        if "new_item_ids" in args:
            args["new_item_ids"] = [p[1] for p in pairs]
    return json.dumps(args, sort_keys=True, default=repr)


def verify(
    scenario: Scenario,
    state: State,
    calls: Sequence[CallRecord],
    user: CapabilityUser,
    agent_messages: Sequence[str],
    confirmation_required: bool,
    authentication_required: bool = False,
) -> tuple[dict[str, float], list[str]]:
    """Components (each in [0, 1]) and the names of the broken rules."""
    broken: list[str] = []
    expected = {_normal(w.args): w for w in scenario.writes}
    confirmations = list(user.confirmations)
    orders = scenario.state["orders"]
    first_write: dict[str, int] = {}
    authenticated = not authentication_required
    for c in calls:
        if not attempted(c):
            continue
        if c.name in AUTH_TOOLS:
            if c.error is None and c.output != scenario.user_id:
                broken.append("other_user")
            authenticated = authenticated or (c.error is None and c.output == scenario.user_id)
            continue
        if c.name in USER_DATA_TOOLS and not authenticated:
            broken.append("before_authentication")
        order_id = c.arguments.get("order_id")
        record = orders.get(order_id) if isinstance(order_id, str) else None
        if record is not None and record["user_id"] != scenario.user_id:
            broken.append("other_user")
        if c.name == "transfer_to_human_agents" and c.error is None and not scenario.transfer:
            broken.append("unnecessary_transfer")
        if c.name not in WRITE_TOOLS:
            continue
        if c.error is not None:
            if record is not None:  # the record exists: the write was refused by its state
                broken.append("refused_write")
            continue
        first_write.setdefault(order_id, c.turn)
        write = expected.pop(_normal(c.arguments), None)
        if write is None:
            broken.append("unexpected_write")
        elif any(user.told.get(fact, c.turn) >= c.turn for fact in write.depends):
            broken.append("invented_information")
        if confirmation_required:
            match = next((x for x in confirmations if x[1] == order_id and x[0] < c.turn), None)
            if match is None:
                broken.append("unconfirmed_write")
            else:
                confirmations.remove(match)

    def read_before(tool: str, key: str, turn: float) -> bool:
        return any(
            c.name == tool and c.error is None and key in c.arguments.values() and c.turn < turn
            for c in calls
        )

    for order_id, reads in scenario.reads_before_write.items():
        if order_id in first_write and not all(read_before(t, k, first_write[order_id]) for t, k in reads):
            broken.append("unchecked_write")
    told_turns = {}
    sprayed = len({a for text in agent_messages for a in amounts(text)}) > MAX_AMOUNTS_PER_EPISODE
    for tell in scenario.tells:
        turn = next((t for t, text in user.heard if tell.told_in(text)), None)
        if turn is not None and not (sprayed and tell.kind == "money"):
            told_turns[tell.name] = turn
    if scenario.reads_before_tell and told_turns:
        first = min(told_turns.values())
        if not all(read_before(t, k, first) for t, k in scenario.reads_before_tell):
            broken.append("unchecked_answer")
    transferred = any(c.name == "transfer_to_human_agents" and c.error is None for c in calls)
    expected_orders = scenario.expected["orders"]
    goal_orders = sorted(oid for oid in expected_orders if expected_orders[oid] != orders.get(oid))
    done_orders = sum(state["orders"].get(oid) == expected_orders[oid] for oid in goal_orders)
    components = {
        "final_state": float(state_hash(state) == state_hash(scenario.expected)),
        "orders_done": done_orders / len(goal_orders) if goal_orders else 1.0,
        "facts_told": len(told_turns) / len(scenario.tells) if scenario.tells else 1.0,
        "transfer": float(transferred == scenario.transfer),
        "policy": float(not broken),
    }
    return components, sorted(set(broken))


# ---- the env ---------------------------------------------------------------------------------------------------
class CapabilityEnv(ChatToolEnv):
    """Base of the catalog families: subclasses set the class attributes and implement :meth:`build`."""

    tool_names: ClassVar[tuple[str, ...]] = ()
    policy_headings: ClassVar[tuple[str, ...]] = ()
    confirmation_required: ClassVar[bool] = False
    authentication_required: ClassVar[bool] = False
    key_components: ClassVar[tuple[str, ...]] = ("final_state", "facts_told", "policy")
    dependencies: ClassVar[dict[str, str]] = {}  # capability -> why this env genuinely needs it too
    hint: ClassVar[str] = ""
    ablatable_capabilities: ClassVar[tuple[str, ...]] = CAPABILITIES
    difficulty_levels = (1, 2, 3)
    default_difficulty = 1
    content_split = True  # no test task (up to ids and amounts) ever occurs in the train split
    # How the spec and card describe the family (emission reads these).
    isolates: ClassVar[str] = ""
    transfer_reason: ClassVar[str] = ""
    levels: ClassVar[dict[int, str]] = {}

    def __init__(self, render_mode: str | None = None, difficulty: int | None = None, max_turns: int = 20):
        self.scenario: Scenario | None = None
        self.builder: Builder | None = None
        super().__init__(render_mode, difficulty, max_turns=max_turns)

    @classmethod
    def system_prompt_base(cls) -> str:
        return policy_sections(*cls.policy_headings)

    def build(self, rng: np.random.Generator, difficulty: int) -> tuple[Scenario, Builder]:
        raise NotImplementedError

    def _make_tools(self) -> list[Tool]:
        unknown = [name for name in self.tool_names if name not in TOOLS]
        if unknown:
            raise LookupError(f"{type(self).__name__} names tools retail does not have: {unknown}")
        return [SAFE_TOOLS[name] for name in self.tool_names]

    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        scenario, builder = self.build(rng, difficulty)
        world = World(list(TOOLS.values()), clone(scenario.state))
        for write in scenario.writes:
            result = world.call(write.tool, write.args)
            if result.error is not None:  # a family bug, never an agent's fault
                raise AssertionError(f"{type(self).__name__}: expected write {write} fails: {result.output}")
        scenario.expected = world.state
        self.scenario, self.builder = scenario, builder
        authenticated = f"The user is already authenticated: their user id is {scenario.user_id}."
        system = self.system_prompt_base()
        if "find_user_id_by_email" not in self.tool_names:
            system = f"{system}\n{authenticated}\n"
        user = CapabilityUser(scenario, done=self._goal_met, clock=lambda: self.turn)
        instance = {
            "capability": self.capability,
            "difficulty": difficulty,
            "state": scenario.state,
            "opening": scenario.opening,
            "requests": scenario.requests,
            "writes": [{"tool": w.tool, "args": w.args, "depends": list(w.depends)} for w in scenario.writes],
            "tells": [{"name": t.name, "kind": t.kind, "value": t.value} for t in scenario.tells],
            "facts": [{"name": f.name, "value": f.value} for f in scenario.facts],
            "details": scenario.details,
        }
        return Episode(system, scenario.state, user, instance, hint=self.hint, value_pool=_pool(scenario))

    def task_key(self) -> str:
        """The instance with every number masked: ids, prices and zip codes alone do not make a new task."""
        return re.sub(r"\d+", "0", self.render_instance())

    def _goal_met(self) -> bool:
        assert self.scenario is not None and self.world is not None and self.episode is not None
        components, broken = self._components()
        return components["final_state"] == 1.0 and components["facts_told"] == 1.0

    def _components(self) -> tuple[dict[str, float], list[str]]:
        assert self.scenario is not None and self.world is not None and self.episode is not None
        assert isinstance(self.episode.user, CapabilityUser)
        return verify(
            self.scenario,
            self.world.state,
            self.calls,
            self.episode.user,
            self.agent_messages,
            self.confirmation_required,
            self.authentication_required,
        )

    def _evaluate(self) -> Evaluation:
        components, broken = self._components()
        main = ("final_state", "facts_told", "transfer", "policy")
        reward = float(all(components[name] == 1.0 for name in main))
        shown = all(components[name] == 1.0 for name in self.key_components)
        labels: dict[str, Label] = {self.capability: "PRESENT" if shown else "LACKING"}
        components = {**components, **{f"broken/{name}": 1.0 for name in broken}}
        return Evaluation(reward, components, labels)

    def oracle_actions(self, without: str | None = None) -> list[dict[str, Any]]:
        """The reference solution (``without=None``), or the oracle with one capability removed."""
        if self.scenario is None:
            raise RuntimeError("call reset() before oracle_actions()")
        if without is not None and without not in self.ablatable_capabilities:
            raise ValueError(
                f"unknown capability {without!r}; ablatable: {list(self.ablatable_capabilities)}"
            )
        requests = self.scenario.request_steps
        closing: list[Action] = []
        if without == MS and len(requests) > 1:
            requests = requests[:1]
            closing = [say("I have taken care of your request. Have a nice day!")]
        actions: list[Action] = []
        for step in (step for steps in requests for step in steps):
            actions.extend(step.play(without))
            if without in step.halts:
                return [clone(action) for action in actions]
        return [clone(action) for action in actions + closing]


def _pool(scenario: Scenario) -> dict[str, list[Any]]:
    state = scenario.state
    user = state["users"][scenario.user_id]
    item_ids = sorted({i["item_id"] for o in state["orders"].values() for i in o["items"]})
    variants = sorted({v for p in state["products"].values() for v in p["variants"]})
    return {
        "order_id": sorted(state["orders"]),
        "user_id": sorted(state["users"]),
        "product_id": sorted(state["products"]),
        "item_ids": item_ids,
        "new_item_ids": variants,
        "payment_method_id": sorted(user["payment_methods"]),
        "email": sorted(u["email"] for u in state["users"].values()),
        "expression": ["1 + 1", "100 - 12.5"],
        "reason": ["no longer needed", "ordered by mistake"],
    }


# ---- helpers shared by families ----------------------------------------------------------------------------------
def check_read(tool: str, key_name: str, key: str, blind: tuple[Action, ...] = ()) -> Step:
    """A read that checks a write's precondition; lacking precondition-checking, the agent skips it (or does
    ``blind`` instead, e.g. attempts the write it would have checked)."""
    return Step(call(tool, **{key_name: key}), {PC: blind})


def ask(text: str, *, default_writes: tuple[Action, ...] = ()) -> Step:
    """A question for a missing fact; lacking information-gathering, the agent does not ask."""
    return Step(say(text), {IG: default_writes})


def confirm(text: str) -> Step:
    """A confirmation question; lacking policy-adherence, the agent does not ask."""
    return Step(say(text), {PO: ()})


def write_step(write: Write, builder: Builder, without: dict[str, tuple[Action, ...]] | None = None) -> Step:
    """A write; lacking precise-arguments, the agent writes near-miss arguments."""
    alternatives = {PA: (call(write.tool, **near_miss(write, builder)),), **(without or {})}
    return Step(call(write.tool, **write.args), alternatives)


def total(values: Sequence[float]) -> float:
    return money(sum(values))
