"""The retail user played by an LLM behind an OpenAI-compatible endpoint (``user="llm"`` of the env).

The words come from an LLM (:class:`~trace_gym.worlds.llm_user.LLMUser`) whose instruction is written from
the task (:func:`instruction`): who the user is, the requests in order, the facts it knows and gives only
when asked, which changes it agrees to, how it pushes against the policy, when to end with ``###STOP###``.

The verifier's records stay exact and algorithmic; the bookkeeping is :class:`RetailUser`'s own (``heard``,
``said``, ``starts``, request progression from the live database, when a push is due), and what the scripted
user decides is read off the conversation instead:

* a fact is told at the turn by which its markers (its distinctive values: the email, the order id, the zip
  code, the street, a card's last four digits, see ``UserFact.markers``) appeared in what the user said
  (only after the message raising its request when the request's own wording has them all);
* a confirmation is an affirmative reply ("yes", "confirm", "go ahead", ...) to an agent message naming
  order ids: every id named is confirmed at that turn;
* the current request moves on when its orders equal the expected records and its facts were told (for a
  push request: once the push was due and the agent then held its ground), as with the scripted user.

Text matching on an LLM's replies is looser than the scripted user's own records: an LLM that paraphrases
a street, or says "yes" to a message that names several orders, is recorded by these rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trace_gym.openai_client import OpenAIClient
from trace_gym.targets.retail.tasks import Request, Task, UserFact
from trace_gym.targets.retail.user import ORDER_ID, UserRecords
from trace_gym.worlds import STOP, State, UserReply
from trace_gym.worlds.llm_user import LLMUser

AFFIRMATIVE_START = re.compile(
    r"^\W*(yes|yeah|yep|yup|sure|ok|okay|confirm(ed)?|correct|right|absolutely|definitely|of course|"
    r"go ahead|please (do|go ahead|proceed)|proceed|that'?s (right|correct|fine|good)|sounds good|i confirm)\b",
    re.IGNORECASE,
)
AFFIRMATIVE = re.compile(
    r"\b(i confirm|yes|go ahead|please proceed|you may proceed|please do)\b", re.IGNORECASE
)
NEGATIVE = re.compile(
    r"^\W*(no|nope|nah|not|don'?t|do not|wait|hold on|stop)\b|\b(don'?t|do not|never)\b", re.IGNORECASE
)

# When the user gives each kind of fact (the scripted user's triggers, in words).
WHEN = {
    "email": "the agent asks for your email",
    "name_zip": "the agent asks for your name or zip code, or says your account could not be found",
    "order_id": "the agent asks which order you mean",
    "order_hint": "the agent says it cannot find that order",
    "reason": "the agent asks why you want to cancel",
    "address": "the agent asks for the new address",
    "payment": "the agent asks which payment method to use",
    "fallback": "the agent says the item you want is not available",
    "other_payment": "the agent says your gift card balance is not enough",
}


def affirmative(reply: str) -> bool:
    """The user agrees: starts with yes / sure / confirm / go ahead..., or says "I confirm" / "go ahead"
    without a negation."""
    if AFFIRMATIVE_START.search(reply):
        return True
    return bool(AFFIRMATIVE.search(reply)) and not NEGATIVE.search(reply)


def _fact_line(fact: UserFact) -> str:
    return f'- Only when {WHEN.get(fact.name, "the agent asks for it")}, say: "{fact.value}"'


def _request_text(index: int, request: Request) -> str:
    lines = [f'{index + 1}. "{request.intro}"']
    goal = sorted(o for o in request.goal_orders if o != request.forbidden_order)
    if request.push == "status":
        lines.append(
            f"   You want order {request.order_id} cancelled. If the agent says it cannot be cancelled, push "
            f'back once: "{request.push_text}" If it still refuses, accept that.'
        )
    elif request.push == "other_user":
        lines.append(
            f"   Order {request.forbidden_order} is your friend's, not yours. If the agent refuses, push back "
            f'once: "{request.push_text}" If it still refuses, accept that.'
        )
    elif request.transfer:
        lines.append("   If the agent transfers you to a human agent, that is what you need.")
    elif goal:
        # Name the orders only if the request names them: an order id the user gives when asked stays hidden.
        which = (
            f"order {', '.join(goal)}"
            if all(o in request.intro for o in goal)
            else "the order this request is about"
        )
        lines.append(
            "   When the agent describes exactly this change and asks you to confirm it, answer yes. Agree to "
            f"changes of {which} only."
        )
    else:
        lines.append("   You only want the answer; nothing needs to change.")
    lines += [f"   {_fact_line(fact)}" for fact in request.facts]
    return "\n".join(lines)


def instruction(task: Task) -> str:
    """The user's side of the task, in words, for the LLM's system prompt."""
    user = task.initial_state["users"][task.user_id]
    first, last = user["name"]["first_name"], user["name"]["last_name"]
    requests = "\n".join(_request_text(i, r) for i, r in enumerate(task.requests))
    identity = "\n".join(_fact_line(fact) for fact in task.identity_facts)
    return f"""You are {first} {last}, a customer of an online retail store, polite and brief. You contact \
customer service with the requests below.

Your first message is exactly: "{task.opening}"

Your requests, in this order. Raise the next one only when the agent has handled the current one; never \
mention a request before its turn:
{requests}

What you know about yourself (give each fact only when asked, in these words, and nothing you are not \
told here; if asked for anything else, say you do not know):
{identity}

Never agree to a change you did not ask for. When the agent asks you to confirm a change you asked for, \
answer "Yes, please go ahead." When all your requests are handled, or the agent cannot help any further, \
thank the agent and end your message with {STOP}."""


class RetailLLMUser(UserRecords):
    """The retail user with an LLM's words and the scripted user's bookkeeping (see the module doc)."""

    def __init__(
        self,
        task: Task,
        state: Callable[[], State],
        clock: Callable[[], int],
        model: str,
        client: OpenAIClient,
        **options: Any,
    ):
        super().__init__(task, state, clock)
        self.llm = LLMUser(instruction(task), model, client=client, **options)
        # _note_told's progress per tracked fact (keyed by its place in the task): where its window of ``said``
        # starts, how far it was scanned, and the first turn each of its patterns appeared (None: not yet)
        self._tracked: dict[tuple[int, int], tuple[int, int, list[int | None]]] = {}

    def opening(self) -> str:
        text = self.llm.opening()
        self.said.append((0, text))
        self._note_told(self.said)
        return text

    def _answer(self, message: str, turn: int) -> UserReply:
        ids = self.confirming_ids(message)
        request = self.task.requests[self.current]
        if not self.finished and self._request_done(request, ids):
            self.next_request()
        elif not self.finished and not ids and self.push_due(request):
            self.pushed = True  # the instruction has the LLM push here; the agent's next answer settles it
        reply = self.llm.reply(message)
        named = set(ORDER_ID.findall(message))
        if named and affirmative(reply.content):
            self.confirmations += [(turn, oid) for oid in sorted(named)]
        self._note_told([*self.said, (turn, reply.content)])
        return reply

    def _note_told(self, said: list[tuple[int, str]]) -> None:
        """Record identity facts and the facts of the requests raised so far at the turn they were first said.

        A fact whose markers all appear in its own request's wording (a fallback variant named by options the
        request names too) counts only after the message that raised the request (``said[starts[i]]``).

        ``said`` only grows between calls, so each message is scanned once per fact: a fact's first turn per
        pattern is kept, and a fact is told (as ``UserFact.told_at`` over its window) once every pattern has one.
        A request's facts join when it is raised; then its window so far is scanned once."""
        facts: list[tuple[tuple[int, int], UserFact, int]] = [
            ((-1, j), fact, 0) for j, fact in enumerate(self.task.identity_facts)
        ]
        for index, request in enumerate(self.task.requests[: self.current + 1]):
            for j, fact in enumerate(request.facts):
                if (index, j) in self._tracked:
                    facts.append(((index, j), fact, self._tracked[(index, j)][0]))
                    continue
                worded = fact.told_at([(0, request.intro)]) is not None
                facts.append(((index, j), fact, self.starts[index] + 1 if worded else 0))
        for key, fact, start in facts:
            _, scanned, turns = self._tracked.get(key, (start, start, [None] * len(fact.patterns)))
            for turn, text in said[max(start, scanned) :]:
                for k, pattern in enumerate(fact.patterns):
                    if turns[k] is None and re.search(pattern, text, re.IGNORECASE):
                        turns[k] = turn
            self._tracked[key] = (start, max(start, scanned, len(said)), turns)
            if fact.name not in self.told and all(turn is not None for turn in turns):
                self.told[fact.name] = max(turns)  # type: ignore[type-var]
