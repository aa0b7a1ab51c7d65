"""``trace/multi-step-completion-v0``: Carry out every part of a two- to four-part request before saying it is done.

Isolates completing every part of a multi-part request instead of stopping after the first.

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages; the
    system message is the retail policy's preamble and its sections Allowed actions.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 5 of retail's tools, with
    their exact names, schemas and error messages: "get_order_details", "cancel_pending_order", "modify_pending_order_address", "return_delivered_order_items", "calculate"; a turn
    without tool calls is a message to the user.
Rewards
    Terminal, 1.0 when the final database equals the expected one, every required fact was told, and no rule
    was broken, else 0.0; partial credit is in ``info["reward_components"]`` (``orders_done``, ``facts_told``).
Termination
    ``terminated`` when the scripted user ends the conversation (task done, or patience exhausted);
    ``truncated`` after ``max_turns`` (20) agent turns or 5 invalid ones.
Difficulty
    1: two parts (the default of this id)
    2: three parts
    3: four parts
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.multi_step_completion import MultiStepCompletionEnv


class MultiStepCompletionV0(MultiStepCompletionEnv):
    """Carry out every part of a two- to four-part request before saying it is done."""
