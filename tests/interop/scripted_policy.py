"""A deterministic text-level policy for the `trace serve` tests (served with ``py:`` specs).

With tools and a user turn last, it calls the first tool with the user's words; after a tool answer it reports
that answer; otherwise it echoes. It records every batch it is given, so tests can see batching.
"""

from __future__ import annotations

import json
import time

from trace_train.policies.base import Conversation, SamplingConfig, ToolSchema


class ScriptedPolicy:
    name = "scripted"

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def act(
        self, conversations: list[Conversation], tools: list[list[ToolSchema]], sampling: SamplingConfig
    ) -> list[str]:
        self.batch_sizes.append(len(conversations))
        return [self._one(c, t) for c, t in zip(conversations, tools, strict=True)]

    @staticmethod
    def _one(conversation: Conversation, tools: list[ToolSchema]) -> str:
        last = conversation[-1]
        if last["role"] == "user" and (last.get("content") or "").startswith("sleep "):
            time.sleep(float(last["content"].split()[1]))  # a slow generation (graceful shutdown tests)
        if last["role"] == "user" and "fail" in (last.get("content") or ""):
            raise RuntimeError("scripted failure")
        if tools and last["role"] == "user":
            fn = tools[0]["function"]
            key = next(iter(fn.get("parameters", {}).get("properties", {})), "query")
            call = {"name": fn["name"], "arguments": {key: last["content"]}}
            return f"Let me check.\n<tool_call>{json.dumps(call)}</tool_call>"
        if last["role"] == "tool":
            return f"The tool answered: {last['content']}"
        return f"echo: {last.get('content')}"
