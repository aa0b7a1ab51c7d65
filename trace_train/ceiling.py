"""The oracle's ceiling under a run's caps: the share of tasks whose own oracle episode fits them.

A rollout cuts a turn at ``max_new_tokens`` tokens and an episode at ``max_turns`` agent turns. On a task whose
oracle needs a longer turn (retail: a write listing several 10-digit item ids is 100-240 SmolLM2 tokens, since
SmolLM2 writes digits one token each) or more turns, no agent can succeed the way the oracle does: the call is
cut mid-JSON and the env reads a malformed action. A success rate measured under such caps mixes the agent's
skill with the caps' ceiling, and a calibration or a GRPO run at a level where most tasks are cut measures
nothing but the caps (the demo's calibration measured 0 success at every level with caps that cut 44-55% of
its tasks' oracle turns and, at the deepest start, 82% of its episodes).

:func:`oracle_ceiling` replays the env's ``oracle_actions()`` on the given train tasks, counts each turn in the
policy's own tokens (its chat renderer, the text it would have to generate) and the turns from the agent's start;
:func:`require_ceiling` refuses a run whose caps leave the oracle less than a given share, naming the cap and
the value that fits. Envs without ``oracle_actions`` have no ceiling (None): nothing is checked.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trace_gym.registration import make_env
from trace_gym.seeds import train_reset_seed


class CeilingError(ValueError):
    """The caps cut the oracle's own episodes on too many tasks; the message names the cap and the fix."""


@dataclass(frozen=True)
class OracleCeiling:
    env_id: str
    level: int | None
    tasks: int
    fit: int  # tasks whose oracle episode fits both caps
    cut_by_tokens: int  # tasks with an oracle turn longer than max_new_tokens
    cut_by_turns: int  # tasks whose oracle needs more than max_turns agent turns
    longest_turn: int  # tokens of the longest oracle turn over these tasks
    most_turns: int  # agent turns of the longest oracle episode over these tasks
    max_new_tokens: int
    max_turns: int

    @property
    def share(self) -> float:
        return self.fit / self.tasks if self.tasks else 1.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "share": round(self.share, 4)}

    def describe(self) -> str:
        where = f"{self.env_id}" + (f" at level {self.level}" if self.level is not None else "")
        parts = [f"the oracle fits the caps on {self.fit}/{self.tasks} train tasks of {where}"]
        if self.cut_by_tokens:
            parts.append(
                f"max_new_tokens {self.max_new_tokens} cuts an oracle turn on {self.cut_by_tokens} task(s) "
                f"(its longest turn is {self.longest_turn} tokens: set max_new_tokens >= {self.longest_turn})"
            )
        if self.cut_by_turns:
            parts.append(
                f"max_turns {self.max_turns} ends the oracle's own episode early on {self.cut_by_turns} task(s) "
                f"(it needs up to {self.most_turns} turns: set max_turns >= {self.most_turns})"
            )
        return "; ".join(parts)


def oracle_ceiling(
    renderer: Any,
    env_id: str,
    *,
    tasks: int,
    difficulty: int | None,
    max_new_tokens: int,
    max_turns: int,
    first_task: int = 0,
) -> OracleCeiling | None:
    """The oracle's ceiling on train tasks ``first_task .. first_task + tasks - 1`` at ``difficulty``, each
    oracle turn counted in ``renderer``'s tokens (a :class:`trace_train.chat.ChatRenderer`); None when the env
    has no oracle."""
    from trace_train.tool_text import assistant_text

    env = make_env(env_id)
    try:
        if not callable(getattr(env.unwrapped, "oracle_actions", None)):
            return None
        fit = cut_tokens = cut_turns = longest = most = 0
        options: dict[str, Any] = {"split": "train"}
        if difficulty is not None:
            options["difficulty"] = difficulty
        for i in range(tasks):
            env.reset(seed=train_reset_seed(first_task + i, env), options=options)
            actions = list(env.unwrapped.oracle_actions())
            lengths = [len(renderer.encode(assistant_text(a))) for a in actions]
            too_long = any(n > max_new_tokens for n in lengths)
            too_many = len(actions) > max_turns
            cut_tokens += too_long
            cut_turns += too_many
            fit += not (too_long or too_many)
            longest = max([longest, *lengths])
            most = max(most, len(actions))
    finally:
        env.close()
    return OracleCeiling(
        env_id, difficulty, tasks, fit, cut_tokens, cut_turns, longest, most, max_new_tokens, max_turns
    )


def require_ceiling(ceiling: OracleCeiling | None, minimum: float, where: str) -> None:
    """Raise :class:`CeilingError` when the oracle fits the caps on less than ``minimum`` of the tasks."""
    if ceiling is None or ceiling.share >= minimum:
        return
    raise CeilingError(
        f"{where}: {ceiling.describe()}. A success rate under these caps measures the caps, not the agent; "
        f"raise them (or leave them out: commands then fit them to the oracle), or lower --min-oracle-ceiling "
        f"(min_oracle_ceiling in a config; now {minimum}) to run anyway"
    )


def check_caps(
    policy: Any,
    env_id: str,
    *,
    difficulty: int | None,
    max_new_tokens: int,
    max_turns: int,
    minimum: float,
    where: str,
    tasks: int = 16,
    first_task: int = 0,
) -> OracleCeiling | None:
    """:func:`oracle_ceiling` on ``policy``'s own renderer, refused below ``minimum`` (:func:`require_ceiling`).

    Measured on train tasks even when the run plays test tasks: the caps are a property of the env's task
    distribution, and test tasks stay unread. None when nothing is checked: ``minimum`` 0, a policy without a chat
    renderer (a served model, a scripted agent) or an env without an oracle."""
    renderer = getattr(policy, "renderer", None)
    if not minimum or renderer is None:
        return None
    ceiling = oracle_ceiling(
        renderer,
        env_id,
        tasks=tasks,
        difficulty=difficulty,
        max_new_tokens=max_new_tokens,
        max_turns=max_turns,
        first_task=first_task,
    )
    require_ceiling(ceiling, minimum, where)
    return ceiling


# Caps a command takes when none is given (``--max-turns`` / ``--max-new-tokens`` left at None): room for the
# oracle's own episode on the env's first train tasks, plus a margin, since an agent rarely takes the oracle's
# shortest path. On retail-v2 at difficulty 1 this gives 12 turns and 192 tokens, the demo's measured caps.
TURN_MARGIN = 2
TOKEN_MARGIN = 1.2
TOKEN_ROUNDING = 32
# envs without an oracle (and served models, whose tokens cannot be counted here) keep these
FALLBACK_TURNS = 8
FALLBACK_NEW_TOKENS = 256


def auto_caps(renderer: Any, env_id: str, difficulty: int | None, tasks: int = 64) -> tuple[int, int]:
    """(max_new_tokens, max_turns) that fit the oracle's episode on ``env_id``'s first ``tasks`` train tasks with
    a margin: the oracle's most turns + :data:`TURN_MARGIN`, its longest turn x :data:`TOKEN_MARGIN` rounded up
    to :data:`TOKEN_ROUNDING` tokens (counted by ``renderer``; None: :data:`FALLBACK_NEW_TOKENS`). An env without
    an oracle gets the fallbacks."""

    class _Count:  # counts nothing: only the oracle's turns matter without a renderer
        @staticmethod
        def encode(_text: str) -> list[int]:
            return []

    ceiling = oracle_ceiling(
        renderer or _Count(),
        env_id,
        tasks=tasks,
        difficulty=difficulty,
        max_new_tokens=10**9,
        max_turns=10**9,
    )
    if ceiling is None:
        return FALLBACK_NEW_TOKENS, FALLBACK_TURNS
    tokens = FALLBACK_NEW_TOKENS
    if renderer is not None:
        tokens = -(-int(ceiling.longest_turn * TOKEN_MARGIN) // TOKEN_ROUNDING) * TOKEN_ROUNDING
    return max(tokens, TOKEN_ROUNDING), ceiling.most_turns + TURN_MARGIN


def fill_caps(settings: Any, renderer: Any, env_id: str, difficulty: int | None) -> Any:
    """``settings`` (a dataclass with ``max_new_tokens`` and ``max_turns``) with each cap left at None set by
    :func:`auto_caps`; unchanged when both are given."""
    import dataclasses

    if settings.max_new_tokens is not None and settings.max_turns is not None:
        return settings
    tokens, turns = auto_caps(renderer, env_id, difficulty)
    return dataclasses.replace(
        settings,
        max_new_tokens=tokens if settings.max_new_tokens is None else settings.max_new_tokens,
        max_turns=turns if settings.max_turns is None else settings.max_turns,
    )
