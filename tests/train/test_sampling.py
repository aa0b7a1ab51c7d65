"""The cached engine's sampler draws from the warped distribution (chi-square against the probabilities) and never
picks a token the warpers removed."""

from __future__ import annotations

import torch

from trace_train.engine.sampling import next_tokens, sample_categorical
from trace_train.policies.base import SamplingConfig


def test_sample_categorical_follows_the_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3, 0.0], [0.0, 0.0, 0.0, 1e-3, 0.999]])
    gen = torch.Generator().manual_seed(0)
    draws = 40_000
    picks = sample_categorical(probs.repeat(draws, 1), gen).view(draws, 2)
    counts = torch.stack([torch.bincount(picks[:, r], minlength=5) for r in range(2)]).double()
    assert counts[0, 1] == counts[0, 4] == 0 and counts[1, :3].sum() == 0  # zero-probability tokens never
    expected = probs.double() * draws
    keep = expected > 0
    chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    assert chi2 < 20.5  # 4 degrees of freedom: p = 0.0004


def test_sample_categorical_takes_unnormalised_rows():
    gen = torch.Generator().manual_seed(1)
    picks = sample_categorical(torch.tensor([[0.0, 3.0, 1.0]]).repeat(20_000, 1), gen)
    share = float((picks == 1).double().mean())
    assert abs(share - 0.75) < 0.015 and not bool((picks == 0).any())


def test_next_tokens_respects_top_k_and_reports_its_logprobs():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]]).repeat(5_000, 1)
    sampling = SamplingConfig(temperature=0.7, top_k=2)
    tokens, logprobs = next_tokens(logits, sampling, torch.Generator().manual_seed(2))
    assert set(tokens.tolist()) == {0, 1}
    kept = torch.log_softmax(torch.tensor([2.0, 1.0]) / 0.7, -1)
    assert torch.allclose(logprobs, kept[tokens], atol=1e-6)
    assert abs(float((tokens == 0).double().mean()) - float(kept[0].exp())) < 0.02
