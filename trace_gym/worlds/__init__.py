"""Tool worlds: seeded entity tables, tools over them, and user simulators."""

from trace_gym.worlds.tools import Precondition, State, Tool, ToolError
from trace_gym.worlds.user import STOP, Fact, ScriptedUser, UserReply, UserSimulator
from trace_gym.worlds.world import ToolResult, World, canonical_json, clone, state_hash

__all__ = [
    "STOP",
    "Fact",
    "Precondition",
    "ScriptedUser",
    "State",
    "Tool",
    "ToolError",
    "ToolResult",
    "UserReply",
    "UserSimulator",
    "World",
    "canonical_json",
    "clone",
    "state_hash",
]
