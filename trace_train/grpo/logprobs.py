"""Token log-probabilities of padded sequences, computing the LM head only where it is needed."""

from __future__ import annotations

import torch


def pad_batch(seqs: list[list[int]], masks: list[list[int]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-pad ids and masks to [B, T]; returns ids, attention mask, policy mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    pmask = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        pmask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, attn, pmask


def sequence_logprobs(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, pmask: torch.Tensor):
    """Log-probs of tokens 1..T-1 under ``model`` and the matching policy mask, both [B, K].

    Only the last K positions that contain a policy token are pushed through the LM head (``logits_to_keep``):
    prompts and system messages are often most of a sequence, and the 49k-vocabulary head dominates the cost.
    """
    targets = ids[:, 1:]
    tmask = pmask[:, 1:]
    has = tmask.sum(0).nonzero()
    first = int(has[0]) if len(has) else tmask.shape[1] - 1
    keep = tmask.shape[1] - first  # positions first..T-2 of the logits predict targets first..T-1
    out = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep + 1, use_cache=False)
    logits = out.logits[:, :-1].float()  # drop the prediction after the last token
    tgt = targets[:, first:]
    logp = torch.gather(logits, -1, tgt.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return logp, tmask[:, first:]
