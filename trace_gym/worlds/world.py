"""A tool world: seeded entity tables plus the tools that read and change them.

Calls are checked in a fixed order (known tool, JSON Schema, declared preconditions, handler); a call that
fails any check leaves the state exactly as it was, because write handlers run on a copy that is committed
only on success.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from trace_gym.worlds.tools import State, Tool, ToolError

InvalidKind = Literal["parse", "unknown_tool", "schema", "precondition"]


@dataclass(frozen=True)
class ToolResult:
    """The answer of one call: ``output`` is what the agent sees; ``error`` names the invalid kind, if any."""

    tool: str
    output: str
    error: InvalidKind | None = None


def canonical_json(value: Any) -> str:
    """Stable JSON: sorted keys, no spaces, so equal states have equal text (and equal hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    raise TypeError(f"state values must be JSON-serialisable, got {type(value).__name__}")


def clone(value: Any) -> Any:
    """Deep copy of plain JSON data (dicts, lists, scalars), several times faster than ``copy.deepcopy``.

    States are plain JSON data by contract (they are hashed as canonical JSON), so nothing else needs copying.
    """
    if isinstance(value, dict):
        return {key: clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone(item) for item in value]
    return value


def state_hash(state: State) -> str:
    """SHA-256 of the canonical JSON of a state, for final-state checks.

    ``surrogatepass``: a tool may store any string an agent sent, lone surrogates (``"\\udc80"``) included;
    the hash must not fail on them (valid UTF-8 text encodes as before)."""
    return hashlib.sha256(canonical_json(state).encode("utf-8", "surrogatepass")).hexdigest()


class World:
    """The mutable state of one episode and the tools that act on it."""

    def __init__(self, tools: list[Tool], state: State):
        names = [tool.name for tool in tools]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"duplicate tool names: {sorted(duplicates)}")
        self.tools = {tool.name: tool for tool in tools}
        self.state = state

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema for tool in self.tools.values()]

    def state_hash(self) -> str:
        return state_hash(self.state)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.tools))
            return ToolResult(
                name, f"Error: unknown tool {name!r}. Available tools: {known}.", "unknown_tool"
            )
        errors = tool.argument_errors(arguments)
        if errors:
            return ToolResult(name, f"Error: invalid arguments for {name}: " + "; ".join(errors), "schema")
        failed = tool.failed_precondition(self.state, arguments)
        if failed is not None:
            return ToolResult(name, f"Error: {failed}", "precondition")
        # Write handlers run on a copy: one that raises half-way must not leave a partial write.
        scratch = clone(self.state) if tool.kind == "write" else self.state
        try:
            output = tool.handler(scratch, arguments)
        except ToolError as err:
            return ToolResult(name, f"Error: {err}", "precondition")
        if tool.kind == "write":
            self.state = scratch
        return ToolResult(name, output if isinstance(output, str) else canonical_json(output))
