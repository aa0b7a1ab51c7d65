"""OpenAI chat-completions wire format: request validation, responses, stream chunks, errors.

Kept apart from the HTTP server so that the mapping between OpenAI's API and trace's text-level policies is
readable (and testable) on its own:

* request messages become a trace conversation (text parts joined; images refused);
* the policy's raw assistant text is parsed with the envs' own parser
  (:func:`trace_gym.core.parsing.parse_action`), so ``<tool_call>`` blocks, fenced JSON and OpenAI-style
  objects all come back as structured ``tool_calls`` with JSON-text arguments, as OpenAI sends them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from trace_gym.core.parsing import ActionParseError, parse_action
from trace_train.policies.base import SamplingConfig

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_NEW_TOKENS = 4096


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completions request."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    sampling: SamplingConfig
    stream: bool
    include_usage: bool
    parse_tools: bool


def _fail(message: str, param: str, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise _fail(f"'{key}' must be a number in [{low}, {high}], got {value!r}", key)
    return float(value)


def parse_request(body: Any, served: tuple[str, ...]) -> ChatRequest:
    """Validate a request body; raises :class:`APIError` naming the offending parameter."""
    if not isinstance(body, dict):
        raise _fail("the request body must be a JSON object", "body", "invalid_type")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _fail("'model' is required (see GET /v1/models)", "model", "missing_required_parameter")
    if model not in served:
        raise APIError(
            404,
            f"The model '{model}' does not exist; this server serves {', '.join(served)}",
            param="model",
            code="model_not_found",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail(
            "'messages' must be a non-empty array of messages", "messages", "missing_required_parameter"
        )
    conversation = [_message(m, i) for i, m in enumerate(messages)]
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(_is_function_tool(t) for t in tools):
        raise _fail(
            "'tools' must be an array of {type: 'function', function: {name, description?, parameters?}}",
            "tools",
        )
    tool_choice = body.get("tool_choice", "auto")
    if tool_choice not in ("auto", "none", None):
        raise _fail(
            f"tool_choice {tool_choice!r} is not supported: this server cannot force a call; use 'auto' or 'none'",
            "tool_choice",
            "unsupported_value",
        )
    n = body.get("n", 1)
    if n not in (1, None):
        raise _fail("only n=1 is supported", "n", "unsupported_value")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = 512
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_NEW_TOKENS
    ):
        raise _fail(
            f"'max_tokens' must be an integer in [1, {MAX_NEW_TOKENS}], got {max_tokens!r}", "max_tokens"
        )
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
        raise _fail("'stop' must be a string or an array of at most 4 strings", "stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _fail(f"'seed' must be an integer, got {seed!r}", "seed")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("'stream' must be a boolean", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _fail("'stream_options' must be an object", "stream_options")
    sampling = SamplingConfig(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        max_new_tokens=max_tokens,
        stop=tuple(stop),
        seed=seed,
    )
    return ChatRequest(
        model=model,
        messages=conversation,
        tools=[dict(t) for t in tools] if tool_choice != "none" else [],
        sampling=sampling,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        parse_tools=bool(tools) and tool_choice != "none",
    )


def _is_function_tool(tool: Any) -> bool:
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        return False
    fn = tool.get("function")
    return (
        isinstance(fn, dict)
        and isinstance(fn.get("name"), str)
        and isinstance(fn.get("parameters", {}), dict)
    )


def _message(message: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise _fail(f"{where} must be an object with a role in {list(ROLES)}", where)
    role = "system" if message["role"] == "developer" else message["role"]
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text is understood
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise _fail(f"{where}.content: only text parts are supported", f"{where}.content")
            texts.append(part["text"])
        content = "".join(texts)
    if content is not None and not isinstance(content, str):
        raise _fail(f"{where}.content must be a string, an array of text parts or null", f"{where}.content")
    out: dict[str, Any] = {"role": role, "content": content if content is not None else ""}
    if role == "assistant" and message.get("tool_calls"):
        calls = message["tool_calls"]
        if not isinstance(calls, list) or not all(
            isinstance(c, dict)
            and isinstance(c.get("function"), dict)
            and isinstance(c["function"].get("name"), str)
            for c in calls
        ):
            raise _fail(
                f"{where}.tool_calls must be an array of {{id, type, function: {{name, arguments}}}}", where
            )
        out["tool_calls"] = [
            {
                "id": str(c.get("id") or f"call_{index}_{j}"),
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"].get("arguments") or "{}",
                },
            }
            for j, c in enumerate(calls)
        ]
        out["content"] = content  # None stays None next to calls, as chat templates expect
    if role == "tool":
        if not isinstance(message.get("tool_call_id"), str):
            raise _fail(f"{where}: a tool message needs its 'tool_call_id'", f"{where}.tool_call_id")
        out["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            out["name"] = message["name"]
    return out


def assistant_message(text: str, parse_tools: bool) -> dict[str, Any]:
    """The policy's raw turn as an OpenAI assistant message (content plus structured tool calls)."""
    if parse_tools:
        try:
            turn = parse_action(text)
        except ActionParseError:
            turn = None  # a malformed call stays visible as text, like an LLM server without a parser
        if turn is not None and turn.tool_calls:
            calls = [
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
                }
                for c in turn.tool_calls
            ]
            return {"role": "assistant", "content": turn.content or None, "tool_calls": calls}
    return {"role": "assistant", "content": text}


def completion(
    request: ChatRequest, message: dict[str, Any], usage: dict[str, int], finish: str
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": "trace",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


def stream_chunks(
    request: ChatRequest, message: dict[str, Any], usage: dict[str, int], finish: str, piece: int = 16
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` sequence of one message: role, content pieces, tool-call deltas (name and
    id first, then the arguments), the finish reason, and the usage chunk when ``include_usage`` asks."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": "trace",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    chunks += [chunk({"content": content[i : i + piece]}) for i in range(0, len(content), piece)]
    for index, call in enumerate(message.get("tool_calls") or []):
        head = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(
            chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        )
        arguments = call["function"]["arguments"]
        for i in range(0, len(arguments), piece):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + piece]}}]})
            )
    chunks.append(chunk({}, finish))
    if request.include_usage:
        chunks.append({**base, "choices": [], "usage": usage})
    return chunks
