"""``trace/structured-reasoning-v0``: Select the orders a condition picks (status, highest total, threshold) and compute amounts.

Isolates reasoning over several records: selecting orders by status, maximum or threshold, and summing amounts.

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages; the
    system message is the retail policy's preamble and its sections Information.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 5 of retail's tools, with
    their exact names, schemas and error messages: "get_user_details", "get_order_details", "get_product_details", "calculate", "cancel_pending_order"; a turn
    without tool calls is a message to the user.
Rewards
    Terminal, 1.0 when the final database equals the expected one, every required fact was told, and no rule
    was broken, else 0.0; partial credit is in ``info["reward_components"]`` (``orders_done``, ``facts_told``).
Termination
    ``terminated`` when the scripted user ends the conversation (task done, or patience exhausted);
    ``truncated`` after ``max_turns`` (20) agent turns or 5 invalid ones.
Difficulty
    1: the total of the user's orders of one status (an answer, no write) (the default of this id)
    2: cancel the pending order with the highest total and report its refund
    3: cancel every pending order above a threshold and report the total refund
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.structured_reasoning import StructuredReasoningEnv


class StructuredReasoningV0(StructuredReasoningEnv):
    """Select the orders a condition picks (status, highest total, threshold) and compute amounts."""
