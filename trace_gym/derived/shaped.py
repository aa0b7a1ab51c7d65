"""The declared shaped reward: ordered milestones from the target's own verifier, zero on any violation.

``info["reward_components"][SHAPED_KEY]`` on the last step, in [0, 1]: the share of the milestones after the
agent's start reached *in order* (counting stops at the first one missed), and 0 when the episode broke a
rule (a wrong write, a policy violation). The binary success stays the reward.

* BFCL (per user turn, the target's ``turn_i`` components): the milestones are the user turns from the one
  the agent starts in to the last; a checked turn is reached when BFCL's verdict of it passes, an unchecked
  (missing function / parameter) turn when the agent made no call in it (``turn_i_abstained``). A violation
  is a checked turn whose state check failed (a wrong or missing write), or an unchecked turn where the
  agent called something. Abstaining alone earns nothing: the reward is 0 unless a checked turn passed
  (else an agent that never calls anything would be paid for every unchecked turn it reaches).
* A target with milestone events (retail: ``milestone_events()``, from its verifier's records): the
  milestones are the events the target oracle's own trajectory produces after the agent's start, in the
  order the oracle reaches them, then the binary success. For retail: ``authenticated``, each record read
  (``read <tool> <args>``), each fact the user gave when asked (``told <fact>``), each yes to a proposal
  naming the write (``confirmed <order> <tool>``), each exact write (``write <tool> <args>``), the
  ``transfer``, each required fact told right (``answered <request> <need>``). A milestone is reached when
  the agent's episode has the same event *after the start* (the prefix's events are the oracle's and are not
  paid for; only-talking produces none; a read the prefix already made is no milestone). A violation is any
  of the target's: a broken policy rule, a wrong write (a carried-out write no expected one), a wrong or
  hedged answer, sprayed amounts, a write, answer or refusal before the reads it needs. Talking after the
  oracle's opening earns nothing either: the reward is 0 unless an outcome event (:data:`OUTCOME_EVENTS`: a
  write, a transfer, a required fact told) after the start was reached, as BFCL's rule wants a checked turn
  passed (else ``trace check``'s status talker, the oracle's opening up to its first read and then talk,
  would earn the opening's milestones, more than an agent lacking the capability that breaks a rule).
* Any other target (the generic rule): the milestones are the capabilities of the task in
  ``task_capabilities()`` order, each reached when ``info["requirements"]`` labels it PRESENT, then the
  binary success; a violation is a ``policy`` component (retail) below 1.
"""

from __future__ import annotations

import re
from typing import Any

SHAPED_KEY = "milestones"
# events that are a request's outcome (a write, a transfer, a required fact told): none reached, nothing earned
OUTCOME_EVENTS = ("write ", "transfer", "answered ")
VIOLATION_COMPONENTS = ("policy",)
_TURN = re.compile(r"^turn_(\d+)(_abstained)?$")


def ordered_share(reached: list[bool]) -> float:
    """The share of milestones reached before the first one missed."""
    if not reached:
        return 0.0
    run = 0
    for ok in reached:
        if not ok:
            break
        run += 1
    return run / len(reached)


def per_turn_milestones(
    components: dict[str, float], first_turn: int, n_turns: int
) -> tuple[list[bool], bool]:
    """(milestones of turns ``first_turn..n_turns-1``, violated) from BFCL-style per-turn components."""
    reached: list[bool] = []
    violated = False
    for turn in range(first_turn, n_turns):
        if f"turn_{turn}" in components:
            reached.append(components[f"turn_{turn}"] == 1.0)
            violated = violated or components.get(f"turn_{turn}_state", 1.0) < 1.0
        elif f"turn_{turn}_abstained" in components:
            ok = components[f"turn_{turn}_abstained"] == 1.0
            reached.append(ok)
            violated = violated or not ok
        else:  # never reached (truncated before it)
            reached.append(False)
    return reached, violated


def has_turn_components(components: dict[str, Any]) -> bool:
    return any(_TURN.match(name) for name in components)


def event_milestones(
    reward: float,
    oracle_events: list[tuple[int, str]],
    events: list[tuple[int, str]],
    violations: list[tuple[int, str]],
    start_turn: int,
) -> float:
    """The milestone reward from (agent turn, key) events: the oracle's events after ``start_turn`` in the
    order it reaches them, each reached when the agent's episode has it after ``start_turn``; then success."""
    if violations:
        return 0.0
    # a record the prefix already read is no milestone to read again (the oracle re-reads it; an agent that
    # remembers the prefix's read need not, and the verdict does not ask it to)
    known = {key for turn, key in oracle_events if turn <= start_turn and key.startswith("read ")}
    wanted = list(
        dict.fromkeys(key for turn, key in sorted(oracle_events) if turn > start_turn and key not in known)
    )
    got = {key for turn, key in events if turn > start_turn}
    if any(_outcome(key) for key in wanted) and not any(_outcome(key) for key in wanted if key in got):
        return 0.0  # no outcome reached: replaying the opening and then only talking earns nothing
    return ordered_share([key in got for key in wanted] + [reward == 1.0])


def _outcome(key: str) -> bool:
    return key.startswith(OUTCOME_EVENTS)


def shaped_reward(
    reward: float,
    components: dict[str, float],
    requirements: dict[str, str],
    capabilities: tuple[str, ...],
    first_turn: int | None,
    n_turns: int | None,
) -> float:
    """The milestone reward of a finished episode (see the module docstring)."""
    if any(components.get(name, 1.0) < 1.0 for name in VIOLATION_COMPONENTS):
        return 0.0
    if first_turn is not None and n_turns is not None and has_turn_components(components):
        reached, violated = per_turn_milestones(components, first_turn, n_turns)
        if not any(components.get(f"turn_{turn}") == 1.0 for turn in range(first_turn, n_turns)):
            return 0.0  # abstaining alone earns nothing: a never-acting agent reaches every unchecked turn
    else:
        reached = [requirements.get(c) == "PRESENT" for c in capabilities] + [reward == 1.0]
        violated = False
    return 0.0 if violated else ordered_share(reached)
