"""The scripted retail user: deterministic, answers from its task, one request at a time.

Each agent message is handled in this order:

1. if the current request is done (its orders equal the expected records and its facts were told since it
   was raised; for a push request, the agent held its ground after the push), the user moves on: it raises
   the next request, or thanks the agent and ends with ``###STOP###``;
2. a confirmation question that names order ids is answered "yes" when every id is an order the current
   request is about (so the user confirms only the writes of its goal, and, pushing against the policy, a
   forbidden one it asked for), "no" otherwise;
3. facts the message asks for (by keyword) are revealed: identity, order id, reason, new address, payment
   method, and the fallbacks of obstacles ("not available", "not enough balance", "not found");
4. a push request pushes once ("can't you make an exception?") after the agent's first answer to it;
5. anything else is idle talk; after ``patience`` idle messages the user gives up (``###STOP###``).

What the user heard, said, confirmed and revealed is recorded with the env's turn for the verifier. The
bookkeeping (records, request progression, when a push is due) is shared with the LLM-played user of
``llm_user.py``, which only takes its words from an LLM.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from trace_gym.targets.retail.tasks import Request, Task, UserFact
from trace_gym.worlds import STOP, State, UserReply, UserSimulator
from trace_gym.worlds.user import CONFIRMATION_QUESTION

ORDER_ID = re.compile(r"#W\d{7}\b")


def triggered(fact: UserFact, message: str) -> bool:
    text = message.lower()
    return any(re.search(rf"(?<![a-z]){re.escape(t)}", text) for t in fact.triggers)


class RetailUser(UserSimulator):
    """Scripted user of one retail task. ``state`` and ``clock`` read the env's live database and turn."""

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

    # ---- what the verifier asks too --------------------------------------------------------------------------
    def heard_since(self, index: int) -> list[tuple[int, str]]:
        """Agent messages heard while request ``index`` was raised or later ([] if never raised)."""
        return self.heard[self.starts[index] :] if index < len(self.starts) else []

    def needs_told(self, index: int) -> bool:
        messages = [text for _, text in self.heard_since(index)]
        return all(any(need.told_in(text) for text in messages) for need in self.task.requests[index].needs)

    def effect_done(self, request: Request) -> bool:
        orders = self.state()["orders"]
        return all(orders.get(oid) == record for oid, record in request.expected_orders.items())

    # ---- bookkeeping shared with the LLM-played user ---------------------------------------------------------
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
            and (request.push == "other_user" or self.needs_told(self.current))
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

    # ---- internals -------------------------------------------------------------------------------------------
    def _answer(self, message: str, turn: int) -> UserReply:
        if self.finished:
            return UserReply(f"I have nothing more to add. {STOP}", done=True)
        request = self.task.requests[self.current]
        ids = self.confirming_ids(message)
        if self._request_done(request, ids):
            return self._advance()
        if ids:
            goal = request.goal_orders
            if ids <= goal:
                self.confirmations += [(turn, oid) for oid in sorted(ids)]
                return UserReply("Yes, please go ahead.")
            return UserReply(f"No, I did not ask for any change to order {sorted(ids - goal)[0]}.")
        available = [*self.task.identity_facts, *request.facts]  # earlier requests' facts are settled
        asked = [fact for fact in available if triggered(fact, message)]
        if asked:
            values: list[str] = []
            for fact in asked:
                self.told.setdefault(fact.name, turn)
                if fact.value not in values:
                    values.append(fact.value)
            return UserReply(" ".join(values))
        if self.push_due(request):
            self.pushed = True
            return UserReply(request.push_text)
        if CONFIRMATION_QUESTION.search(message) and request.writes:
            return UserReply("Before I say yes: which order exactly, and what will change?")
        self.idle += 1
        if self.idle > self.patience:
            self.finished = True
            return UserReply(f"This is not getting anywhere. Goodbye. {STOP}", done=True)
        return UserReply("Could you please help me with my request?")

    def _request_done(self, request: Request, confirming_ids: set[str]) -> bool:
        if request.transfer:
            return False  # only a transfer ends it, and a transfer ends the episode
        if request.push:
            forbidden = request.order_id if request.push == "status" else request.forbidden_order
            return self.pushed and forbidden not in confirming_ids
        return self.effect_done(request) and self.needs_told(self.current)

    def _advance(self) -> UserReply:
        if not self.next_request():
            return UserReply(f"Thank you, that is all I needed. {STOP}", done=True)
        return UserReply(f"Thank you! One more thing: {self.task.requests[self.current].intro}")
