"""The policy interface shared by every generator (local transformers model, OpenAI-compatible server).

A policy maps conversations (OpenAI chat messages) plus the env's tool schemas to one raw assistant turn
per conversation. Evaluation and analysis only need this text-level API; the GRPO trainer additionally
uses the token-id-level API of :class:`trace_train.policies.hf.HFPolicy` so that no text is re-tokenised.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]
Conversation = list[Message]
ToolSchema = dict[str, Any]


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings; temperature 0 means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_new_tokens: int = 256
    min_new_tokens: int = 0  # >0 suppresses end-of-turn before that many tokens (benchmarks: fixed lengths)
    stop: tuple[str, ...] = field(default_factory=tuple)
    seed: int | None = None  # per-call seed where the backend supports it (HTTP servers)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@runtime_checkable
class Policy(Protocol):
    """Anything that can act in a chat/tool env.

    ``act`` returns, for each conversation, the raw assistant text (tool calls inside
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks or as the backend renders them);
    envs parse that text themselves. ``tools[i]`` are the OpenAI function schemas of conversation ``i``
    (possibly empty).
    """

    name: str

    def act(
        self,
        conversations: list[Conversation],
        tools: list[list[ToolSchema]],
        sampling: SamplingConfig,
    ) -> list[str]: ...


def as_conversation(obs: Any) -> Conversation:
    """Normalise an env observation: chat message lists pass through, plain strings become one user turn."""
    if isinstance(obs, str):
        return [{"role": "user", "content": obs}]
    if isinstance(obs, dict) and "role" in obs:
        return [dict(obs)]
    if isinstance(obs, list | tuple) and all(isinstance(m, dict) for m in obs):
        return [dict(m) for m in obs]
    raise TypeError(
        f"unsupported observation type {type(obs).__name__}: expected a list of chat messages or a string"
    )


def cut_after_eos(
    ids: Sequence[int], eos_ids: Collection[int], max_new_tokens: int | None = None
) -> list[int]:
    """Generated ids up to and including the first end-of-turn token (all of them if none), at most
    ``max_new_tokens`` of them when given."""
    ids = list(ids if max_new_tokens is None else ids[:max_new_tokens])
    for j, t in enumerate(ids):
        if t in eos_ids:
            return ids[: j + 1]
    return ids
