"""Turn one assistant action (a dict or the raw text a model generated) into content plus tool calls.

Accepted forms, in the order they are tried:

* a dict ``{"content": str | None, "tool_calls": [...]}`` (OpenAI message), where each call is either
  ``{"id", "type": "function", "function": {"name", "arguments"}}`` or ``{"name", "arguments"}``;
* text with ``<tool_call>{...}</tool_call>`` blocks (Hermes / Qwen / SmolLM style);
* text with fenced JSON blocks (```` ```json {...} ``` ````) that hold a call;
* text that is as a whole a JSON call, a list of calls, or an OpenAI message object;
* anything else is a plain reply to the user.

``arguments`` may be a dict, a JSON string, or a JSON string of a JSON string (double-encoded), as models
produce all three. A malformed call raises :class:`ActionParseError` with a message a model can act on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
# Only ```json and untagged fences can hold a call: a ```python block quoting a dict is text.
FENCED_BLOCK = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
# A call names a tool and passes arguments (or is an OpenAI tool_calls / function object): a reply that quotes
# a record with a "name" key is not a call. Keys are found one by one (linear time; a pattern with ``.*``
# between two keys backtracks quadratically on long JSON-shaped text).
NAME_KEY = re.compile(r'"name"\s*:')
ARGUMENTS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:')
CALL_KEY = re.compile(r'"(?:tool_calls|function)"\s*:')
# Arguments are JSON values: at most this deep and this many values in all (hostile actions must not
# exhaust the stack or the time of step()).
MAX_ARGUMENT_DEPTH = 32
MAX_ARGUMENT_VALUES = 10_000
MAX_ARGUMENT_INT_BITS = 256  # far beyond any id, amount or count; below Python's int-to-str digit limit


class ActionParseError(ValueError):
    """The action could not be read as a reply or as tool calls; the message says why."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class AssistantTurn:
    """One parsed assistant turn: what it says to the user and the tools it calls."""

    content: str
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


def parse_action(action: Any) -> AssistantTurn:
    """Parse one assistant action. Raises :class:`ActionParseError` (and nothing else) when it cannot be read."""
    try:
        return _parse_action(action)
    except ActionParseError:
        raise
    except Exception as err:  # noqa: BLE001 - any Python value may arrive; none may escape as another error
        raise ActionParseError(f"the action could not be read ({type(err).__name__})") from None


def _parse_action(action: Any) -> AssistantTurn:
    if isinstance(action, dict):
        return _parse_message_dict(action)
    if isinstance(action, str):
        return _parse_text(action)
    raise ActionParseError(
        f"an action must be a str or a dict with 'content' and 'tool_calls', got {type(action).__name__}"
    )


def _parse_message_dict(message: dict) -> AssistantTurn:
    unknown = set(message) - {"role", "content", "tool_calls", "reasoning_content", "name"}
    if unknown:
        raise ActionParseError(
            f"unexpected keys {sorted(map(repr, unknown))[:5]} in the action dict; expected 'content' and "
            "'tool_calls'"
        )
    if message.get("role", "assistant") != "assistant":
        raise ActionParseError(f"an action must be an assistant message, got role {message['role']!r}")
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise ActionParseError(f"'content' must be a string or null, got {type(content).__name__}")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ActionParseError(f"'tool_calls' must be a list, got {type(raw_calls).__name__}")
    calls = tuple(_read_call(call, where=f"tool_calls[{i}]") for i, call in enumerate(raw_calls))
    if not calls and isinstance(content, str) and content.strip():
        # A dict whose content carries calls in text form (e.g. an HTTP policy without tool parsing).
        return _parse_text(content)
    return AssistantTurn(content=content, tool_calls=calls)


def _parse_text(text: str) -> AssistantTurn:
    blocks = TOOL_CALL_BLOCK.findall(text)
    if "<tool_call>" in text:
        calls = tuple(_read_call(_load_json(b, "<tool_call> block"), "<tool_call> block") for b in blocks)
        return AssistantTurn(content=_strip(TOOL_CALL_BLOCK.sub("", text)), tool_calls=calls)

    fenced = [b for b in FENCED_BLOCK.findall(text) if _looks_like_call(b)]
    if fenced:
        calls: list[ToolCall] = []
        for block in fenced:
            calls.extend(_calls_from_json(_load_json(block, "fenced JSON block"), "fenced JSON block"))
        remainder = FENCED_BLOCK.sub(lambda m: "" if _looks_like_call(m.group(1)) else m.group(0), text)
        return AssistantTurn(content=_strip(remainder), tool_calls=tuple(calls))

    stripped = text.strip()
    if stripped[:1] in "{[" and _looks_like_call(stripped):
        value = _load_json(stripped, "the reply, which looks like a JSON tool call")
        if isinstance(value, dict) and ("tool_calls" in value or "content" in value) and "name" not in value:
            return _parse_message_dict(value)
        return AssistantTurn(content="", tool_calls=tuple(_calls_from_json(value, "JSON reply")))
    return AssistantTurn(content=text, tool_calls=())


def _looks_like_call(text: str) -> bool:
    if CALL_KEY.search(text):
        return True
    names = [m.start() for m in NAME_KEY.finditer(text)]
    arguments = [m.start() for m in ARGUMENTS_KEY.finditer(text)]
    # Both keys present, in either order (a "name" before some "arguments", or the other way round).
    return bool(names and arguments)


def _strip(text: str) -> str:
    return text.strip()


def _load_json(text: str, where: str, expected: str = '{"name": "<tool name>", "arguments": {...}}') -> Any:
    try:
        return json.loads(text.strip())
    except json.JSONDecodeError as err:
        raise ActionParseError(
            f"invalid JSON in {where}: {err.msg} at position {err.pos}; expected {expected}"
        ) from None
    except ValueError as err:  # e.g. an integer literal beyond Python's digit limit
        raise ActionParseError(f"unreadable JSON in {where}: {str(err)[:120]}") from None
    except RecursionError:  # hostile nesting must not escape step()
        raise ActionParseError(f"JSON in {where} is nested too deeply") from None


def _calls_from_json(value: Any, where: str) -> list[ToolCall]:
    if isinstance(value, list):
        return [_read_call(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        return [_read_call(item, f"{where}.tool_calls[{i}]") for i, item in enumerate(value["tool_calls"])]
    return [_read_call(value, where)]


def _read_call(call: Any, where: str) -> ToolCall:
    if not isinstance(call, dict):
        raise ActionParseError(f"{where}: a tool call must be a JSON object, got {type(call).__name__}")
    call_id = call.get("id") or ""
    if not isinstance(call_id, str):
        raise ActionParseError(f"{where}: 'id' must be a string")
    body = call.get("function", call)
    if not isinstance(body, dict):
        raise ActionParseError(f"{where}: 'function' must be an object with 'name' and 'arguments'")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ActionParseError(f'{where}: missing tool name; expected {{"name": ..., "arguments": {{...}}}}')
    arguments = body.get("arguments", body.get("parameters", {}))
    return ToolCall(name=name, arguments=_decode_arguments(arguments, where, name), id=call_id)


def _decode_arguments(arguments: Any, where: str, name: str) -> dict[str, Any]:
    # Models emit arguments as an object, a JSON string, or a JSON string inside a JSON string.
    for _ in range(3):
        if isinstance(arguments, dict):
            problem = json_value_problem(arguments)
            if problem:
                raise ActionParseError(f"{where}: arguments of {name!r} are not JSON: {problem}")
            return arguments
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            return {}
        if not isinstance(arguments, str):
            break
        arguments = _load_json(arguments, f"the arguments of {name!r} ({where})", "a JSON object")
    raise ActionParseError(
        f"{where}: arguments of {name!r} must be a JSON object, got {type(arguments).__name__}"
    )


def json_value_problem(value: Any) -> str | None:
    """Why ``value`` is not plain JSON data (dicts with string keys, lists, strings, finite numbers, booleans,
    null) within the depth and size limits; ``None`` when it is. Iterative, so hostile nesting cannot raise."""
    stack: list[tuple[Any, str, int]] = [(value, "arguments", 0)]
    seen = 0
    while stack:
        item, where, depth = stack.pop()
        seen += 1
        if seen > MAX_ARGUMENT_VALUES:
            return f"more than {MAX_ARGUMENT_VALUES} values"
        if depth > MAX_ARGUMENT_DEPTH:
            return f"nested deeper than {MAX_ARGUMENT_DEPTH} levels at {where}"
        if item is None or isinstance(item, bool | str):
            continue
        if isinstance(item, int | float):
            if isinstance(item, float) and item != item or item in (float("inf"), float("-inf")):
                return f"{where} is not a finite number"
            # Python refuses int <-> str beyond ~4300 digits (json.dumps would raise): no tool needs such a number.
            if isinstance(item, int) and item.bit_length() > MAX_ARGUMENT_INT_BITS:
                return f"{where} is an integer with more than {MAX_ARGUMENT_INT_BITS} bits"
            continue
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    return f"{where} has a {type(key).__name__} key; JSON keys are strings"
                stack.append((sub, f"{where}.{key}"[:200], depth + 1))
            continue
        if isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]"[:200], depth + 1) for i, sub in enumerate(item))
            continue
        return f"{where} is a {type(item).__name__}, not a JSON value"
    return None


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The text form of one call that policies generate and :func:`parse_action` reads back."""
    return (
        "<tool_call>"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "</tool_call>"
    )
