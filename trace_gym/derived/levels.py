"""Start depth as the difficulty ladder (a reverse curriculum).

The conversation is pre-filled with the target oracle's own actions up to a start point before the
capability's decision point ``d`` (an index into the target's ``oracle_actions()``):

| level | prefix (oracle actions replayed) | the agent starts |
|---|---|---|
| 1 (default, easiest) | ``d`` | at the decision itself |
| 2 | ``max(0, d - 2)`` | two oracle actions before it |
| 3 | ``max(0, d - 6)`` | six oracle actions before it |
| 4 (hardest) | ``0`` | at the beginning: the whole target task |

Level 1 is the default: the trainer's adaptive start depth moves up from there.
"""

from __future__ import annotations

LEVELS: tuple[int, ...] = (1, 2, 3, 4)
DEFAULT_LEVEL = 1
# level -> oracle actions before the decision point where the agent starts (None: the whole task)
BACK_OFF: dict[int, int | None] = {1: 0, 2: 2, 3: 6, 4: None}


def prefix_length(decision_point: int, level: int) -> int:
    """How many of the target oracle's actions are replayed before the agent acts."""
    if level not in BACK_OFF:
        raise ValueError(f"difficulty must be one of {list(LEVELS)}, got {level!r}")
    back = BACK_OFF[level]
    return 0 if back is None else max(0, decision_point - back)
