"""SFT splits a batch into token-bounded micro-batches whose gradients add up to the whole batch's, so memory
is bounded by ``micro_batch_tokens`` and the update does not depend on it."""

from __future__ import annotations

import pytest
import torch

from trace_train.config import SFTArgs
from trace_train.policies.hf import LoraSettings, attach_lora
from trace_train.sft import backward_batch, token_micro_batches


def test_micro_batches_keep_order_and_budget():
    batch = [([0] * n, [1] * n) for n in (5, 4, 9, 2, 2, 12)]
    micro = token_micro_batches(batch, 10)
    assert [[len(x) for x, _ in m] for m in micro] == [[5, 4], [9], [2, 2], [12]]
    assert [item for m in micro for item in m] == batch  # nothing lost, nothing reordered


def test_shared_prefix_tokens_count_once():
    prefix = list(range(100, 140))
    batch = [(prefix + [i] * 10, [0] * 40 + [1] * 10) for i in range(5)]  # 50 tokens each, 40 shared
    assert [len(m) for m in token_micro_batches(batch, 60)] == [1, 1, 1, 1, 1]
    assert [len(m) for m in token_micro_batches(batch, 60, shared_prefix=True)] == [2, 2, 1]
    assert [len(m) for m in token_micro_batches(batch, 90, shared_prefix=True)] == [5]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(3, 200, (30,), generator=g).tolist()
    batch = []
    for j in range(4):
        ids, mask = prefix + torch.randint(3, 200, (3 + j,), generator=g).tolist(), []
        mask = [0] * len(ids)
        for turn in range(1 + j % 2):
            gen = torch.randint(3, 200, (4 + j + turn,), generator=g).tolist()
            env = torch.randint(3, 200, (5,), generator=g).tolist()
            ids, mask = ids + gen + env, mask + [1] * len(gen) + [0] * len(env)
        batch.append((ids, mask))
    return batch


@pytest.mark.parametrize("engine", ["cached", "simple"])
def test_micro_batched_gradients_equal_the_whole_batch(tiny_policy, engine):
    policy = tiny_policy
    policy.model = attach_lora(policy.model, LoraSettings(rank=4), None)
    with torch.no_grad():  # non-zero B so every LoRA weight gets a gradient
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    batch = _batch()

    def grads(budget):
        policy.model.zero_grad(set_to_none=True)
        loss, seen, trained = backward_batch(policy.model, policy, batch, budget, engine)
        g = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
        return loss, seen, trained, g

    loss_a, seen_a, trained_a, whole = grads(10**6)
    loss_b, seen_b, trained_b, split = grads(60)  # about one sequence per micro-batch
    assert len(token_micro_batches(batch, 60)) >= 3
    assert (seen_a, trained_a) == (seen_b, trained_b) == (sum(len(x) for x, _ in batch), trained_a)
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    assert whole and whole.keys() == split.keys()
    assert all(float(g.abs().max()) > 1e-6 for g in whole.values())  # non-zero, else the comparison is empty
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], atol=1e-6, rtol=1e-4)


def test_a_bad_budget_is_refused():
    with pytest.raises(ValueError, match="micro_batch_tokens|micro-batch-tokens"):
        SFTArgs(env_id="x", micro_batch_tokens=0)
