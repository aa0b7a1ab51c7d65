"""Scripted agents, for checking the analysis and the envs themselves: no model, the env's own oracle.

``oracle`` replays ``env.unwrapped.oracle_actions()``; ``oracle-without:CAPABILITY`` replays
``oracle_actions(without=CAPABILITY)``, the oracle with exactly that capability removed (targets that implement
it list ``env.unwrapped.ablatable_capabilities``). A scripted agent is told each new episode (``begin``) because
its script comes from the env's current instance.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

ORACLE = "oracle"
ORACLE_WITHOUT = "oracle-without:"


class ScriptedAgent:
    """Replays the env's oracle, or the oracle with one capability removed (``without``)."""

    def __init__(self, without: str | None = None):
        self.without = without
        self.name = ORACLE if without is None else ORACLE_WITHOUT + without
        self.scripts: dict[int, list[Any]] = {}
        self.turns: dict[int, int] = {}

    def check(self, env: gym.Env) -> None:
        """Raise ``ValueError`` when ``env`` cannot give this agent its script (before any episode runs)."""
        unwrapped = env.unwrapped
        if not callable(getattr(unwrapped, "oracle_actions", None)):
            raise ValueError(f"{self.name} needs an env with oracle_actions(); {unwrapped.spec} has none")
        if self.without is not None:
            known = getattr(unwrapped, "ablatable_capabilities", None)
            if not known:  # absent, or declared empty (the env can remove nothing)
                raise ValueError(
                    f"{unwrapped.spec.id if unwrapped.spec else type(unwrapped).__name__} cannot remove a "
                    "capability from its oracle (no ablatable_capabilities / oracle_actions(without=...)); "
                    "use a target that supports it, e.g. trace/retail-v2"
                )
            if self.without not in known:
                raise ValueError(
                    f"cannot remove {self.without!r} from the oracle; this env can remove: {', '.join(known)}"
                )

    def begin(self, slot: int, env: gym.Env) -> None:
        """A new episode started in ``slot`` (after ``env.reset``): take its script."""
        self.check(env)
        unwrapped = env.unwrapped
        if self.without is None:
            script = unwrapped.oracle_actions()
        else:
            script = unwrapped.oracle_actions(without=self.without)
        self.scripts[slot], self.turns[slot] = list(script), 0

    def act_slots(self, slots: list[int]) -> list[Any]:
        out = []
        for slot in slots:
            script, turn = self.scripts[slot], self.turns[slot]
            # past the end of the script: an empty reply (the user then ends or the turn limit does)
            out.append(script[turn] if turn < len(script) else {"content": ""})
            self.turns[slot] = turn + 1
        return out


def scripted_agent(model: str) -> ScriptedAgent | None:
    """The scripted agent ``model`` names (``oracle``, ``oracle-without:CAP``), else None."""
    if model == ORACLE:
        return ScriptedAgent()
    if model.startswith(ORACLE_WITHOUT):
        capability = model[len(ORACLE_WITHOUT) :]
        if not capability:
            raise ValueError("oracle-without: needs a capability name, e.g. oracle-without:policy-adherence")
        return ScriptedAgent(capability)
    return None
