"""Advantages and every loss variant on hand-computed batches."""

from __future__ import annotations

import math

import pytest
import torch

from trace_train.grpo.advantages import group_advantages, informative_groups
from trace_train.grpo.losses import LossConfig, k3_kl, normaliser, policy_loss, token_weights


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
