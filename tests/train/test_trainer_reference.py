"""The GRPO trainer's update against a reference written from the formulas (issue 31).

A task whose rewards differ inside a group (the tiny model earns the parity env's reward about half the time):
one optimiser step's LoRA gradient must equal an independent float64 computation, group by group,

    A_i = (r_i - mean_g r) / (std_g r + eps)          (population std; Dr. GRPO: no division)
    loss = - sum_i A_i * sum_t w_it * logp_it / N      (grpo: w = 1/|o_i|, N = sequences;
                                                        dapo: w = 1, N = tokens; dr_grpo: w = 1, N = seqs * max)

and the step must make the rewarded completions more likely. An advantage of the wrong sign, a wrong
normaliser or a loss over the wrong tokens each break it.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict

import pytest
import torch

from trace_train.config import GRPOArgs
from trace_train.grpo.trainer import GRPOTrainer
from trace_train.rollout import RolloutStats

EPS = 1e-6  # group_advantages' eps (part of the formula, not a tolerance)


def _args(tmp_path, model, **kw) -> GRPOArgs:
    base = dict(
        env_id="traintest/parity-v0",
        model=str(model),
        out=str(tmp_path / "grpo"),
        steps=8,  # room for _sample's fresh tasks (the trainer refuses to leave the train split)
        groups_per_step=2,
        group_size=4,
        max_new_tokens=6,
        max_turns=1,
        temperature=1.0,
        lr=2e-3,
        max_grad_norm=1e9,  # no clipping: the step is the gradient's
        tensorboard=False,
        progress=False,
        num_threads=1,
    )
    return GRPOArgs(**{**base, **kw})


def reference_advantages(rewards: list[float], groups: list[int], scale: bool) -> list[float]:
    members: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    adv = [0.0] * len(rewards)
    for idx in members.values():
        rs = [rewards[i] for i in idx]
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs))
        for i in idx:
            adv[i] = (rewards[i] - mean) / (std + EPS) if scale else rewards[i] - mean
    return adv


def policy_token_logprobs(model, ids: list[int], mask: list[int]) -> torch.Tensor:
    """log p(token_t | tokens_<t) at every policy position, one plain forward of the whole sequence."""
    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0].double()
    logp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, x[0, 1:, None])[:, 0]
    keep = torch.tensor(mask[1:], dtype=torch.bool)
    return logp[keep]


def reference_loss(model, trajs, loss_type: str, max_completion: int) -> torch.Tensor:
    rewards = [t.reward for t in trajs]
    adv = reference_advantages(rewards, [t.spec.group for t in trajs], scale=loss_type != "dr_grpo")
    rows = [policy_token_logprobs(model, *t.training_ids()) for t in trajs]
    total = torch.zeros((), dtype=torch.float64)
    for a, lp in zip(adv, rows, strict=True):
        total = total - a * (lp.mean() if loss_type == "grpo" else lp.sum())
    if loss_type == "grpo":
        return total / len(trajs)
    if loss_type == "dr_grpo":
        return total / (len(trajs) * max_completion)
    return total / sum(len(lp) for lp in rows)


def _perturb_lora_b(model) -> None:
    """LoRA B starts at 0 (so A's gradient is 0): a non-zero B gives every LoRA weight a gradient."""
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)


def _sample(trainer, attempts: int = 8):
    """A batch in which every group's rewards differ (fresh tasks until one comes: on another CPU the sampled
    replies, and so the parity rewards, may differ from this one's)."""
    for _ in range(attempts):
        trajs, _ = trainer.collect_groups(RolloutStats())
        by_group: dict[int, set[float]] = defaultdict(set)
        for t in trajs:
            by_group[t.spec.group].add(t.reward)
        if all(len(rs) > 1 for rs in by_group.values()):
            return trajs
    raise AssertionError(f"no batch with differing rewards inside every group in {attempts} tries")


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_one_step_gradient_equals_the_per_group_reference(tiny_model_dir, tmp_path, loss_type):
    trainer = GRPOTrainer(_args(tmp_path, tiny_model_dir, loss_type=loss_type))
    model = trainer.policy.model
    _perturb_lora_b(model)
    trajs = _sample(trainer)
    start = {k: v.clone() for k, v in model.state_dict().items()}

    seen: list[dict[str, torch.Tensor]] = []
    real_clip = trainer._clip_and_check

    def spy():
        seen.append(
            {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        )
        return real_clip()

    trainer._clip_and_check = spy
    trainer.optimise(trajs)
    assert len(seen) == 1
    got = seen[0]

    ref = copy.deepcopy(model)
    ref.load_state_dict(start)
    ref.double()
    ref.zero_grad(set_to_none=True)
    loss = reference_loss(ref, trajs, loss_type, trainer.args.max_new_tokens * trainer.args.max_turns)
    loss.backward()
    want = {n: p.grad for n, p in ref.named_parameters() if p.requires_grad}
    assert got.keys() == want.keys() and any("lora_A" in n for n in want) and any("lora_B" in n for n in want)
    for name, g in want.items():
        assert g.abs().max() > 1e-6, f"{name}: the reference gradient is zero, the comparison would be empty"
        # float32 trainer against float64 reference: elementwise up to float noise, and as a whole tensor
        torch.testing.assert_close(got[name].double(), g, rtol=1e-3, atol=1e-5 * float(g.abs().max()))
        assert float((got[name].double() - g).norm() / g.norm()) < 1e-4, name


def test_the_step_makes_the_rewarded_completions_more_likely(tiny_model_dir, tmp_path):
    """After one update the group-relative objective sum_i A_i * mean_t logp_it has risen, the rewarded
    completions' (per-token) log-probs have risen on average and the unrewarded ones' have fallen (the sign of the
    update; one completion can move against its group, as the step is shared, so the claim is about means: it
    held on 10 of 10 sampled batches at two learning rates)."""
    trainer = GRPOTrainer(_args(tmp_path, tiny_model_dir))
    model = trainer.policy.model
    _perturb_lora_b(model)
    trajs = _sample(trainer)
    adv = reference_advantages([t.reward for t in trajs], [t.spec.group for t in trajs], scale=True)

    def logps() -> list[float]:
        with torch.no_grad():
            return [float(policy_token_logprobs(model, *t.training_ids()).mean()) for t in trajs]

    before = logps()
    trainer.optimise(trajs)
    delta = [a - b for a, b in zip(logps(), before, strict=True)]
    assert sum(a * d for a, d in zip(adv, delta, strict=True)) > 0
    rewarded = [d for d, t in zip(delta, trajs, strict=True) if t.reward == 1.0]
    unrewarded = [d for d, t in zip(delta, trajs, strict=True) if t.reward == 0.0]
    assert rewarded and unrewarded
    assert sum(rewarded) / len(rewarded) > 0 > sum(unrewarded) / len(unrewarded), (rewarded, unrewarded)
