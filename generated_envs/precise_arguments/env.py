"""``trace/precise-arguments-v0``: Exact tool arguments: split an address into fields, pick the variant matching every option.

Isolates exact arguments: address fields and the item id whose options match all of the user's.

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages; the
    system message is the retail policy's preamble and its sections Allowed actions.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 5 of retail's tools, with
    their exact names, schemas and error messages: "get_order_details", "get_product_details", "modify_pending_order_address", "modify_pending_order_items", "calculate"; a turn
    without tool calls is a message to the user.
Rewards
    Terminal, 1.0 when the final database equals the expected one, every required fact was told, and no rule
    was broken, else 0.0; partial credit is in ``info["reward_components"]`` (``orders_done``, ``facts_told``).
Termination
    ``terminated`` when the scripted user ends the conversation (task done, or patience exhausted);
    ``truncated`` after ``max_turns`` (20) agent turns or 5 invalid ones.
Difficulty
    1: a new shipping address given in one sentence (the default of this id)
    2: one item changed to the variant with the options the user names
    3: two items of one order changed in a single call
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.precise_arguments import PreciseArgumentsEnv


class PreciseArgumentsV0(PreciseArgumentsEnv):
    """Exact tool arguments: split an address into fields, pick the variant matching every option."""
