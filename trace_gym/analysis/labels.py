"""Labels of (trajectory, capability) pairs, and the requirement labeller (the env's own checks).

A label is ``NA`` (the task did not need the capability), ``PRESENT`` (it needed it and the trajectory showed
it) or ``LACKING`` (it needed it and the trajectory did not show it). A labelling is a
:class:`LabelTable`: for each capability, one label per trajectory, in the order of the analysed records.

The requirement labeller reads ``record["requirements"]``, the env's ``info["requirements"]`` at the end of
the episode (capability -> PRESENT / LACKING for the capabilities the task declared; every other capability
is NA). Targets that do not report requirements need the LLM labeller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trace_gym.analysis.aggregate import LABELS, NA

ERROR_PREFIX = "Error"


@dataclass
class LabelTable:
    """``labels[capability][i]`` labels record ``i``; ``turns``/``reasons`` (same shape, optional) say where
    and why, when the labeller knows."""

    labels: dict[str, list[str]]
    turns: dict[str, list[int | None]] = field(default_factory=dict)
    reasons: dict[str, list[str]] = field(default_factory=dict)

    @property
    def capabilities(self) -> list[str]:
        return list(self.labels)

    def turn(self, capability: str, index: int) -> int | None:
        return self.turns.get(capability, [None] * (index + 1))[index]

    def reason(self, capability: str, index: int) -> str:
        values = self.reasons.get(capability)
        return values[index] if values else ""


class LabellingError(ValueError):
    """Records that a labeller cannot label (the message says which and what to do instead)."""


def requirement_labels(
    records: Sequence[dict[str, Any]], capabilities: Sequence[str] | None = None
) -> LabelTable:
    """The env's requirement labels of every record; ``capabilities`` defaults to every name seen."""
    missing = [
        r.get("_line", i + 1) for i, r in enumerate(records) if not isinstance(r.get("requirements"), dict)
    ]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise LabellingError(
            f"{len(missing)} of {len(records)} trajectories carry no requirement labels (lines {shown}): the "
            "target does not report info['requirements']; use the LLM labeller (--labeller llm)"
        )
    names = list(capabilities) if capabilities else sorted({c for r in records for c in r["requirements"]})
    table: dict[str, list[str]] = {}
    for name in names:
        column = []
        for record in records:
            label = record["requirements"].get(name, NA)
            if label not in LABELS:
                raise LabellingError(f"line {record.get('_line')}: requirement label {label!r} for {name}")
            column.append(label)
        table[name] = column
    turns = {name: [first_failing_turn(r["messages"]) for r in records] for name in names}
    return LabelTable(table, turns)


def first_failing_turn(messages: Sequence[dict[str, Any]]) -> int | None:
    """Index of the assistant message to highlight in a failed trajectory when the labeller gives none: the
    first one whose tool result was an error, else the last assistant message (where the agent stopped)."""
    last_assistant = None
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            last_assistant = i
        elif role == "tool" and str(message.get("content") or "").startswith(ERROR_PREFIX):
            return last_assistant
    return last_assistant
