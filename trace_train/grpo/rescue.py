"""Rescue hints for all-failed groups (issue 29), after "Guide" (Nath et al., arXiv 2506.13923).

When no un-hinted rollout of a group succeeds, ``round(rescue_fraction * G)`` (at least one) of its members are
replaced by fresh rollouts of the same task reset with ``options={"hint": True}``. Those are trained on the
*base* prompt (``info["base_system_prompt"]``, :meth:`Trajectory.training_ids`), but they were sampled under the
hinted one, so each of their tokens gets the truncated importance weight

    w_t = min(pi_theta(a_t | base prompt, a_<t) / pi_theta(a_t | hinted prompt, a_<t), cap)

(no gradient), which multiplies the token's clipped surrogate as the sampler-mismatch weight does. With the
PPO ratio pi_theta / pi_old on the base prompt this gives Guide's ratio pi_theta(.|base) / pi_old(.|hinted).
The numerator is the trainer's old log-prob on the base prompt (the one the ratio uses), the denominator the
trainer's log-prob on the hinted sequence as sampled (one no-grad forward pass over the rescue rollouts), so
the weight is a property of the policy alone and needs no sampler log-probs (a server may report none).

Per token, not per sequence: the sequence weight is the product of hundreds of token ratios, whose variance
grows exponentially with length and which truncation then mostly flattens to 0 or the cap; the per-token
weight is what Guide's PPO-style objective uses and what the trainer's sampler-mismatch correction already
does (biased, like every truncated estimator, but bounded). Tokens the hint made more likely than the bare
prompt would are down-weighted (w < 1), tokens it made less likely are up-weighted up to ``cap``.

The fixed ``hint_fraction`` rollouts keep their old treatment (trained on the base prompt, weight 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trace_train.grpo.losses import truncated_is_weights
from trace_train.rollout import ResetSpec

MAIN, TARGET = 0, 1  # a group's source: the trained env, or the mixed-in target (its train split)


@dataclass(frozen=True)
class GroupSpec(ResetSpec):
    """A rollout's reset spec plus what the trainer needs to know about it: where its group comes from and
    whether it is a rescue rollout (hinted, importance-corrected)."""

    source: int = MAIN
    rescue: bool = False


def rescue_weights(
    old_logp: torch.Tensor, hinted_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """min(exp(old_logp - hinted_logp), cap) per policy token (1 elsewhere and where ``hinted_logp`` is NaN):
    ``old_logp`` on the base prompt, ``hinted_logp`` on the hinted one, both at the policy's positions."""
    return truncated_is_weights(old_logp, hinted_logp, mask, cap)


def n_rescue(rescue_fraction: float, group_size: int) -> int:
    """Members of an all-failed group re-sampled with the hint (0: rescue off)."""
    if rescue_fraction <= 0:
        return 0
    return min(group_size, max(1, round(rescue_fraction * group_size)))
