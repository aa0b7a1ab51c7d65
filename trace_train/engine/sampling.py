"""One definition of the sampler's distribution, shared by decoding and by the training log-probs.

``warp`` applies temperature, then top-k, then top-p with transformers' own logits warpers (the ones
``generate`` uses, in the same order), so the cached engine samples from exactly the distribution of the simple
engine, and the trainer's log-probs are those of the distribution the tokens were drawn from. Greedy decoding
(temperature 0) has no distribution of its own; its log-probs are reported at temperature 1.
"""

from __future__ import annotations

import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from trace_train.policies.base import SamplingConfig

_NO_IDS = torch.empty(0, dtype=torch.long)


def warp(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Logits ``[N, V]`` of the sampling distribution: divided by the temperature (1 when greedy), then tokens
    outside top-k / top-p set to -inf. Differentiable in the kept entries."""
    scores = logits.float()
    if sampling.greedy:
        return scores
    if sampling.temperature != 1.0:
        scores = TemperatureLogitsWarper(sampling.temperature)(_NO_IDS, scores)
    if sampling.top_k:
        scores = TopKLogitsWarper(sampling.top_k)(_NO_IDS, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(sampling.top_p)(_NO_IDS, scores)
    return scores


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Log-probs ``[N]`` of ``targets`` under the sampling distribution of ``logits`` ``[N, V]`` (training side).

    With top-k / top-p the distribution is renormalised over the kept tokens, as the sampler's was. A target
    the current weights would have filtered out (the weights moved since sampling) is kept in the
    normalisation, so its log-prob stays finite and differentiable instead of -inf.
    """
    scaled = logits.float() if sampling.greedy else logits.float() / sampling.temperature
    tgt = targets.unsqueeze(-1)
    if sampling.greedy or (not sampling.top_k and sampling.top_p >= 1.0):
        return scaled.gather(-1, tgt).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    kept = warp(logits, sampling)
    kept = kept.scatter(-1, tgt, scaled.gather(-1, tgt))
    return kept.gather(-1, tgt).squeeze(-1) - torch.logsumexp(kept, dim=-1)


def next_tokens(
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    suppress: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose one token per row of ``logits`` ``[B, V]``; returns (tokens, their log-probs under the
    sampler's distribution). ``suppress``: ids that may not be chosen (end-of-turn before
    ``min_new_tokens``), as transformers' ``MinNewTokensLengthLogitsProcessor`` does."""
    scores = logits.float()
    if suppress:
        scores = scores.clone()
        scores[:, suppress] = -float("inf")
    scores = warp(scores, sampling)
    logp = torch.log_softmax(scores, dim=-1)
    if sampling.greedy:
        tokens = scores.argmax(dim=-1)
    else:
        tokens = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
