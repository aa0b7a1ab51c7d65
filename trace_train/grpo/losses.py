"""Policy-gradient losses over padded token batches.

All losses return a scalar *sum* divided by an explicit ``normaliser`` supplied by the caller, so that
gradient accumulation over micro-batches (and across data-parallel ranks) reproduces the full-batch loss
exactly:

- ``grpo``:    per-sequence mean over its tokens, then mean over sequences (normaliser = number of sequences,
               per-token weights 1/len_i).
- ``dr_grpo``: sum over tokens divided by a constant (sequences x max completion tokens); no length bias.
- ``dapo``:    token-level normalisation (sum over all tokens / total tokens) with clip-higher
               (eps_high > eps_low).

Under data parallelism the normaliser is *global*: :func:`global_normaliser` all-reduces it over ranks and
scales each rank's loss by the world size, so that after DDP's gradient average every token (dapo) or sequence
(grpo, dr_grpo) has the weight it would have in one process, whatever the split of tokens between ranks.

Sampler/trainer mismatch: rollouts are decoded by a sampler (bf16 merged-LoRA local decoding, a vLLM server)
whose log-probs differ from the trainer's. ``is_weights`` are truncated importance weights
``min(exp(old_logp - sampler_logp), cap)`` (:func:`truncated_is_weights`) that multiply the clipped
surrogate per token (not the KL term), as TRL does for vLLM rollouts; the cap (default 2, the value of
Yao et al.'s truncated importance sampling in verl) bounds the variance.

Masked positions never reach ``exp``: every exponent is ``torch.where``-ed to 0 there first, so a log-prob of
-1000 at a padding position cannot turn into inf * 0 = NaN, in the loss or its gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


@dataclass(frozen=True)
class LossConfig:
    loss_type: str = "grpo"
    clip_eps_low: float = 0.2
    clip_eps_high: float | None = None  # None: symmetric; dapo defaults to 0.28
    beta: float = 0.0  # KL coefficient (k3 against the base model with the adapter disabled)
    is_cap: float = 2.0  # truncation of the sampler/trainer importance weights (<= 0: no correction)

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        if not 0.0 < self.clip_eps_low < 1.0:
            raise ValueError(f"clip_eps_low must be in (0, 1), got {self.clip_eps_low!r}")
        if self.clip_eps_high is not None and not self.clip_eps_high > 0.0:
            raise ValueError(f"clip_eps_high must be > 0, got {self.clip_eps_high!r}")
        if not (self.beta >= 0.0 and math.isfinite(self.beta)):
            raise ValueError(f"beta must be a finite number >= 0, got {self.beta!r}")
        if not math.isfinite(self.is_cap):
            raise ValueError(f"is_cap must be finite (<= 0 turns the correction off), got {self.is_cap!r}")

    @property
    def eps_high(self) -> float:
        if self.clip_eps_high is not None:
            return self.clip_eps_high
        return 0.28 if self.loss_type == "dapo" else self.clip_eps_low


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0, per token.

    With ``mask``, positions where it is 0 give exactly 0 (and a zero gradient) whatever the log-probs there.
    """
    d = ref_logp - logp
    if mask is not None:
        d = torch.where(mask > 0, d, torch.zeros_like(d))
    return torch.exp(d) - d - 1.0


def truncated_is_weights(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """min(exp(old_logp - sampler_logp), cap) per policy token, 1 elsewhere and where the sampler gave no
    log-prob (NaN); no gradient. ``old_logp`` is the trainer's log-prob of the policy that sampled."""
    with torch.no_grad():
        valid = (mask > 0) & torch.isfinite(sampler_logp)
        diff = torch.where(
            valid, old_logp.detach() - torch.nan_to_num(sampler_logp), torch.zeros_like(old_logp)
        )
        return torch.exp(diff).clamp(max=cap)


def global_normaliser(local: float, all_reduce_sum=None, world_size: int = 1) -> tuple[float, float]:
    """The normaliser of the whole data-parallel batch and the factor each rank's loss is multiplied by.

    ``all_reduce_sum`` sums a float over ranks (``None``: one process). DDP averages gradients over ranks, so
    rank r's loss ``sum_r / N_global * world_size`` gives the gradient of ``sum_all / N_global`` after averaging.
    """
    if world_size == 1 or all_reduce_sum is None:
        return local, 1.0
    return float(all_reduce_sum(local)), float(world_size)


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
    is_weights: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (x truncated IS weights) (+ beta * k3 KL). Shapes: [B, T] for token tensors, [B] for
    advantages. ``scale`` is the data-parallel factor of :func:`global_normaliser`."""
    mask = (weights > 0).float()
    log_ratio = torch.where(mask > 0, logp - old_logp, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cfg.clip_eps_low, 1.0 + cfg.eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if is_weights is not None:
        per_token = per_token * is_weights
    kl = torch.zeros_like(per_token)
    if cfg.beta > 0 and ref_logp is not None:
        kl = k3_kl(logp, ref_logp, mask)
        per_token = per_token + cfg.beta * kl
    loss = (per_token * weights).sum() * scale / norm
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
