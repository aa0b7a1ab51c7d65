"""Chat rendering: turn OpenAI-style messages + tool schemas into the exact text a policy sees and emits.

Templates without tool support (SmolLM2's) get the tools and the call format in the system prompt, and
assistant tool calls rendered as ``<tool_call>{...}</tool_call>`` text: the same text the policy is asked to
generate, so SFT targets, rollouts and the env's parser all agree.
"""

from __future__ import annotations

import json
from typing import Any

from transformers import PreTrainedTokenizerBase

from trace_train.policies.base import Conversation, Message, ToolSchema
from trace_train.tool_text import TOOL_CALL_FORMAT, arguments_dict, assistant_text, tool_call_text

__all__ = ["TOOL_FORMATS", "ChatRenderer", "assistant_text", "tool_call_text", "tools_system_text"]

TOOL_FORMATS = ("json", "compact")
_CALL_HOWTO = (
    f"To call a tool, reply with one block per call, exactly like this: {TOOL_CALL_FORMAT}\n"
    "Tool results come back in <tool_response></tool_response> blocks. "
    "When you are done, reply to the user in plain text without a tool call."
)


def tools_system_text(tools: list[ToolSchema], tool_format: str = "json") -> str:
    """The tools part of the system prompt for templates without native tool support.

    ``json``: every function schema verbatim. ``compact``: one signature line per tool (typed parameters, ``?``
    for optional ones, enums spelled out) with its description, and each distinct parameter description once
    (retail's 14 tools: see the benchmark for token counts).
    """
    if tool_format == "compact":
        return compact_tools_text(tools) + "\n" + _CALL_HOWTO
    if tool_format != "json":
        raise ValueError(f"unknown tool format {tool_format!r}: choose one of {', '.join(TOOL_FORMATS)}")
    specs = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return f"You can call these tools (JSON schemas):\n{specs}\n{_CALL_HOWTO}"


def _type_text(spec: dict[str, Any]) -> str:
    if "enum" in spec:
        return "|".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"])
    kind = spec.get("type")
    if isinstance(kind, list):
        return "|".join(_type_text({**spec, "type": k}) for k in kind)
    if kind == "array":
        return f"list[{_type_text(spec.get('items') or {})}]"
    if kind == "object" and spec.get("properties"):
        return "{" + _params_text(spec) + "}"
    return {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "null"}.get(
        kind, kind or "any"
    )


def _params_text(schema: dict[str, Any]) -> str:
    required = set(schema.get("required") or [])
    props = schema.get("properties") or {}
    return ", ".join(f"{n}{'' if n in required else '?'}: {_type_text(p or {})}" for n, p in props.items())


def compact_tools_text(tools: list[ToolSchema]) -> str:
    lines = ["You can call these tools:"]
    described: dict[str, str] = {}
    notes: list[str] = []
    for tool in tools:
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {}
        desc = (fn.get("description") or "").strip()
        lines.append(f"- {fn.get('name')}({_params_text(params)})" + (f": {desc}" if desc else ""))
        for name, spec in (params.get("properties") or {}).items():
            pdesc = ((spec or {}).get("description") or "").strip()
            if not pdesc or described.get(name) == pdesc:
                continue
            notes.append(
                f"- {name}: {pdesc}" if name not in described else f"- {name} ({fn.get('name')}): {pdesc}"
            )
            described.setdefault(name, pdesc)
    if notes:
        lines += ["Parameters:", *notes]
    return "\n".join(lines)


class ChatRenderer:
    """Renders conversations with a tokenizer's chat template, emulating tool support where it is missing."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, tool_format: str = "json"):
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"unknown tool format {tool_format!r}: choose one of {', '.join(TOOL_FORMATS)}")
        self.tokenizer = tokenizer
        self.tool_format = tool_format  # how tools are written for templates without native tool support
        template = tokenizer.chat_template or ""
        if not template:
            raise ValueError("the tokenizer has no chat template; trace needs a chat model")
        self.native_tools = "tools" in template
        self.eos_text = tokenizer.eos_token or ""
        self.turn_tail = self._turn_tail()

    def _turn_tail(self) -> str:
        """Text the template writes after an assistant message's content (e.g. ``<|im_end|>\\n``)."""
        marker = "XQZJ_MARKER"
        text = self._apply(
            [{"role": "user", "content": "u"}, {"role": "assistant", "content": marker}], False
        )
        return text[text.rindex(marker) + len(marker) :] if marker in text else self.eos_text

    def prepare(self, messages: Conversation, tools: list[ToolSchema]) -> Conversation:
        """Messages in the form the template expects (text tool calls when the template lacks tools)."""
        out: list[Message] = []
        for m in messages:
            role = m.get("role")
            if self.native_tools:
                m = dict(m)
                if m.get("tool_calls"):
                    m["tool_calls"] = [
                        {
                            **c,
                            "function": {
                                **c["function"],
                                "arguments": arguments_dict(c["function"].get("arguments")),
                            },
                        }
                        for c in m["tool_calls"]
                    ]
                m["content"] = m.get("content") or ""
                out.append(m)
            elif role == "assistant":
                out.append({"role": "assistant", "content": assistant_text(m)})
            elif role == "tool":
                out.append(
                    {
                        "role": "user",
                        "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>",
                    }
                )
            else:
                out.append({"role": role, "content": m.get("content") or ""})
        if tools and not self.native_tools:
            block = tools_system_text(tools, self.tool_format)
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{block}"}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out

    def _apply(
        self, messages: Conversation, add_generation_prompt: bool, tools: list[ToolSchema] | None = None
    ) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if tools and self.native_tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def render(
        self, messages: Conversation, tools: list[ToolSchema], add_generation_prompt: bool = True
    ) -> str:
        return self._apply(self.prepare(messages, tools), add_generation_prompt, tools)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_segments(self, messages: Conversation, tools: list[ToolSchema]) -> tuple[list[int], list[int]]:
        """Token ids of the first (system) segment and of the rest of the initial prompt.

        Tokenising the two segments separately lets a trainer swap a hinted system prompt for the base one
        without touching any other token.
        """
        full = self.render(messages, tools, add_generation_prompt=True)
        prepared = self.prepare(messages, tools)
        head = self._apply(prepared[:1], False, tools) if len(prepared) > 1 else ""
        if not head or not full.startswith(head):
            return [], self.encode(full)
        return self.encode(head), self.encode(full[len(head) :])

    def system_segment(self, system_content: str, rest: Conversation, tools: list[ToolSchema]) -> list[int]:
        """Ids of the system segment for a given system content (used to swap hint -> base prompt)."""
        prepared = self.prepare([{"role": "system", "content": system_content}, *rest[:1]], tools)
        return self.encode(self._apply(prepared[:1], False, tools))

    def continuation(
        self, conversation: Conversation, n_before: int, tools: list[ToolSchema], ended_with_eos: bool
    ) -> list[int]:
        """Ids to append after a generated assistant turn: the rest of the turn's tail, the env's new
        messages (conversation[n_before + 1:]) and the next generation prompt, tokenised as a delta."""
        prefix = self.render(conversation[: n_before + 1], tools, add_generation_prompt=False)
        full = self.render(conversation, tools, add_generation_prompt=True)
        tail = self.turn_tail
        if ended_with_eos and self.eos_text and tail.startswith(self.eos_text):
            tail = tail[len(self.eos_text) :]
        if full.startswith(prefix):
            delta = full[len(prefix) :]
        else:  # a template that re-renders history; fall back to rendering the new messages on their own
            delta = self.render(conversation[n_before + 1 :], tools, add_generation_prompt=True)
        return self.encode(tail + delta)
