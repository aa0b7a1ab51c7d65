"""What counts as "the agent told the user X": loose matching of amounts and words in free text.

Amounts are matched by value, not by format: "$1,234.50", "1234.5" and "USD 1234.50" all tell 1234.5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Need:
    """A fact the agent must tell the user: an amount (``money``) or a word such as an order status."""

    name: str
    kind: Literal["money", "word", "refusal"]
    value: float | str

    def told_in(self, text: str) -> bool:
        if self.kind == "money":
            return any(abs(number - float(self.value)) < 0.005 for number in numbers(text))
        return re.search(rf"\b{re.escape(str(self.value))}\b", text, re.IGNORECASE) is not None


def numbers(text: str) -> list[float]:
    found = []
    for match in NUMBER.findall(text):
        try:
            found.append(float(match.replace(",", "")))
        except ValueError:  # e.g. "1,2,3" collapses to a number anyway; anything else is skipped
            continue
    return found


def fmt(amount: float) -> str:
    return f"${amount:,.2f}"


# ---- v1: a fact counts only when stated as the answer ----------------------------------------------------------
# An amount is a number written as money: with a currency sign or word, or with cents. Ids (#W1234567,
# credit_card_1234567), item ids, zip codes, counts and dates are not amounts.
AMOUNT = re.compile(
    r"(?<![\w#.,/-])(?P<cur>\$|usd ?|us\$ ?)?(?P<num>\d{1,3}(?:,\d{3})+|\d+)(?P<dec>\.\d{1,2})?"
    r"(?![\w]|\.\d|,\d{3})(?P<suf> ?(?:dollars|usd|bucks)\b)?",
    re.IGNORECASE,
)
MAX_AMOUNTS_PER_MESSAGE = 6  # a message naming more distinct amounts is a list of candidates: it tells none
MAX_STATED_PER_NEED = 3  # more distinct amounts stated for one need over a request is guessing: none counts
PAIR_AFTER, PAIR_BEFORE = 48, 32  # characters between a need's keyword and its amount
NEED_KEYWORDS: dict[str, re.Pattern[str]] = {
    "refund_amount": re.compile(r"refund|credited|reimburs|money back|get back|paid back", re.IGNORECASE),
    "price_difference": re.compile(
        r"difference|charge|refund|credited|pay|owe|extra|additional", re.IGNORECASE
    ),
    "total": re.compile(r"total|together|altogether|combined|in all|sum|overall|add up", re.IGNORECASE),
}
STATUSES = ("pending", "processed", "delivered", "cancelled", "canceled", "shipped")
STATUS_STATED = re.compile(
    r"\b(?:is|was|has been|had been|been|'s|’s|status(?: is)?:?|status of|currently|already|marked(?: as)?)"
    r"\s+(?:already\s+|now\s+|currently\s+|still\s+|marked\s+(?:as\s+)?|in\s+(?:the\s+)?)?"
    r"(pending|processed|delivered|cancelled|canceled|shipped)\b",
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
    keyword = NEED_KEYWORDS.get(need.name, NEED_KEYWORDS["total"])
    stated: set[float] = set()
    for match in keyword.finditer(text):
        after = [(p, v) for p, v in found if 0 <= p - match.end() <= PAIR_AFTER]
        before = [(p, v) for p, v in found if 0 <= match.start() - p <= PAIR_BEFORE]
        if after:
            stated.add(round(min(after)[1], 2))
        elif before:
            stated.add(round(max(before)[1], 2))
    return stated


def stated_status(text: str) -> set[str]:
    """Order statuses ``text`` states (``is delivered``, ``status: processed``); none when it names three or
    more different statuses (a list of candidates)."""
    named = {s for s in STATUSES if re.search(rf"\b{s}\b", text, re.IGNORECASE)}
    if len(named - {"cancelled", "canceled"}) >= 3 or len(named) >= 4:
        return set()
    return {
        m.group(1).lower().replace("canceled", "cancelled")
        for m in STATUS_STATED.finditer(text)
        if not NEGATION.search(text[max(0, m.start() - 16) : m.start() + len(m.group(0)) - len(m.group(1))])
    }


def told_v1(need: Need, messages: list[str]) -> bool:
    """``need`` was stated as the answer in one of ``messages`` (the agent's messages of one request), and not
    drowned among guesses: at most :data:`MAX_STATED_PER_NEED` distinct amounts stated for it, and exactly one
    status (the right one) for a word need."""
    if need.kind == "money":
        stated: set[float] = set()
        for text in messages:
            stated |= stated_amounts(text, need)
        if len(stated) > MAX_STATED_PER_NEED:
            return False
        return any(abs(v - float(need.value)) < 0.005 for v in stated)
    if need.kind == "refusal":
        return any(REFUSAL.search(text) and OTHER_PERSON.search(text) for text in messages)
    statuses: set[str] = set()
    for text in messages:
        statuses |= stated_status(text)
    return statuses == {str(need.value).lower()}
