"""The env contract: the chat/tool base env, its spaces, action parsing and the validation suite."""

from trace_gym.core.env import (
    SPLITS,
    CallRecord,
    ChatToolEnv,
    Episode,
    Evaluation,
    render_conversation,
    split_seed,
)
from trace_gym.core.parsing import ActionParseError, AssistantTurn, ToolCall, parse_action
from trace_gym.core.spaces import AssistantTurnSpace, ChatObservationSpace

__all__ = [
    "SPLITS",
    "ActionParseError",
    "AssistantTurn",
    "AssistantTurnSpace",
    "CallRecord",
    "ChatObservationSpace",
    "ChatToolEnv",
    "Episode",
    "Evaluation",
    "ToolCall",
    "parse_action",
    "render_conversation",
    "split_seed",
]
