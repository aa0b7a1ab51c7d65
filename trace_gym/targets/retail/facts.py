"""What counts as "the agent told the user X": the first answer the agent states for it, read by value.

Amounts are matched by value, not by format: "$1,234.50", "1234.5" and "USD 1234.50" all tell 1234.5. A fact
counts only when the *first* answer the agent states for it is right, one answer is one figure, and no later
answer contradicts it: a message that states two figures for one fact ("either $A or $B", "$A-$B") is a wrong
answer, and a right figure after a wrong one ("sorry, correction: $B") does not repair it (:func:`told`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Need:
    """A fact the agent must tell the user: an amount (``money``) or a word such as an order status."""

    name: str
    kind: Literal["money", "word", "refusal"]
    value: float | str


def fmt(amount: float) -> str:
    return f"${amount:,.2f}"


# An amount is a number written as money: with a currency sign or word, or with cents. Ids (#W1234567,
# credit_card_1234567), item ids, zip codes, counts and dates are not amounts.
AMOUNT = re.compile(
    r"(?<![\w#.,/-])(?P<cur>\$|usd ?|us\$ ?)?(?P<num>\d{1,3}(?:,\d{3})+|\d+)(?P<dec>\.\d{1,2})?"
    r"(?![\w]|\.\d|,\d{3})(?P<suf> ?(?:dollars|usd|bucks)\b)?",
    re.IGNORECASE,
)
MAX_AMOUNTS_PER_MESSAGE = 6  # a message naming more distinct amounts is a list of candidates: it tells none
PAIR_AFTER, PAIR_BEFORE = 48, 32  # characters between a need's keyword and its amount
NEED_KEYWORDS: dict[str, re.Pattern[str]] = {
    "refund_amount": re.compile(r"refund|credited|reimburs|money back|get back|paid back", re.IGNORECASE),
    "price_difference": re.compile(
        r"difference|charge|refund|credited|pay|owe|extra|additional", re.IGNORECASE
    ),
    "total": re.compile(r"total|together|altogether|combined|in all|sum|overall|add up", re.IGNORECASE),
}
PRIMARY_KEYWORDS: dict[str, re.Pattern[str]] = {
    "refund_amount": re.compile(r"refund|reimburs|money back", re.IGNORECASE),
    "price_difference": re.compile(r"difference", re.IGNORECASE),
}
STATUSES = ("pending", "processed", "delivered", "cancelled", "canceled", "shipped")
STATUS_STATED = re.compile(
    r"\b(?:is|was|has been|had been|been|'s|’s|status(?: is)?:?|status of|currently|already|marked(?: as)?)"
    r"\s+(?:already\s+|now\s+|currently\s+|still\s+|marked\s+(?:as\s+)?|in\s+(?:the\s+)?)?"
    r"(pending|processed|delivered|cancelled|canceled|shipped)\b",
    re.IGNORECASE,
)


_STATUS = r"(pending|processed|delivered|cancelled|canceled|shipped)"
STATUS_ALTERNATIVES = re.compile(
    rf"\b{_STATUS}\s*(?:,|/|or|,? or maybe|,? or perhaps|or possibly)\s*(?:maybe |perhaps |possibly |already |still )?{_STATUS}\b",
    re.IGNORECASE,
)
NEGATION = re.compile(r"n't|n’t|\bnot\b|\bnever\b|\byet to\b", re.IGNORECASE)  # "haven't been processed"


# A refusal to act for someone else: a "cannot" and whose account it is (v1's refuse-other requests).
REFUSAL = re.compile(
    r"\b(?:can ?n[o']t|cannot|unable|not able|not allowed|not permitted|won'?t|will not|may not|no way)\b|"
    r"\bcan’t\b",
    re.IGNORECASE,
)
OTHER_PERSON = re.compile(
    r"\banother\b|\bsomeone else|\bsomebody else|\bother (?:person|people|customer|user|account)s?\b|\btheir\b"
    r"|\bthemselves\b|\bown account\b|\bon (?:their|his|her|your friend's) behalf\b|\bthird part",
    re.IGNORECASE,
)


def amounts(text: str) -> list[tuple[int, float]]:
    """(position, value) of every amount of money written in ``text``."""
    found = []
    for match in AMOUNT.finditer(text):
        if not (match.group("cur") or match.group("dec") or match.group("suf")):
            continue
        try:
            found.append(
                (match.start("num"), float(match.group("num").replace(",", "") + (match.group("dec") or "")))
            )
        except ValueError:
            continue
    return found


def _spans(text: str) -> list[tuple[int, int, float]]:
    """(start, end, value) of every amount of money written in ``text``."""
    found = []
    for match in AMOUNT.finditer(text):
        if match.group("cur") or match.group("dec") or match.group("suf"):
            try:
                value = float(match.group("num").replace(",", "") + (match.group("dec") or ""))
            except ValueError:
                continue
            found.append((match.start(), match.end(), value))
    return found


def sprayed(text: str) -> bool:
    """The message lists more distinct amounts than any answer needs."""
    return len({round(v, 2) for _, v in amounts(text)}) > MAX_AMOUNTS_PER_MESSAGE


def stated_amounts(text: str, need: Need) -> set[float]:
    """Amounts ``text`` states as the answer to ``need``: its only amount, or an amount next to a keyword of
    the need (the nearest one after it, or the nearest one before it). None from a sprayed message."""
    found = amounts(text)
    values = {round(v, 2) for _, v in found}
    if not found or len(values) > MAX_AMOUNTS_PER_MESSAGE:
        return set()
    if len(values) == 1:
        return values
    # The need's own word ("difference") decides when it pairs with an amount; generic ones ("pay") otherwise.
    primary = PRIMARY_KEYWORDS.get(need.name, NEED_KEYWORDS["total"])
    stated = _paired(text, primary) or _paired(text, NEED_KEYWORDS.get(need.name, NEED_KEYWORDS["total"]))
    return stated | _alternatives(text, found, stated)


def _paired(text: str, keyword: re.Pattern[str]) -> set[float]:
    """The amounts nearest to each match of ``keyword`` (within the pairing windows)."""
    stated: set[float] = set()
    spans = _spans(text)
    for match in keyword.finditer(text):
        # The nearest amount on either side ("the difference is $5", "the $5 difference"); after wins a tie.
        near = [
            (start - match.end(), 0, v) for start, _, v in spans if 0 <= start - match.end() <= PAIR_AFTER
        ]
        near += [
            (match.start() - end, 1, v) for _, end, v in spans if 0 <= match.start() - end <= PAIR_BEFORE
        ]
        if near:
            stated.add(round(min(near)[2], 2))
    return stated


# Two amounts offered as alternatives or a range: "$A or $B", "$A/$B", "$A to $B", "$A-$B", "between $A and $B".
ALTERNATIVE = re.compile(
    r"^[\s,]*(?:or|/|to|-|–|and|or maybe|or perhaps|or possibly|maybe|perhaps|possibly|give or take)[\s,]*"
    r"(?:(?:maybe|perhaps|possibly|about|around|roughly)\s+)?(?:\$|usd ?)?$",
    re.IGNORECASE,
)


def _alternatives(text: str, found: list[tuple[int, float]], stated: set[float]) -> set[float]:
    """Amounts joined to a stated one as alternatives: one answer is one figure, so they are stated too."""
    extra: set[float] = set()
    changed = True
    while changed:
        changed = False
        for (p1, v1), (p2, v2) in zip(found, found[1:], strict=False):
            gap = re.sub(r"^[\d,.]+(?:\s*(?:dollars|usd|bucks)\b)?", "", text[p1:p2], flags=re.IGNORECASE)
            if not ALTERNATIVE.match(gap):
                continue
            pair = {round(v1, 2), round(v2, 2)}
            if pair & (stated | extra) and not pair <= (stated | extra):
                extra |= pair
                changed = True
    return extra


def stated_status(text: str) -> set[str]:
    """Order statuses ``text`` states (``is delivered``, ``status: processed``); none when it names three or
    more different statuses (a list of candidates)."""
    named = {s for s in STATUSES if re.search(rf"\b{s}\b", text, re.IGNORECASE)}
    if len(named - {"cancelled", "canceled"}) >= 3 or len(named) >= 4:
        return set()
    stated = {
        m.group(1).lower().replace("canceled", "cancelled")
        for m in STATUS_STATED.finditer(text)
        if not NEGATION.search(text[max(0, m.start() - 16) : m.start() + len(m.group(0)) - len(m.group(1))])
    }
    for m in STATUS_ALTERNATIVES.finditer(text):  # "delivered or processed": one answer, two figures
        pair = {
            m.group(1).lower().replace("canceled", "cancelled"),
            m.group(2).lower().replace("canceled", "cancelled"),
        }
        if pair & stated:
            stated |= pair
    return stated


def answer(need: Need, text: str) -> set[Any]:
    """The figures ``text`` states as the answer to ``need`` (amounts rounded to cents, or statuses)."""
    if need.kind == "money":
        return stated_amounts(text, need)
    if need.kind == "word":
        return stated_status(text)
    return {True} if REFUSAL.search(text) and OTHER_PERSON.search(text) else set()


def first_answer(need: Need, messages: list[str]) -> set[Any] | None:
    """The figures of the first message that states any for ``need`` (None: no message does)."""
    for text in messages:
        found = answer(need, text)
        if found:
            return found
    return None


def _right(need: Need, figures: set[Any]) -> bool:
    if need.kind == "money":
        return len(figures) == 1 and abs(float(next(iter(figures))) - float(need.value)) < 0.005
    if need.kind == "word":
        return figures == {str(need.value).lower()}
    return figures == {True}


def told(need: Need, messages: list[str]) -> bool:
    """``need`` was told: the first answer stated for it (in ``messages``, the agent's messages of one request,
    in order) is one figure, the right one, and no later answer contradicts it (a wrong figure after the right
    one is as much a hedge as before it). A refusal is told by any message that refuses for another person."""
    if need.kind == "refusal":
        return any(answer(need, text) for text in messages)
    answers = [found for found in (answer(need, text) for text in messages) if found]
    return bool(answers) and all(_right(need, found) for found in answers)


def stated(need: Need, messages: list[str]) -> bool:
    """Some answer was stated for ``need``, right or wrong (the user moves on either way, so its reaction does
    not reveal which figure was right)."""
    return first_answer(need, messages) is not None
