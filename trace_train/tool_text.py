"""The ``<tool_call>`` text form of assistant turns, kept free of heavy imports (no torch, no transformers).

Local policies (via :mod:`trace_train.chat`), HTTP policies and SFT targets all render tool calls with
:func:`assistant_text`, which writes each call with :func:`trace_gym.core.parsing.format_tool_call`: the same
text the env's parser reads back.
"""

from __future__ import annotations

import json
from typing import Any

from trace_gym.core.parsing import format_tool_call
from trace_train.policies.base import Message

TOOL_CALL_FORMAT = '<tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>'


def arguments_dict(arguments: Any) -> Any:
    """Arguments as JSON values; text that does not parse is kept (the env's parser reports it)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def tool_call_text(call: dict[str, Any]) -> str:
    """One ``<tool_call>`` block for an OpenAI-style call (``{"function": {...}}`` or the function itself)."""
    fn = call.get("function", call)
    return format_tool_call(fn.get("name"), arguments_dict(fn.get("arguments", {})))


def assistant_text(message: Message | str) -> str:
    """The raw text a policy generates for one assistant turn (content, then one block per tool call)."""
    if isinstance(message, str):
        return message
    parts = [message["content"]] if message.get("content") else []
    parts += [tool_call_text(c) for c in message.get("tool_calls") or []]
    return "\n".join(parts)
