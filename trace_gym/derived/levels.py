"""Start depth as the difficulty ladder (a reverse curriculum).

The conversation is pre-filled with the target oracle's own actions up to a start point before the
capability's decision point ``d`` (an index into the target's ``oracle_actions()``). The ``standard`` ladder:

| level | prefix (oracle actions replayed) | the agent starts |
|---|---|---|
| 1 (default, easiest) | ``d`` | at the decision itself |
| 2 | ``max(0, d - 2)`` | two oracle actions before it |
| 3 | ``max(0, d - 6)`` | six oracle actions before it |
| 4 (hardest) | ``0`` | at the beginning: the whole target task |

The ``fine`` ladder (``DerivedCapabilityEnv(..., ladder="fine")``) has a rung per oracle action near the
decision: 0, 1, 2, 3, 4 and 6 actions before it, then the whole task (levels 1-7). For the demo's agent the
standard ladder's step from 0 to 2 actions was a cliff (issue 29: level 1 learnt to 1.00 training success,
level 2 never solved), and an adaptive start depth needs a rung between mastered and failed.

Level 1 is the default: the trainer's adaptive start depth moves up from there.
"""

from __future__ import annotations

# ladder -> level -> oracle actions before the decision point where the agent starts (None: the whole task)
LADDERS: dict[str, dict[int, int | None]] = {
    "standard": {1: 0, 2: 2, 3: 6, 4: None},
    "fine": {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 6, 7: None},
}
DEFAULT_LADDER = "standard"
BACK_OFF: dict[int, int | None] = LADDERS[DEFAULT_LADDER]
LEVELS: tuple[int, ...] = tuple(BACK_OFF)
DEFAULT_LEVEL = 1


def ladder_levels(ladder: str) -> tuple[int, ...]:
    """The levels of ``ladder``, easiest first."""
    if ladder not in LADDERS:
        raise ValueError(f"ladder must be one of {list(LADDERS)}, got {ladder!r}")
    return tuple(LADDERS[ladder])


def prefix_length(decision_point: int, level: int, ladder: str = DEFAULT_LADDER) -> int:
    """How many of the target oracle's actions are replayed before the agent acts."""
    ladder_levels(ladder)  # an unknown ladder is refused by name
    back_off = LADDERS[ladder]
    if level not in back_off or isinstance(level, bool):
        raise ValueError(f"difficulty must be one of {list(back_off)}, got {level!r}")
    back = back_off[level]
    return 0 if back is None else max(0, decision_point - back)
