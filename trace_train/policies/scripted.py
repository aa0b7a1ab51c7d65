"""Scripted agents, for checking the analysis and the envs themselves: no model, the env's own oracle.

``oracle`` replays ``env.unwrapped.oracle_actions()``; ``oracle-without:CAPABILITY`` replays
``oracle_actions(without=CAPABILITY)``, the oracle with exactly that capability removed (targets that implement
it list ``env.unwrapped.ablatable_capabilities``); ``oracle-stop:K`` plays the oracle's first K turns and then
says nothing (an agent that stops, for step 1's "not reached"); ``oracle-wrong-id`` plays the oracle but its
first write names an order id that does not exist (a precise-arguments failure). A scripted agent is told each
new episode (``begin``) because its script comes from the env's current instance.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

ORACLE = "oracle"
ORACLE_WITHOUT = "oracle-without:"
ORACLE_STOP = "oracle-stop:"
ORACLE_WRONG_ID = "oracle-wrong-id"
WRONG_ORDER_ID = "#W0000000"  # retail ids are "#W" + 7 digits; the generator never draws this one
WRITE_PREFIXES = ("cancel_", "modify_", "return_", "exchange_")


class ScriptedAgent:
    """Replays the env's oracle, or the oracle with one capability removed (``without``)."""

    def __init__(self, without: str | None = None, stop: int | None = None, wrong_id: bool = False):
        self.without, self.stop, self.wrong_id = without, stop, wrong_id
        self.name = ORACLE if without is None else ORACLE_WITHOUT + without
        if stop is not None:
            self.name = f"{ORACLE_STOP}{stop}"
        if wrong_id:
            self.name = ORACLE_WRONG_ID
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
        script = list(script)
        if self.stop is not None:
            script = script[: self.stop]
        if self.wrong_id:
            script = wrong_first_write(script)
        self.scripts[slot], self.turns[slot] = script, 0

    def act_slots(self, slots: list[int]) -> list[Any]:
        out = []
        for slot in slots:
            script, turn = self.scripts[slot], self.turns[slot]
            # past the end of the script: an empty reply (the user then ends or the turn limit does)
            out.append(script[turn] if turn < len(script) else {"content": ""})
            self.turns[slot] = turn + 1
        return out


def wrong_first_write(script: list[Any]) -> list[Any]:
    """``script`` with the order id of its first write call replaced by one that does not exist."""
    out = list(script)
    for index, action in enumerate(out):
        calls = action.get("tool_calls") if isinstance(action, dict) else None
        if not calls or not any(c["function"]["name"].startswith(WRITE_PREFIXES) for c in calls):
            continue
        changed = []
        for c in calls:
            arguments = json.loads(c["function"]["arguments"])
            if c["function"]["name"].startswith(WRITE_PREFIXES) and "order_id" in arguments:
                arguments["order_id"] = WRONG_ORDER_ID
            changed.append({**c, "function": {**c["function"], "arguments": json.dumps(arguments)}})
        out[index] = {**action, "tool_calls": changed}
        break
    return out


def scripted_agent(model: str) -> ScriptedAgent | None:
    """The scripted agent ``model`` names (``oracle``, ``oracle-without:CAP``, ``oracle-stop:K``,
    ``oracle-wrong-id``), else None."""
    if model == ORACLE:
        return ScriptedAgent()
    if model == ORACLE_WRONG_ID:
        return ScriptedAgent(wrong_id=True)
    if model.startswith(ORACLE_STOP):
        value = model[len(ORACLE_STOP) :]
        if not value.isdigit():
            raise ValueError(f"oracle-stop: needs a number of turns, e.g. oracle-stop:4, got {model!r}")
        return ScriptedAgent(stop=int(value))
    if model.startswith(ORACLE_WITHOUT):
        capability = model[len(ORACLE_WITHOUT) :]
        if not capability:
            raise ValueError("oracle-without: needs a capability name, e.g. oracle-without:policy-adherence")
        return ScriptedAgent(capability)
    return None
