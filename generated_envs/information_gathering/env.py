"""``trace/information-gathering-v0``: Ask the user for the missing facts (order, reason, address, item, refund method) first.

Isolates asking the user for the facts a write needs instead of guessing them.

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages; the
    system message is the retail policy's preamble and its sections Information.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 5 of retail's tools, with
    their exact names, schemas and error messages: "get_user_details", "get_order_details", "cancel_pending_order", "modify_pending_order_address", "return_delivered_order_items"; a turn
    without tool calls is a message to the user.
Rewards
    Terminal, 1.0 when the final database equals the expected one, every required fact was told, and no rule
    was broken, else 0.0; partial credit is in ``info["reward_components"]`` (``orders_done``, ``facts_told``).
Termination
    ``terminated`` when the scripted user ends the conversation (task done, or patience exhausted);
    ``truncated`` after ``max_turns`` (20) agent turns or 5 invalid ones.
Difficulty
    1: one missing fact (the default of this id)
    2: two missing facts
    3: a return with three missing facts
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.information_gathering import InformationGatheringEnv


class InformationGatheringV0(InformationGatheringEnv):
    """Ask the user for the missing facts (order, reason, address, item, refund method) first."""
