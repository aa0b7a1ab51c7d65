"""``trace/bfcl-multi-turn-information-retrieval-v0``: ``trace/bfcl-multi-turn-v0`` itself, restricted to its train tasks that exercise information-retrieval.

Calls the functions whose answers the request asks for or depends on, with the right arguments.

Source target
    ``trace/bfcl-multi-turn-v0`` (``trace_gym.targets.bfcl.env.BfclMultiTurnEnv``) made with the keyword arguments ``{}``;
    its system prompt, tools, user simulator and verifier are used unchanged. The tasks are the target's
    train-split tasks that exercise information-retrieval, one source per decision point:
    1034 (train) / 196 (test) sources from the target's train seeds
    0..999 (this env's two splits are a content split of the target's train split);
    a level plays each distinct start once (at level 4, each task once).
Observation space
    The target's: the conversation so far as OpenAI chat messages, the replayed prefix included
    (``info["prefix_messages"]`` of them are context, not the agent's).
Action space
    The target's: one assistant turn over its 128 tools (``info["tools"]`` lists those the
    task offers); a turn without tool calls is a message to the user.
Rewards
    The target's verdict on the whole episode, prefix included. On the last step
    ``info["reward_components"]["milestones"]`` is the declared shaped reward in [0, 1]: the
    ordered share of the milestones after the agent's start, 0 on any violation (docs/derived.md).
Termination
    The target's: ``terminated`` when its episode ends (the user ends the conversation, or the task's last
    turn is done); ``truncated`` at its limits (120 agent turns, prefix turns included; 5
    invalid turns).
Difficulty (start depth, ``options={"difficulty": k}`` or ``gym.make(id, difficulty=k)``)
    1: at the decision point: the target oracle's actions before it are replayed (the default of this id)
    2: 2 target-oracle actions before the decision point (the ones before those replayed)
    3: 6 target-oracle actions before the decision point (the ones before those replayed)
    4: the whole target task: no prefix, the agent starts at the beginning
"""

from __future__ import annotations

from typing import Any

from trace_gym.derived.env import DerivedCapabilityEnv

TARGET_ID = "trace/bfcl-multi-turn-v0"
CAPABILITY = "information-retrieval"
TARGET_KWARGS: dict[str, Any] = {}


class BfclMultiTurnInformationRetrievalV0(DerivedCapabilityEnv):
    """``trace/bfcl-multi-turn-v0`` restricted to train tasks exercising information-retrieval, started before its decision."""

    def __init__(
        self,
        target_id: str = TARGET_ID,
        capability: str = CAPABILITY,
        target_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        kwargs_of_target = dict(TARGET_KWARGS) if target_kwargs is None else target_kwargs
        super().__init__(target_id, capability, kwargs_of_target, **kwargs)
