"""Tools of a tool world: name, description, JSON Schema parameters, read/write kind, preconditions, handler."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema

State = dict[str, Any]
ToolKind = Literal["read", "write", "reply", "transfer", "think"]


class ToolError(Exception):
    """Raised by a handler (or a failed precondition) when the world refuses a well-formed call.

    The message is shown to the agent verbatim as the tool's answer, so it names the problem.
    """


@dataclass(frozen=True)
class Precondition:
    """A declared, checkable condition on the state and the arguments, e.g. ``order.status == pending``.

    ``check`` returns ``None`` when the condition holds, or the error message shown to the agent.
    """

    description: str
    check: Callable[[State, dict[str, Any]], str | None]


@dataclass(frozen=True)
class Tool:
    """One tool of a domain.

    ``kind`` says how the env treats it: ``read`` tools never change the state, ``write`` tools may (and are
    what final-state checks and confirmation rules are about), ``reply`` tools deliver their ``message``
    argument to the user, ``transfer`` tools hand the conversation to a human and end the episode,
    ``think`` tools (calculators, scratchpads) compute without touching the state.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[State, dict[str, Any]], Any]
    kind: ToolKind = "read"
    preconditions: tuple[Precondition, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        jsonschema.Draft202012Validator.check_schema(self.parameters)
        object.__setattr__(self, "_validator", jsonschema.Draft202012Validator(self.parameters))

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema of this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def argument_errors(self, arguments: dict[str, Any]) -> list[str]:
        """Every JSON Schema violation of ``arguments``, as readable messages (empty when valid)."""
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        messages = [f"{where}: not valid Unicode text (lone surrogate)" for where in _unencodable(arguments)]
        for error in errors:
            where = ".".join(str(p) for p in error.path)
            messages.append(f"{where}: {error.message}" if where else error.message)
        return messages

    def failed_precondition(self, state: State, arguments: dict[str, Any]) -> str | None:
        for precondition in self.preconditions:
            message = precondition.check(state, arguments)
            if message is not None:
                return message
        return None


def _unencodable(value: Any, where: str = "") -> list[str]:
    """Paths of strings that cannot be encoded as UTF-8 (lone surrogates from JSON escapes like "\\udc80").

    Tool handlers may encode, parse or hash their arguments; such text is rejected before it reaches them.
    """
    stack, found = [(value, where)], []
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                found.append(path or "(arguments)")
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(item))
    return sorted(found)
