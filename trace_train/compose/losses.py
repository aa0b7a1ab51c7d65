"""Gate-training losses: label cross-entropy, next-token LM loss, Switch-style load balancing.

All gate tensors are the per-layer logits recorded during one forward (``T x (N+1)`` each, T = batch x
sequence, flattened in the same order as the labels).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

IGNORE = -100


def label_loss(
    gate_logits: list[torch.Tensor], labels: torch.Tensor, normalizer: int | None = None
) -> torch.Tensor:
    """Mean over layers of the cross-entropy between each token's gate and its slot label (IGNORE skipped):
    the mean over labelled tokens, or their sum over ``normalizer`` (a micro-batch's part of a batch mean)."""
    labels = labels.reshape(-1)
    known = int((labels != IGNORE).sum())
    if not known:
        return gate_logits[0].sum() * 0.0
    per_layer = [F.cross_entropy(lg, labels, ignore_index=IGNORE, reduction="sum") for lg in gate_logits]
    return torch.stack(per_layer).mean() / (normalizer or known)


def balance_loss(gate_logits: list[torch.Tensor], valid: torch.Tensor) -> torch.Tensor:
    """Switch Transformer load balancing, averaged over layers: ``S * sum_i f_i * P_i``.

    f_i is the share of (valid) tokens whose top-1 slot is i and P_i the mean gate probability of slot i;
    the value is 1 when routing is uniform over the S slots and S when everything goes to one slot. Only P
    carries a gradient (f comes from an argmax).
    """
    valid = valid.reshape(-1).bool()
    losses = []
    for logits in gate_logits:
        lg = logits[valid]
        slots = lg.shape[-1]
        if lg.shape[0] == 0:
            losses.append(logits.sum() * 0.0)
            continue
        frac = torch.bincount(lg.argmax(-1), minlength=slots).to(lg.dtype) / lg.shape[0]
        prob = lg.softmax(-1).mean(0)
        losses.append(slots * (frac * prob).sum())
    return torch.stack(losses).mean()


def lm_loss_from_hidden(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    input_ids: torch.Tensor,
    target_mask: torch.Tensor,
    normalizer: int | None = None,
) -> torch.Tensor:
    """Next-token cross-entropy on the tokens where ``target_mask`` is 1 (position t predicts t+1), from the
    last hidden states ``[B, T, H]``, with the LM head run only on the positions that predict a target (a
    vocabulary-wide logit row per token of a 2k-token conversation is gigabytes). The mean over targets, or
    their sum over ``normalizer`` (a micro-batch's part of a batch mean)."""
    picked = target_mask[:, 1:] == 1
    n = int(picked.sum())
    if not n:
        return hidden.sum() * 0.0
    logits = head(hidden[:, :-1][picked]).float()
    return F.cross_entropy(logits, input_ids[:, 1:][picked], reduction="sum") / (normalizer or n)
