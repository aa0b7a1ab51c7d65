"""Labels of (trajectory, capability) pairs, and the requirement labeller (the env's own checks).

A label is ``NA`` (the task did not need the capability), ``PRESENT`` (it needed it and the trajectory showed
it) or ``LACKING`` (it needed it and the trajectory did not show it). A labelling is a
:class:`LabelTable`: for each capability, one label per trajectory, in the order of the analysed records.

The requirement labeller reads ``record["requirements"]``, the env's ``info["requirements"]`` at the end of
the episode (capability -> PRESENT / LACKING / NA for the capabilities the task declared; every other
capability is NA). Labels name a cause (issue 28): a target that diagnoses (retail) labels a capability only
where the trajectory reached its decision point (NA: not reached) and reports the *first failure*
(``record["first_failure"]``: capability, agent turn, evidence), which places the highlighted message exactly;
how the episode ended (``record["outcome"]``: out of turns, stopped, invalid-action limit, ...) is not a
capability and is summarised beside the table (:func:`outcome_summary`). Targets that do not report
requirements need the LLM labeller.
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
    first_failures: list[dict[str, Any] | None] = field(default_factory=list)  # per record, where known

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
    turns: dict[str, list[int | None]] = {}
    reasons: dict[str, list[str]] = {}
    for name in names:
        turns[name], reasons[name] = [], []
        for record in records:
            failure = record.get("first_failure")
            if isinstance(failure, dict) and failure.get("capability") == name:
                turns[name].append(agent_message_index(record["messages"], int(failure["turn"])))
                reasons[name].append(
                    f"first failure at agent turn {failure['turn']}: {failure.get('evidence', '')}"
                )
            elif "first_failure" in record:  # a diagnosing target: no failure of this capability to point at
                turns[name].append(None)
                reasons[name].append("")
            else:
                turns[name].append(first_failing_turn(record["messages"]))
                reasons[name].append("")
    return LabelTable(table, turns, reasons, [r.get("first_failure") for r in records])


def agent_message_index(messages: Sequence[dict[str, Any]], turn: int) -> int | None:
    """Index in ``messages`` of the agent's ``turn``-th message (turns count from 1; one assistant message each)."""
    seen = 0
    for i, message in enumerate(messages):
        if message.get("role") == "assistant":
            seen += 1
            if seen == turn:
                return i
    return None


def diagnosed(records: Sequence[dict[str, Any]]) -> bool:
    """Whether the records come from a target that reports first failures and outcomes."""
    return bool(records) and all("first_failure" in r or "outcome" in r for r in records)


def outcome_summary(records: Sequence[dict[str, Any]], success: Sequence[bool]) -> dict[str, Any]:
    """How the failed episodes ended and what their first failure was: outcomes are not capabilities
    (ran out of turns, stopped, invalid-action limit, malformed output) and are reported beside the table.

    ``outcomes``: failed episodes per outcome; ``first_failures``: failed episodes per first-failure capability;
    ``unexplained``: failed episodes with no first failure, per outcome (the failure is the outcome itself)."""
    failed = [r for r, ok in zip(records, success, strict=True) if not ok]
    out: dict[str, Any] = {"failed": len(failed), "outcomes": {}, "first_failures": {}, "unexplained": {}}
    for record in failed:
        outcome = str(record.get("outcome") or ("out_of_turns" if record.get("truncated") else "unknown"))
        out["outcomes"][outcome] = out["outcomes"].get(outcome, 0) + 1
        failure = record.get("first_failure")
        if isinstance(failure, dict):
            name = str(failure.get("capability"))
            out["first_failures"][name] = out["first_failures"].get(name, 0) + 1
        else:
            out["unexplained"][outcome] = out["unexplained"].get(outcome, 0) + 1
    for key in ("outcomes", "first_failures", "unexplained"):
        out[key] = dict(sorted(out[key].items(), key=lambda kv: (-kv[1], kv[0])))
    return out


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
