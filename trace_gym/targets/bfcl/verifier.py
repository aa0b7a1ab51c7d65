"""BFCL's multi-turn verdict, computed turn by turn on the env's live instances, and trace's labels.

At the end of each user turn the ground truth of that turn runs on a second world (the ground-truth world,
which carries the earlier turns' ground truth), and the turn is checked with BFCL's own sub-checkers
(``bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker``), as ``multi_turn_checker`` does:

* a turn whose ground truth is empty is not checked (its calls, if any, still ran, and a later turn's state
  check sees them);
* otherwise the agent must have made at least one call in the turn (``empty_turn_model_response``), every
  instance's public attributes must equal the ground-truth world's (``state_checker``), and every result of
  the turn's ground-truth calls must occur among the results of all the agent's calls so far, in any order
  (``response_checker``).

The episode's reward is 1.0 iff every turn was reached and passed: BFCL fails an entry whose turns do not
all come back (``multi_turn:force_terminated``: the step limit of a turn, or trace's turn limit) and stops at
the first failing turn, which gives the same verdict as checking every turn.

Requirement labels (``info["requirements"]``), for the turns the agent finished, each capability judged only
where a turn needs it:

* ``state-changing-calls``: turns whose ground truth calls a write tool; PRESENT iff their state checks pass;
* ``information-retrieval``: turns whose ground truth calls a read tool; PRESENT iff their response checks pass;
* ``missing-function-awareness`` / ``missing-parameter-awareness``: the empty-ground-truth turns of those
  categories; PRESENT iff the agent made no call in the turn (BFCL's ``multi_turn_irrelevance_checker``; the
  verdict of this bfcl-eval release does not use it, so these labels never change the reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trace_gym.core.env import Evaluation, Label
from trace_gym.targets.bfcl.data import BfclTask

Capability = Literal[
    "state-changing-calls",
    "information-retrieval",
    "missing-function-awareness",
    "missing-parameter-awareness",
]
CAPABILITIES: tuple[Capability, ...] = (
    "state-changing-calls",
    "information-retrieval",
    "missing-function-awareness",
    "missing-parameter-awareness",
)
# For reports and step 2 (trace_gym.analysis.capabilities describes retail's names only).
DESCRIPTIONS: dict[Capability, str] = {
    "state-changing-calls": (
        "Makes the calls that change the state exactly as the request needs them (right functions, right "
        "arguments, right order, after logging in or moving where needed), and no others."
    ),
    "information-retrieval": (
        "Calls the functions whose answers the request asks for or depends on, with the right arguments."
    ),
    "missing-function-awareness": (
        "Notices that none of the available functions can do what is asked, says so, and calls nothing."
    ),
    "missing-parameter-awareness": (
        "Notices that the request lacks a value a function needs, asks for it, and calls nothing until told."
    ),
}
ABSTAIN_CAPABILITY: dict[str, Capability] = {
    "miss_func": "missing-function-awareness",
    "miss_param": "missing-parameter-awareness",
}


@dataclass(frozen=True)
class TurnCheck:
    """BFCL's checks of one finished turn (``checked`` is False where the ground truth is empty)."""

    turn: int
    checked: bool
    called: bool  # the agent made at least one call that ran
    state: bool
    response: bool

    @property
    def passed(self) -> bool:
        return not self.checked or (self.called and self.state and self.response)


def _bfcl_checker() -> Any:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker

    return multi_turn_checker


def check_turn(
    turn: int,
    ground_truth: tuple[str, ...],
    ground_truth_results: list[str],
    model_instances: dict[str, Any],
    ground_truth_instances: dict[str, Any],
    calls_in_turn: int,
    all_model_results: list[str],
) -> TurnCheck:
    """One turn, as ``multi_turn_checker`` checks it (but every check is run, for the components)."""
    if not ground_truth:
        return TurnCheck(turn, checked=False, called=calls_in_turn > 0, state=True, response=True)
    checker = _bfcl_checker()
    state = bool(checker.state_checker(model_instances, ground_truth_instances)["valid"])
    response = bool(checker.response_checker(all_model_results, ground_truth_results, turn)["valid"])
    return TurnCheck(turn, checked=True, called=calls_in_turn > 0, state=state, response=response)


def turn_needs(task: BfclTask, kinds: dict[str, str], turn: int) -> list[Capability]:
    """The capabilities turn ``turn`` of the task exercises (from its ground truth's tool kinds)."""
    calls = task.ground_truth[turn]
    if not calls:
        capability = ABSTAIN_CAPABILITY.get(task.category)
        return [capability] if capability else []
    names = {call.split("(", 1)[0].strip() for call in calls}
    needs: list[Capability] = []
    if any(kinds.get(name) == "write" for name in names):
        needs.append("state-changing-calls")
    if any(kinds.get(name) in ("read", "think") for name in names):
        needs.append("information-retrieval")
    return needs


def evaluate(task: BfclTask, checks: list[TurnCheck], kinds: dict[str, str]) -> Evaluation:
    """The episode's reward (BFCL's verdict), per-turn components and requirement labels."""
    finished = len(checks) == len(task.ground_truth)
    components: dict[str, float] = {"all_turns_finished": float(finished)}
    for check in checks:
        if check.checked:
            components[f"turn_{check.turn}"] = float(check.passed)
            components[f"turn_{check.turn}_state"] = float(check.state)
            components[f"turn_{check.turn}_response"] = float(check.response)
        else:
            components[f"turn_{check.turn}_abstained"] = float(not check.called)
    reward = float(finished and all(check.passed for check in checks))
    return Evaluation(reward, components, requirements(task, checks, kinds))


def requirements(task: BfclTask, checks: list[TurnCheck], kinds: dict[str, str]) -> dict[str, Label]:
    verdicts: dict[str, list[bool]] = {}
    for check in checks:
        for capability in turn_needs(task, kinds, check.turn):
            if capability == "state-changing-calls":
                ok = check.called and check.state
            elif capability == "information-retrieval":
                ok = check.called and check.response
            else:
                ok = not check.called
            verdicts.setdefault(capability, []).append(ok)
    return {cap: "PRESENT" if all(oks) else "LACKING" for cap, oks in verdicts.items()}
