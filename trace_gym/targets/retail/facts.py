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
    kind: Literal["money", "word"]
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
