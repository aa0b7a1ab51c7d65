"""``trace/precondition-checking-v0``: Read the order (and product) before a write; refuse, with the reason, what its state forbids.

Isolates checking a write's preconditions (order status, variant availability) by reading the record first, and refusing with the reason instead of attempting a write the state forbids.

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages; the
    system message is the retail policy's preamble and its sections Allowed actions.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 6 of retail's tools, with
    their exact names, schemas and error messages: "get_order_details", "get_product_details", "cancel_pending_order", "return_delivered_order_items", "exchange_delivered_order_items", "calculate"; a turn
    without tool calls is a message to the user.
Rewards
    Terminal, 1.0 when the final database equals the expected one, every required fact was told, and no rule
    was broken, else 0.0; partial credit is in ``info["reward_components"]`` (``orders_done``, ``facts_told``).
Termination
    ``terminated`` when the scripted user ends the conversation (task done, or patience exhausted);
    ``truncated`` after ``max_turns`` (20) agent turns or 5 invalid ones.
Difficulty
    1: cancellations only (the default of this id)
    2: cancellations and returns
    3: cancellations, returns and exchanges (exchanges also need the new variant to be available)
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.precondition_checking import PreconditionCheckingEnv


class PreconditionCheckingV0(PreconditionCheckingEnv):
    """Read the order (and product) before a write; refuse, with the reason, what its state forbids."""
