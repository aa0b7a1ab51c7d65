"""Gymnasium spaces for chat observations and assistant-turn actions.

Both are real ``gymnasium.Space`` subclasses so that ``check_env`` and the passive checker accept them:
``contains`` checks structure (roles, types, tool-call shape), and the seeded ``sample()`` returns
meaningful values. ``AssistantTurnSpace.sample()`` mixes schema-valid tool calls (arguments drawn from the
JSON Schema and from a pool of ids of the current instance), malformed calls and plain replies, in dict and
raw-text form, so random agents exercise every path of ``step``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space

ROLES = ("system", "user", "assistant", "tool")
WORDS = ("hello", "order", "refund", "please", "yes", "no", "thanks", "cancel", "item", "help", "é", "🙂")


def is_tool_call(call: Any) -> bool:
    if not isinstance(call, Mapping):
        return False
    body = call.get("function", call)
    if not isinstance(body, Mapping) or not isinstance(body.get("name"), str):
        return False
    return isinstance(body.get("arguments", {}), str | Mapping)


def is_message(message: Any) -> bool:
    if not isinstance(message, Mapping) or message.get("role") not in ROLES:
        return False
    content = message.get("content")
    if not (isinstance(content, str) or (content is None and message["role"] == "assistant")):
        return False
    if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
        return False
    calls = message.get("tool_calls")
    if calls is None:
        return True
    return message["role"] == "assistant" and isinstance(calls, list) and all(map(is_tool_call, calls))


class ChatObservationSpace(Space[list]):
    """The conversation so far: a list of OpenAI chat messages, starting with the system prompt."""

    def __init__(self, max_messages: int | None = None, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_messages = max_messages

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list) or not x or not all(map(is_message, x)):
            return False
        return self.max_messages is None or len(x) <= self.max_messages

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        rng = self.np_random
        messages: list[dict[str, Any]] = [{"role": "system", "content": _words(rng, 8)}]
        messages.append({"role": "user", "content": _words(rng, 6)})
        for i in range(int(rng.integers(0, 3))):
            call_id = f"call_{i}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": _words(rng, 1), "arguments": "{}"},
            }
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _words(rng, 4)})
        return messages

    def __repr__(self) -> str:
        return f"ChatObservationSpace(max_messages={self.max_messages})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatObservationSpace) and other.max_messages == self.max_messages


class AssistantTurnSpace(Space[Any]):
    """One assistant turn: a raw string, or ``{"content": str | None, "tool_calls": [...]}``."""

    def __init__(
        self,
        tools: Sequence[Mapping[str, Any]] = (),
        seed: int | np.random.Generator | None = None,
    ):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.tools = [tool["function"] for tool in tools]
        self.value_pool: dict[str, list[Any]] = {}

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def set_value_pool(self, pool: Mapping[str, Sequence[Any]]) -> None:
        """Values of the current instance (ids, names...) that sampled arguments draw from, by parameter name."""
        self.value_pool = {key: list(values) for key, values in pool.items() if len(values)}

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if not isinstance(x, Mapping) or not set(x) <= {"role", "content", "tool_calls"}:
            return False
        if x.get("role", "assistant") != "assistant":
            return False
        if not (x.get("content") is None or isinstance(x.get("content"), str)):
            return False
        calls = x.get("tool_calls") or []
        return isinstance(calls, list) and all(map(is_tool_call, calls))

    def sample(self, mask: Any = None, probability: Any = None) -> str | dict[str, Any]:
        rng = self.np_random
        kind = rng.choice(["valid", "valid", "valid_text", "reply", "malformed"]) if self.tools else "reply"
        if kind == "reply":
            return _words(rng, int(rng.integers(0, 8)))
        if kind == "malformed":
            return self._malformed(rng)
        tool = self.tools[int(rng.integers(len(self.tools)))]
        arguments = self.sample_arguments(tool.get("parameters", {}), rng)
        if kind == "valid_text":
            return "<tool_call>" + json.dumps({"name": tool["name"], "arguments": arguments}) + "</tool_call>"
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": tool["name"], "arguments": json.dumps(arguments)},
        }
        return {"content": "", "tool_calls": [call]}

    def sample_arguments(self, schema: Mapping[str, Any], rng: np.random.Generator, name: str = "") -> Any:
        """Draw a value that satisfies a (simple) JSON Schema, preferring values of the current instance."""
        if "enum" in schema:
            return schema["enum"][int(rng.integers(len(schema["enum"])))]
        kind = schema.get("type", "object")
        if name in self.value_pool and kind in ("string", "integer", "number"):
            pool = self.value_pool[name]
            return pool[int(rng.integers(len(pool)))]
        if kind == "object":
            properties = schema.get("properties", {})
            required = set(schema.get("required", properties))
            return {
                key: self.sample_arguments(sub, rng, key)
                for key, sub in properties.items()
                if key in required or rng.random() < 0.5
            }
        if kind == "array":
            items = schema.get("items", {"type": "string"})
            low = int(schema.get("minItems", 1))
            count = int(rng.integers(low, max(low, 3) + 1))
            pool = self.value_pool.get(name)
            if pool and items.get("type") == "string":
                return [pool[int(rng.integers(len(pool)))] for _ in range(count)]
            return [self.sample_arguments(items, rng) for _ in range(count)]
        if kind == "integer":
            return int(rng.integers(schema.get("minimum", 0), schema.get("maximum", 100) + 1))
        if kind == "number":
            return round(float(rng.uniform(schema.get("minimum", 0.0), schema.get("maximum", 1000.0))), 2)
        if kind == "boolean":
            return bool(rng.random() < 0.5)
        return _words(rng, 1)

    def _malformed(self, rng: np.random.Generator) -> str | dict[str, Any]:
        name = self.tools[int(rng.integers(len(self.tools)))]["name"]
        variants = [
            f'<tool_call>{{"name": "{name}", "arguments": {{</tool_call>',  # broken JSON
            {"content": None, "tool_calls": [{"function": {"name": "no_such_tool", "arguments": "{}"}}]},
            {"content": "", "tool_calls": [{"function": {"name": name, "arguments": '{"unexpected": 1}'}}]},
            '{"name": "' + name + '", "arguments": "not json"}',
        ]
        return variants[int(rng.integers(len(variants)))]

    def __repr__(self) -> str:
        return f"AssistantTurnSpace(tools={[t['name'] for t in self.tools]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantTurnSpace) and other.tools == self.tools


def _words(rng: np.random.Generator, count: int) -> str:
    return " ".join(WORDS[int(i)] for i in rng.integers(len(WORDS), size=count))
