"""Advantages and every loss variant on hand-computed batches."""

from __future__ import annotations

import math

import pytest
import torch

from trace_train.grpo.advantages import group_advantages, informative_groups
from trace_train.grpo.losses import (
    LossConfig,
    global_normaliser,
    k3_kl,
    normaliser,
    policy_loss,
    token_weights,
    truncated_is_weights,
)


def test_group_advantages_normalised_within_each_group():
    rewards = [1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0]
    groups = [0, 0, 0, 0, 1, 1, 2, 2]
    adv = group_advantages(rewards, groups)
    # group 0: mean .25, population std sqrt(3)/4
    std = math.sqrt(3) / 4
    assert adv[:4].tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    assert adv[4:6].tolist() == [0.0, 0.0]  # equal rewards carry no signal
    assert adv[6:].tolist() == pytest.approx([1.0, -1.0], rel=1e-5)


def test_dr_grpo_advantages_are_not_scaled():
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], [3, 3, 3, 3], scale_by_std=False)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_informative_groups():
    assert informative_groups([1, 1, 0, 1, 0.3, 0.3], [0, 0, 1, 1, 2, 2]) == {0: False, 1: True, 2: False}


# batch: 2 sequences x 2 tokens; the second token of sequence 1 is not a policy token
LOGP = torch.tensor([[-1.0, -2.0], [-0.5, -1.0]])
OLD = torch.tensor([[-1.5, -2.0], [-0.5, -0.7]])  # ratio of token (0,0) = e^0.5 = 1.6487
ADV = torch.tensor([1.0, -1.0])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def _loss(loss_type, beta=0.0, ref=None, **kw):
    cfg = LossConfig(loss_type, beta=beta, **kw)
    w = token_weights(MASK, loss_type)
    return policy_loss(LOGP, OLD, ADV, w, normaliser(MASK, loss_type, max_completion_tokens=4), cfg, ref)


def test_grpo_loss_hand_computed():
    loss, m = _loss("grpo")
    # seq 0: token losses -min(1.6487, 1.2) = -1.2 and -1 -> mean -1.1; seq 1: +1 -> mean 1; batch mean -0.05
    assert loss.item() == pytest.approx(-0.05, abs=1e-6)
    assert m["clip_fraction"].item() == pytest.approx(1 / 3)


def test_dapo_loss_clip_higher_token_level():
    loss, _ = _loss("dapo")
    # clip-higher 1.28; token-level: (-1.28 - 1 + 1) / 3 tokens
    assert loss.item() == pytest.approx(-1.28 / 3, abs=1e-6)


def test_dr_grpo_loss_constant_normaliser():
    loss, _ = _loss("dr_grpo")
    # (-1.2 - 1 + 1) / (2 sequences * 4 max completion tokens)
    assert loss.item() == pytest.approx(-1.2 / 8, abs=1e-6)


def test_kl_k3_term():
    ref = torch.tensor([[-1.2, -2.0], [-0.4, -9.0]])
    loss, m = _loss("grpo", beta=0.1, ref=ref)
    k3 = [math.exp(d) - d - 1 for d in (-0.2, 0.0, 0.1)]
    expected = ((-1.2 + 0.1 * k3[0] - 1.0 + 0.1 * k3[1]) / 2 + (1.0 + 0.1 * k3[2])) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert m["kl"].item() == pytest.approx(sum(k3) / 3, abs=1e-6)
    assert torch.all(k3_kl(torch.randn(50), torch.randn(50)) >= 0)


def test_gradient_at_ratio_one_is_policy_gradient():
    logp = LOGP.clone().requires_grad_(True)
    w = token_weights(MASK, "dapo")
    loss, _ = policy_loss(logp, logp.detach(), ADV, w, normaliser(MASK, "dapo", 4), LossConfig("dapo"))
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 1 / 3, 0.0])


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_micro_batches_sum_to_full_batch_loss(loss_type):
    """Gradient accumulation is exact: the normaliser is taken over the whole batch."""
    full, _ = _loss(loss_type)
    cfg = LossConfig(loss_type)
    norm = normaliser(MASK, loss_type, 4)
    parts = 0.0
    for i in range(2):
        sl = slice(i, i + 1)
        w = token_weights(MASK[sl], loss_type)
        parts += policy_loss(LOGP[sl], OLD[sl], ADV[sl], w, norm, cfg)[0].item()
    assert parts == pytest.approx(full.item(), abs=1e-6)


def test_unknown_loss_type_rejected():
    with pytest.raises(ValueError, match="loss_type"):
        LossConfig("ppo2")


# ----- defect 6: NaN from the KL term at non-policy positions ---------------------------------------------------
def test_kl_is_finite_when_masked_logprobs_are_extreme():
    """Reference log-probs are scattered as 0 at non-policy positions; a log-prob below -88.7 there gave
    exp(0 - logp) = inf and inf * 0 = NaN. The KL now never exponentiates masked positions."""
    logp = torch.tensor([[-1.0, -1000.0], [-0.5, -300.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    ref = torch.tensor([[-1.1, 0.0], [-0.4, 0.0]])
    old = torch.zeros_like(logp)  # old cache scattered as 0 at masked positions too
    w = token_weights(mask, "dapo")
    loss, m = policy_loss(logp, old, ADV, w, normaliser(mask, "dapo", 4), LossConfig("dapo", beta=0.1), ref)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and torch.isfinite(m["kl"])
    assert logp.grad[:, 1].abs().sum() == 0
    # the naive expression is what used to break
    naive = (torch.exp(ref - logp.detach()) - (ref - logp.detach()) - 1) * mask
    assert torch.isnan(naive).any()
    assert k3_kl(logp.detach(), ref, mask)[:, 1].tolist() == [0.0, 0.0]


# ----- defect 5: DAPO's normaliser is global across data-parallel ranks ----------------------------------------
def test_dapo_normaliser_is_global_across_ranks():
    """Two ranks with 10 and 30 policy tokens: every token must weigh 1/40 after DDP's gradient average
    (per-rank normalisers gave 1/20 and 1/60)."""
    torch.manual_seed(0)
    masks = [torch.ones(1, 10), torch.ones(1, 30)]
    logps = [torch.randn(1, n).requires_grad_(True) for n in (10, 30)]
    adv = torch.tensor([1.0])
    cfg = LossConfig("dapo")
    local = [normaliser(m, "dapo", 64) for m in masks]
    grads = []
    for lp, m, n in zip(logps, masks, local, strict=True):
        norm, scale = global_normaliser(n, all_reduce_sum=lambda _x: sum(local), world_size=2)
        loss, _ = policy_loss(lp, lp.detach(), adv, token_weights(m, "dapo"), norm, cfg, scale=scale)
        loss.backward()
        grads.append(lp.grad / 2)  # DDP averages gradients over the two ranks
    per_token = torch.cat([g.flatten() for g in grads])
    assert per_token.tolist() == pytest.approx([-1 / 40] * 40, abs=1e-8)
    # what one process with all 40 tokens computes
    one = torch.cat([lp.detach() for lp in logps], dim=1).requires_grad_(True)
    full_mask = torch.ones(1, 40)
    loss, _ = policy_loss(one, one.detach(), adv, token_weights(full_mask, "dapo"), 40.0, cfg)
    loss.backward()
    assert torch.allclose(one.grad.flatten(), per_token, atol=1e-8)
    assert global_normaliser(12.0) == (12.0, 1.0)


# ----- defect 4: truncated importance sampling for the sampler/trainer mismatch -----------------------------
def test_truncated_is_weights():
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    sampler = torch.tensor([[-1.1, -0.5, float("nan"), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = truncated_is_weights(old, sampler, mask, cap=2.0)
    assert w.tolist()[0] == pytest.approx([math.exp(0.1), math.exp(-1.5), 1.0, 1.0])
    w = truncated_is_weights(torch.tensor([[0.0]]), torch.tensor([[-3.0]]), torch.ones(1, 1), cap=2.0)
    assert w.item() == 2.0  # e^3 truncated at the cap
    assert not truncated_is_weights(old.requires_grad_(True), sampler, mask, 2.0).requires_grad


def test_is_weights_scale_the_surrogate_not_the_kl():
    """Matches TRL's order: per_token_loss * importance_sampling_ratio, then + beta * kl."""
    w = token_weights(MASK, "grpo")
    is_w = torch.tensor([[0.5, 2.0], [1.5, 1.0]])
    ref = torch.tensor([[-1.2, -2.0], [-0.4, -9.0]])
    cfg = LossConfig("grpo", beta=0.1)
    loss, _ = policy_loss(LOGP, OLD, ADV, w, 2.0, cfg, ref, is_w)
    ratio = torch.exp(LOGP - OLD)
    surrogate = -torch.minimum(ratio * ADV[:, None], torch.clamp(ratio, 0.8, 1.2) * ADV[:, None])
    d = ref - LOGP
    per_token = surrogate * is_w + 0.1 * (torch.exp(d) - d - 1)
    expected = ((per_token * MASK).sum(-1) / MASK.sum(-1)).mean()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-8)
    unweighted, _ = policy_loss(LOGP, OLD, ADV, w, 2.0, cfg, ref, torch.ones_like(is_w))
    assert unweighted.item() == pytest.approx(
        policy_loss(LOGP, OLD, ADV, w, 2.0, cfg, ref)[0].item(), abs=1e-8
    )


def test_is_correction_removes_a_synthetic_mismatch():
    """A sampler whose log-probs are the trainer's plus noise (bf16-like mismatch): the corrected gradient
    estimates the trainer-policy gradient; only truncated tokens keep a residual."""
    from trace_train.grpo.trainer import mismatch_stats

    torch.manual_seed(0)
    old = torch.randn(4, 50) - 2.0
    noise = 0.03 * torch.randn(4, 50)
    noise[0, 0] = -1.5  # one token far off, beyond the cap
    sampler = old + noise
    mask = torch.ones(4, 50)
    w = truncated_is_weights(old, sampler, mask, cap=2.0)
    stats = mismatch_stats(old, sampler, mask, w)
    n = stats["tokens"]
    assert n == 200
    assert stats["abs_mean"] / n == pytest.approx(noise.abs().mean().item(), rel=1e-5)
    assert stats["abs_max"] == pytest.approx(1.5, rel=1e-5)
    assert stats["truncated_fraction"] == 1.0  # only the far-off token is truncated
    assert stats["residual_abs_mean"] == pytest.approx(1.5 - math.log(2.0), rel=1e-4)
    off = mismatch_stats(old, sampler, mask, None)  # no correction: the whole mismatch is residual
    assert off["residual_abs_mean"] == pytest.approx(off["abs_mean"], rel=1e-6)


def test_bad_loss_settings_are_clear_errors():
    with pytest.raises(ValueError, match="clip_eps_low"):
        LossConfig("grpo", clip_eps_low=0.0)
    with pytest.raises(ValueError, match="beta"):
        LossConfig("grpo", beta=float("nan"))
    with pytest.raises(ValueError, match="is_cap"):
        LossConfig("grpo", is_cap=float("inf"))


def test_micro_batches_respect_sequence_and_token_caps():
    from types import SimpleNamespace

    from trace_train.grpo.trainer import _micro_batches

    args = SimpleNamespace(micro_batch_size=3, micro_batch_tokens=100)
    assert _micro_batches([0, 1, 2, 3, 4], [10, 10, 10, 10, 10], args) == [[0, 1, 2], [3, 4]]
    assert _micro_batches([0, 1, 2, 3], [60, 50, 40, 250], args) == [[0], [1, 2], [3]]  # 250 alone: >= 1 each


# ----- issue 31: tokens on both sides of the clip, so that min(unclipped, clipped) matters ----------------------
def test_clipped_objective_takes_the_pessimistic_side_on_both_sides_of_the_clip():
    """One sequence per case (dapo: every token weighs 1/5). Ratios 0.5 and e^0.5 ~ 1.65, eps 0.2:
    - A > 0, ratio < 0.8:  min picks the unclipped 0.5 * A, which has a gradient (ratio * A);
    - A < 0, ratio > 1.2:  min picks the unclipped 1.65 * A, with a gradient;
    - A > 0, ratio > 1.2 and A < 0, ratio < 0.8: min picks the clipped term, no gradient;
    - inside the band: both terms agree, gradient ratio * A.
    Replacing the min by the clipped term alone changes the first two values and zeroes their gradients."""
    ratios = torch.tensor([0.5, math.exp(0.5), math.exp(0.5), 0.5, 1.1])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    old = torch.full((5, 1), -1.0)
    logp = (old + torch.log(ratios)[:, None]).requires_grad_(True)
    mask = torch.ones(5, 1)
    cfg = LossConfig("dapo", clip_eps_high=0.2)
    loss, m = policy_loss(logp, old, adv, token_weights(mask, "dapo"), normaliser(mask, "dapo", 1), cfg)
    per_token = [-0.5 * 1.0, -math.exp(0.5) * -1.0, -1.2 * 1.0, -0.8 * -1.0, -1.1 * 1.0]
    assert loss.item() == pytest.approx(sum(per_token) / 5, abs=1e-6)
    loss.backward()
    # d/dlogp of -ratio * A / 5 is -ratio * A / 5 where the unclipped term is taken, else 0
    expected = [-0.5 / 5, math.exp(0.5) / 5, 0.0, 0.0, -1.1 / 5]
    assert logp.grad.flatten().tolist() == pytest.approx(expected, abs=1e-6)
    assert logp.grad[:2].abs().min() > 0  # the two tokens where the min matters do move
    assert m["clip_fraction"].item() == pytest.approx(2 / 5)  # the two clipped (zero-gradient) tokens
