"""A policy behind an OpenAI-compatible chat server (vLLM, llama.cpp's server, a hosted model).

Used for rollouts and evaluation when generation runs on a server; the GRPO trainer's token-id path stays
with :class:`~trace_train.policies.hf.HFPolicy`. The conversations of one ``act`` call go out concurrently
(a thread pool), because a server like vLLM batches concurrent requests itself.

Tool calls: the env's tool schemas are sent as ``tools``. When the server parses calls into structured
``tool_calls`` (vLLM with ``--enable-auto-tool-choice --tool-call-parser hermes``), they are rendered back as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` text, so every env parses server and local
generations the same way. With ``tool_choice="none"`` the server renders the tools into the prompt but leaves
the model's text alone, which gives the same result without a server-side parser.

LoRA: vLLM serves each hot-loaded adapter under its own model name, so ``lora_name`` replaces ``model`` in
requests; :meth:`OpenAIHTTPPolicy.load_adapter` loads a PEFT directory and switches to it.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trace_gym.openai_client import OpenAIClient
from trace_train.policies.base import Conversation, Message, SamplingConfig, ToolSchema
from trace_train.tool_text import assistant_text

# Keys OpenAI's API accepts per role; envs keep extras (e.g. ``name`` on tool messages) that strict servers
# reject.
_MESSAGE_KEYS = {
    "system": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "tool_calls", "name"),
    "tool": ("role", "content", "tool_call_id"),
}


class OpenAIHTTPPolicy:
    """Implements :class:`~trace_train.policies.base.Policy` over ``POST /chat/completions``.

    ``sampling.seed`` is offset by the conversation's index in the batch (``seed + i``), so a GRPO group of
    identical prompts still gets different samples while a batch stays reproducible on servers that honour
    seeds. ``top_k`` goes out as vLLM's extra sampling parameter (only when set).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        lora_name: str | None = None,
        max_workers: int = 16,
        tool_choice: str | None = None,
        client: OpenAIClient | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        name: str | None = None,
    ):
        self.model = model
        self.lora_name = lora_name
        self.max_workers = max_workers
        self.tool_choice = tool_choice
        self.client = client or OpenAIClient(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        self.name = name or f"openai:{model}"

    @property
    def served_model(self) -> str:
        """The model name requests address: the adapter when one is selected, else the base model."""
        return self.lora_name or self.model

    def load_adapter(self, path: str | os.PathLike, lora_name: str, replace: bool = False) -> None:
        """Hot-load a PEFT adapter (a path on the server's machine) into vLLM and act with it from now on."""
        self.client.load_lora_adapter(lora_name, path, replace=replace)
        self.lora_name = lora_name

    def act(
        self,
        conversations: list[Conversation],
        tools: list[list[ToolSchema]],
        sampling: SamplingConfig,
    ) -> list[str]:
        if len(tools) != len(conversations):
            raise ValueError(f"{len(conversations)} conversations but {len(tools)} tool lists")
        if not conversations:
            return []
        jobs = list(zip(conversations, tools, strict=True))
        if len(jobs) == 1:
            return [self._one(0, *jobs[0], sampling)]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(jobs))) as pool:
            futures = [pool.submit(self._one, i, conv, tl, sampling) for i, (conv, tl) in enumerate(jobs)]
            return [future.result() for future in futures]  # in order; the first failure propagates

    def _one(
        self, index: int, conversation: Conversation, tools: list[ToolSchema], sampling: SamplingConfig
    ) -> str:
        extra: dict[str, Any] = {"top_k": sampling.top_k} if sampling.top_k > 0 else {}
        message = self.client.chat(
            self.served_model,
            [clean_message(m) for m in conversation],
            tools=tools or None,
            tool_choice=self.tool_choice if tools else None,
            temperature=max(0.0, sampling.temperature),
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=None if sampling.seed is None else sampling.seed + index,
            stop=list(sampling.stop) or None,
            extra=extra,
        )
        return assistant_text(message.to_message())


def clean_message(message: Message) -> Message:
    """Keep only the keys OpenAI's API defines for the message's role."""
    keys = _MESSAGE_KEYS.get(message.get("role", ""), tuple(message))
    return {key: message[key] for key in keys if key in message}
