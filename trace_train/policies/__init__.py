"""Policies: the text-level Policy protocol and its implementations."""

from trace_train.policies.base import (
    Conversation,
    Message,
    Policy,
    SamplingConfig,
    ToolSchema,
    as_conversation,
)

__all__ = ["Conversation", "Message", "Policy", "SamplingConfig", "ToolSchema", "as_conversation"]
