"""``trace/error-recovery-v0``: Recover from failed lookups (outdated email, mistyped order id) by another route, then act.

Isolates recovering from a failed lookup by another route (name and zip code; the account's order list).

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages; the
    system message is the retail policy's preamble and its sections Authentication, Allowed actions.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 6 of retail's tools, with
    their exact names, schemas and error messages: "find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details", "get_order_details", "cancel_pending_order", "return_delivered_order_items"; a turn
    without tool calls is a message to the user.
Rewards
    Terminal, 1.0 when the final database equals the expected one, every required fact was told, and no rule
    was broken, else 0.0; partial credit is in ``info["reward_components"]`` (``orders_done``, ``facts_told``).
Termination
    ``terminated`` when the scripted user ends the conversation (task done, or patience exhausted);
    ``truncated`` after ``max_turns`` (20) agent turns or 5 invalid ones.
Difficulty
    1: one failing lookup (email or order id) (the default of this id)
    2: both lookups fail
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.error_recovery import ErrorRecoveryEnv


class ErrorRecoveryV0(ErrorRecoveryEnv):
    """Recover from failed lookups (outdated email, mistyped order id) by another route, then act."""
