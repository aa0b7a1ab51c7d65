"""Rescue hints for all-failed groups (issue 29): who gets rescued, what it costs, and the importance weights of
the hinted rollouts, checked against a hand computation with the model."""

from __future__ import annotations

import math

import pytest
import torch

from tests.train.levels_args import levels_args
from trace_train.grpo import trainer as trainer_mod
from trace_train.grpo.trainer import GRPOTrainer
from trace_train.rollout import RolloutStats

T = 0.7  # sampling temperature: the log-probs of the weights are at it


def _args(model_dir, out, **kw):
    return levels_args(
        model_dir,
        out,
        **{"max_new_tokens": 5, "temperature": T, "rescue_fraction": 0.5, "micro_batch_size": 16, **kw},
    )


def _script(monkeypatch, first_round):
    """Rewards by hand: ``first_round(group, j)`` for the un-hinted rollouts; a rescue rollout succeeds when it
    is the first of its group's rescue rollouts."""
    real = trainer_mod.collect
    calls = []

    def scripted(policy, envs, specs, *a, **k):
        trajs = real(policy, envs, specs, *a, **k)
        calls.append([t.spec for t in trajs])
        seen: dict[int, int] = {}
        for t in trajs:
            j = seen[t.spec.group] = seen.get(t.spec.group, -1) + 1
            t.reward = (1.0 if j == 0 else 0.0) if t.spec.rescue else first_round(t.spec.group, j)
        return trajs

    monkeypatch.setattr(trainer_mod, "collect", scripted)
    return calls


def test_all_failed_groups_are_rescued_and_counted(tiny_model_dir, tmp_path, monkeypatch):
    # group 0 fails every rollout, group 1 solves one
    calls = _script(monkeypatch, lambda g, j: 1.0 if (g == 1 and j == 0) else 0.0)
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "r", curriculum="adaptive"))
    trajs, m = trainer.collect_groups(RolloutStats())
    # the level's estimate saw the un-hinted rollouts only (0 of 4 and 1 of 4: one round, pooled), not the rescues
    assert trainer.curriculum.estimate(1) == pytest.approx(1 / 8)
    assert len(calls) == 2 and len(calls[1]) == 2  # round(0.5 * 4) hinted rollouts, for group 0 only
    assert all(s.hint and s.rescue and s.group == 0 and s.seed == calls[0][0].seed for s in calls[1])
    g0 = [t for t in trajs if t.spec.group == 0]
    assert len(g0) == 4 and sum(t.spec.rescue for t in g0) == 2  # the group keeps G members
    assert m["rescued_groups"] == 1 and m["rescued_group_share"] == 0.5
    assert m["rescue_success_rate"] == 0.5 and m["rescued_informative_share"] == 1.0
    assert m["rollouts"] == 10 and trainer.state["rollouts"] == 10  # rescues count in the budget
    assert m["informative_group_share"] == 1.0
    for t in g0:  # trained on the base prompt: the policy's own tokens after the un-hinted system prompt
        ids, mask = t.training_ids()
        text = trainer.policy.tokenizer.decode(ids)
        assert "Hint:" not in text
        assert [i for i, x in zip(ids, mask, strict=True) if x] == [
            i for i, x in zip(t.token_ids, t.policy_mask, strict=True) if x
        ]
        if t.spec.rescue:
            assert "Hint:" in trainer.policy.tokenizer.decode(t.token_ids)


def test_rescue_respects_the_rollout_budget(tiny_model_dir, tmp_path, monkeypatch):
    calls = _script(monkeypatch, lambda g, j: 0.0)  # both groups fail: 2 x 2 rescue rollouts wanted
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "b", rollout_budget=11))
    _, m = trainer.collect_groups(RolloutStats())
    assert m["rescued_groups"] == 1 and len(calls[1]) == 2  # 8 spent, 3 left: one group's 2 fit
    assert trainer.state["rollouts"] == 10


def _policy_logprobs(model, ids: list[int], mask: list[int]) -> list[float]:
    """log pi(token | everything before it) at temperature T for the tokens where ``mask`` is 1: by hand."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float() / T
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[j - 1, ids[j]]) for j in range(1, len(ids)) if mask[j]]


@pytest.mark.parametrize("cap", [2.0, 1.01])
def test_rescue_weights_equal_a_hand_computation(tiny_model_dir, tmp_path, monkeypatch, cap):
    """w_t = min(pi(a_t | base prompt) / pi(a_t | hinted prompt), cap) on every token of a rescue rollout (the
    cap 1.01 truncates some: the tiny model's weights lie within about 2% of 1), 1 on the other rollouts' tokens (float32: no sampler mismatch)."""
    _script(monkeypatch, lambda g, j: 1.0 if (g == 1 and j == 0) else 0.0)
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "w", rescue_is_cap=cap, max_new_tokens=8))
    trajs, _ = trainer.collect_groups(RolloutStats())
    model = trainer.policy.model
    model.eval()
    expected = []
    for t in trajs:
        if not t.spec.rescue:
            expected.append(None)
            continue
        base = _policy_logprobs(model, *t.training_ids())
        hinted = _policy_logprobs(model, t.token_ids, t.policy_mask)
        assert len(base) == len(hinted) > 0
        expected.append([min(math.exp(b - h), cap) for b, h in zip(base, hinted, strict=True)])
    seen = []
    real_loss = trainer_mod.policy_loss

    def spy(logp, old_logp, adv, w, norm, cfg, ref_logp=None, is_w=None, scale=1.0):
        seen.append((w.detach().clone(), None if is_w is None else is_w.detach().clone()))
        return real_loss(logp, old_logp, adv, w, norm, cfg, ref_logp, is_w, scale)

    monkeypatch.setattr(trainer_mod, "policy_loss", spy)
    trainer.optimise(trajs)
    ((w, is_w),) = seen  # one micro-batch, in the batch's order
    assert is_w is not None
    n_checked, truncated, moved = 0, 0, 0
    for i, exp in enumerate(expected):
        got = is_w[i][w[i] > 0].tolist()
        if exp is None:
            assert got == pytest.approx([1.0] * len(got), abs=1e-4)
            continue
        assert got == pytest.approx(exp, rel=1e-4, abs=1e-5)
        n_checked += 1
        truncated += sum(x == cap for x in exp)
        moved += sum(abs(x - 1.0) > 1e-3 for x in exp)
    assert n_checked == 2 and moved > 0  # the hint changed the policy's probabilities
    if cap < 2:
        assert truncated > 0
