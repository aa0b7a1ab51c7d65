"""General descriptions of the capability names trace's targets declare (retail's seven).

They seed the LLM analysis agent with the target's declared list, and describe requirement-labelled
capabilities in reports and in ``selected_capabilities.json``. They are written for any tool-using domain,
because step 2 builds a fresh environment per selected capability from its name and description.
"""

from __future__ import annotations

DESCRIPTIONS: dict[str, str] = {
    "precondition-checking": (
        "Reads the current state of the records a change depends on (and checks that the change is allowed "
        "in that state) before calling a tool that writes."
    ),
    "structured-reasoning": (
        "Derives the quantities and targets a task needs from several tool results (sums, differences, "
        "extremes, matching descriptions to records) and states them correctly."
    ),
    "multi-step-completion": (
        "Keeps track of every request of a conversation and carries each one through to completion instead "
        "of stopping after the first."
    ),
    "precise-arguments": (
        "Calls write tools with exactly the right identifiers and values, taken from tool results rather than "
        "guessed, and without schema errors."
    ),
    "information-gathering": (
        "Asks the user for every fact only the user knows, before acting on it, instead of assuming or "
        "inventing it."
    ),
    "error-recovery": (
        "Notices when a tool call fails or an assumption turns out wrong, finds out why, and completes the "
        "task another way."
    ),
    "policy-adherence": (
        "Follows the operating rules: confirms consequential actions with the user first, refuses what the "
        "rules forbid, acts only for the authenticated user, and hands over what it cannot do."
    ),
}


def describe(name: str) -> str:
    """The description of a known capability name, else an empty string."""
    return DESCRIPTIONS.get(name, "")
