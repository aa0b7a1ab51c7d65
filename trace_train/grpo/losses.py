"""Policy-gradient losses over padded token batches.

All losses return a scalar *sum* divided by an explicit ``normaliser`` supplied by the caller, so that
gradient accumulation over micro-batches (and across data-parallel ranks) reproduces the full-batch loss
exactly:

- ``grpo``:    per-sequence mean over its tokens, then mean over sequences (normaliser = number of sequences,
               per-token weights 1/len_i).
- ``dr_grpo``: sum over tokens divided by a constant (sequences x max completion tokens); no length bias.
- ``dapo``:    token-level normalisation (sum over all tokens / total tokens) with clip-higher
               (eps_high > eps_low).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


@dataclass(frozen=True)
class LossConfig:
    loss_type: str = "grpo"
    clip_eps_low: float = 0.2
    clip_eps_high: float | None = None  # None: symmetric; dapo defaults to 0.28
    beta: float = 0.0  # KL coefficient (k3 against the base model with the adapter disabled)

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")

    @property
    def eps_high(self) -> float:
        if self.clip_eps_high is not None:
            return self.clip_eps_high
        return 0.28 if self.loss_type == "dapo" else self.clip_eps_low


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0, per token."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def token_weights(mask: torch.Tensor, loss_type: str) -> torch.Tensor:
    """Per-token weights w such that loss = sum(w * token_loss) / normaliser (see module docstring)."""
    mask = mask.float()
    if loss_type == "grpo":
        return mask / mask.sum(-1, keepdim=True).clamp(min=1.0)
    return mask  # dr_grpo and dapo weight every token equally


def normaliser(mask: torch.Tensor, loss_type: str, max_completion_tokens: int) -> float:
    """The denominator for a *whole* optimisation batch (call it on the full batch, not a micro-batch)."""
    if loss_type == "grpo":
        return float(mask.shape[0])
    if loss_type == "dr_grpo":
        return float(mask.shape[0] * max_completion_tokens)
    return float(mask.sum().clamp(min=1.0))


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    norm: float,
    cfg: LossConfig,
    ref_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (+ beta * k3 KL). Shapes: [B, T] for token tensors, [B] for advantages."""
    mask = (weights > 0).float()
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cfg.clip_eps_low, 1.0 + cfg.eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if cfg.beta > 0 and ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + cfg.beta * kl
    loss = (per_token * weights).sum() / norm
    n_tok = mask.sum().clamp(min=1.0)
    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - cfg.clip_eps_low) & (adv < 0)) | (
            (ratio > 1.0 + cfg.eps_high) & (adv > 0)
        )
        metrics = {
            "clip_fraction": (is_clipped.float() * mask).sum() / n_tok,
            "kl": (kl * mask).sum() / n_tok,
            "ratio_mean": (ratio * mask).sum() / n_tok,
        }
    return loss, metrics
