"""Training log-probs: the shared-prefix, packed, head-on-policy-tokens path equals the plain padded one
(values and gradients), at the sampling temperature and with the sampler's top-k / top-p."""

from __future__ import annotations

import pytest
import torch

from tests.train.old_transformers import with_past_key_values_signature
from trace_train.engine import attention
from trace_train.grpo.logprobs import pad_batch, sequence_logprobs, shared_prefix_logprobs
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import LoraSettings, attach_lora


def _group(prefix_len=40, seed=0):
    """A GRPO-like batch: two groups sharing a long prompt prefix, policy turns and env turns of uneven length."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(3, 300, (n,), generator=g).tolist()  # noqa: E731
    prefix = rand(prefix_len)
    seqs, masks = [], []
    for grp in range(2):
        prompt = prefix + rand(5 + 3 * grp)
        for j in range(3):
            ids, mask = list(prompt), [0] * len(prompt)
            for turn in range(1 + (j + grp) % 3):
                gen = rand(4 + 2 * j + turn)
                ids += gen
                mask += [1] * len(gen)
                env = rand(3 + turn)
                ids += env
                mask += [0] * len(env)
            seqs.append(ids)
            masks.append(mask)
    return seqs, masks


def _lora_model():
    model, tok = build_tiny_model(seed=1)
    model = attach_lora(model, LoraSettings(rank=4), None)
    with torch.no_grad():  # non-zero B so that LoRA weights get real gradients through every path
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    return model, tok.pad_token_id


def _loss_and_grads(model, logp, tmask):
    model.zero_grad(set_to_none=True)
    w = torch.arange(1, logp.shape[0] + 1, dtype=torch.float32)[:, None]  # distinct per-sequence weights
    loss = -(logp * tmask * w).sum() / tmask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    # every gradient compared against these is non-zero (a zero one would make its comparison empty)
    assert grads and all(float(g.abs().max()) > 0 for g in grads.values())
    return loss.detach(), grads


def _count_cascade_calls(monkeypatch) -> list[int]:
    """A list that grows by one each time the training attention takes the cascade path over a shared prefix."""
    calls: list[int] = []
    cascade = attention.CascadeAttention.apply
    monkeypatch.setattr(attention.CascadeAttention, "apply", lambda *a: calls.append(1) or cascade(*a))
    return calls


SAMPLINGS = [
    SamplingConfig(temperature=1.0),
    SamplingConfig(temperature=0.6),
    SamplingConfig(temperature=0.8, top_k=50, top_p=0.9),
]


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("row_tokens", [None, 200])
def test_shared_prefix_values_and_gradients_equal_unshared(sampling, row_tokens, monkeypatch):
    calls = _count_cascade_calls(monkeypatch)
    model, pad = _lora_model()
    model.train()
    seqs, masks = _group()
    ids, attn, pmask = pad_batch(seqs, masks, pad)
    ref, ref_mask = sequence_logprobs(model, ids, attn, pmask, sampling=sampling, share_prefix=False)
    ref_loss, ref_grads = _loss_and_grads(model, ref, ref_mask)
    got, got_mask = shared_prefix_logprobs(model, seqs, masks, pad, sampling=sampling, row_tokens=row_tokens)
    assert got.shape == ref.shape and torch.equal(got_mask, ref_mask)
    assert torch.allclose(got * got_mask, ref * ref_mask, atol=1e-5)
    padded = sequence_logprobs(model, ids, attn, pmask, sampling=sampling)  # right-padded input: shared path
    assert torch.allclose(padded[0] * ref_mask, ref * ref_mask, atol=1e-5)
    loss, grads = _loss_and_grads(model, got, got_mask)
    assert torch.allclose(loss, ref_loss, atol=1e-6)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for n in grads:
        assert torch.allclose(grads[n], ref_grads[n], atol=1e-6, rtol=1e-4), n
    assert calls, "the training forward did not take the cascade attention over the shared prefix"


def test_temperature_changes_the_logprobs_and_greedy_scores_at_one():
    model, pad = _lora_model()
    seqs, masks = _group()
    ids, attn, pmask = pad_batch(seqs, masks, pad)
    with torch.no_grad():
        t1, m = sequence_logprobs(model, ids, attn, pmask, temperature=1.0)
        t05, _ = sequence_logprobs(model, ids, attn, pmask, temperature=0.5)
        greedy, _ = sequence_logprobs(model, ids, attn, pmask, sampling=SamplingConfig(temperature=0.0))
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    assert not torch.allclose(t1 * m, t05 * m)
    assert torch.equal(greedy, t1)
    # direct check of one position against log_softmax(logits / T)
    b, t = (m > 0).nonzero()[0].tolist()
    col = t + (logits.shape[1] - m.shape[1])
    expect = torch.log_softmax(logits[b, col] / 0.5, -1)[ids[b, col + 1]]
    assert torch.allclose(t05[b, t], expect, atol=1e-5)
    with pytest.raises(ValueError, match="not both"):
        sequence_logprobs(model, ids, attn, pmask, sampling=SamplingConfig(temperature=0.7), temperature=0.5)


def test_top_k_renormalises_over_kept_tokens_and_keeps_the_target():
    from trace_train.engine.sampling import target_logprobs

    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    s = SamplingConfig(temperature=1.0, top_k=2)
    assert torch.allclose(
        target_logprobs(logits, torch.tensor([0]), s), torch.log_softmax(logits[0, :2], -1)[:1]
    )
    # a target outside the current top-k stays finite (kept in the normalisation)
    lp = target_logprobs(logits, torch.tensor([3]), s)
    assert torch.isfinite(lp).all()
    assert torch.allclose(lp, torch.log_softmax(torch.tensor([3.0, 2.0, 0.0]), -1)[2:])


def test_no_shared_prefix_and_single_sequence():
    model, pad = _lora_model()
    seqs, masks = _group()
    seqs[0] = [7] + seqs[0]  # nothing shared any more
    masks[0] = [0] + masks[0]
    for s, m in ((seqs, masks), (seqs[:1], masks[:1])):
        ids, attn, pmask = pad_batch(s, m, pad)
        with torch.no_grad():
            ref, rm = sequence_logprobs(model, ids, attn, pmask, share_prefix=False)
            got, gm = shared_prefix_logprobs(model, s, m, pad)
        assert torch.equal(rm, gm) and torch.allclose(ref * rm, got * gm, atol=1e-5)


def test_a_batch_without_policy_tokens_still_backpropagates():
    """A micro-batch whose policy tokens were all cut (length cap) gives zero log-probs and mask, and a loss
    that backpropagates zero gradients instead of failing."""
    model, pad = _lora_model()
    seqs, masks = _group()
    masks = [[0] * len(m) for m in masks]
    logp, tmask = shared_prefix_logprobs(model, seqs, masks, pad)
    assert tmask.sum() == 0 and logp.abs().sum() == 0
    loss = -(logp * tmask).sum()
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert grads and all(g is not None and g.abs().sum() == 0 for g in grads)


def test_a_prefix_computed_once_for_several_micro_batches_gives_the_same_gradients():
    """PrefixKV: micro-batches read the prefix's keys/values computed once per batch; their gradients add up
    on it and one backward sends them through the prefix: equal to recomputing it in every micro-batch."""
    from trace_train.grpo.logprobs import PrefixKV, shared_prefix_length

    model, pad = _lora_model()
    seqs, masks = _group()
    shared = shared_prefix_length(seqs, masks)
    assert shared >= 40

    def run(use_prefix: bool):
        model.zero_grad(set_to_none=True)
        prefix = PrefixKV.compute(model, seqs[0][:shared]) if use_prefix else None
        values = []
        for part in (slice(0, 2), slice(2, 3), slice(3, 6)):  # uneven micro-batches, one of a single sequence
            logp, tmask = shared_prefix_logprobs(model, seqs[part], masks[part], pad, prefix=prefix)
            loss = -(logp * tmask).sum() / 100.0
            loss.backward()
            values.append(logp.detach() * tmask)
        if prefix is not None:
            prefix.backward()
        return values, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_values, ref_grads = run(False)
    # a micro-batch sharing more than the batch's prefix (a group's own prompt) computes that extension once
    from trace_train.grpo.logprobs import _decoder_and_head

    shapes = []
    hook = _decoder_and_head(model)[0].register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        got_values, got_grads = run(True)
    finally:
        hook.remove()
    group0 = shared_prefix_length(seqs[0:2], masks[0:2])
    assert group0 > shared and (1, group0 - shared) in shapes, shapes
    for a, b in zip(ref_values, got_values, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert ref_grads and ref_grads.keys() == got_grads.keys()
    assert all(float(g.abs().max()) > 0 for g in ref_grads.values())
    for name in ref_grads:
        torch.testing.assert_close(got_grads[name], ref_grads[name], atol=1e-6, rtol=1e-4)


def test_a_prefix_that_does_not_fit_the_sequences_is_refused():
    from trace_train.grpo.logprobs import PrefixKV

    model, pad = _lora_model()
    seqs, masks = _group()
    prefix = PrefixKV.compute(model, seqs[0][:20])
    with pytest.raises(ValueError, match="start with the given prefix"):
        shared_prefix_logprobs(model, [[1, 2] + seqs[0]], [[0, 0] + masks[0]], pad, prefix=prefix)
    long_prefix = PrefixKV.compute(model, seqs[0][: masks[0].index(1) + 2])  # a policy token inside it
    with pytest.raises(ValueError, match="policy token"):
        shared_prefix_logprobs(model, seqs[:1], masks[:1], pad, prefix=long_prefix)


def _tree_batch(seed=3):
    """A micro-batch holding several GRPO groups, shuffled: groups A and B share a 20-token preamble after the
    common 40-token prefix, then each has its own 30-token prompt; group C has its own 30-token prompt; one
    sequence has a prompt of its own. Completions and env turns of uneven length follow."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(3, 300, (n,), generator=g).tolist()  # noqa: E731
    common, preamble = rand(40), [5] + rand(19)
    prompts = {
        "A": common + preamble + [7] + rand(29),
        "B": common + preamble + [9] + rand(29),
        "C": common + [11] + rand(29),
        "D": common + [13] + rand(29),
    }
    seqs, masks = [], []
    for name, members in (("A", 3), ("B", 2), ("C", 4), ("D", 1)):
        for j in range(members):
            ids, mask = list(prompts[name]), [0] * len(prompts[name])
            for turn in range(1 + j % 2):
                gen = rand(3 + 2 * j + turn)
                ids += gen
                mask += [1] * len(gen)
                env = rand(4)
                ids += env
                mask += [0] * len(env)
            seqs.append(ids)
            masks.append(mask)
    order = torch.randperm(len(seqs), generator=g).tolist()
    return [seqs[i] for i in order], [masks[i] for i in order]


@pytest.mark.parametrize("given_prefix", [False, True])
def test_groups_in_one_micro_batch_compute_each_prompt_once(given_prefix):
    """Several groups in one micro-batch: the common prefix, each shared preamble and each group's prompt are
    computed once (one decoder call each, on top of what they extend), and values and gradients equal the
    padded computation."""
    from trace_train.grpo.logprobs import PrefixKV, _decoder_and_head

    model, pad = _lora_model()
    model.train()
    seqs, masks = _tree_batch()
    ids, attn, pmask = pad_batch(seqs, masks, pad)
    ref, ref_mask = sequence_logprobs(model, ids, attn, pmask, share_prefix=False)
    ref_loss, ref_grads = _loss_and_grads(model, ref, ref_mask)

    shapes = []
    hook = _decoder_and_head(model)[0].register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        model.zero_grad(set_to_none=True)
        prefix = PrefixKV.compute(model, seqs[0][:40]) if given_prefix else None
        got, got_mask = shared_prefix_logprobs(model, seqs, masks, pad, prefix=prefix)
        w = torch.arange(1, got.shape[0] + 1, dtype=torch.float32)[:, None]
        loss = -(got * got_mask * w).sum() / got_mask.sum()
        loss.backward()
        if prefix is not None:
            prefix.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    finally:
        hook.remove()
    # the prefix, the A/B preamble, and the A, B and C prompts (less the last token, which predicts the first
    # policy token): one call each; D's prompt is packed with its rest
    assert shapes.count((1, 40)) == 1 and shapes.count((1, 20)) == 1 and shapes.count((1, 29)) == 3, shapes
    assert torch.equal(got_mask, ref_mask)
    torch.testing.assert_close(got * got_mask, ref * ref_mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss.detach(), ref_loss, atol=1e-6, rtol=1e-5)
    assert grads.keys() == ref_grads.keys() and grads
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize(("given_prefix", "ours"), [(False, True), (True, True), (False, False)])
def test_gradient_checkpointing_keeps_the_shared_prefix_path(given_prefix, ours, monkeypatch):
    """Under gradient checkpointing (layers replayed in backward) the shared-prefix path still runs (cascade
    attention, each prompt computed once) and gives the gradients of the padded path without checkpointing.
    Checkpointing set up otherwise (transformers' default is reentrant, which would lose the prefix's gradient)
    takes the padded path instead, with the same gradients."""
    from trace_train.grpo.logprobs import PrefixKV
    from trace_train.grpo.trainer import enable_gradient_checkpointing

    calls = _count_cascade_calls(monkeypatch)
    model, pad = _lora_model()
    model.train()
    seqs, masks = _tree_batch()
    ids, attn, pmask = pad_batch(seqs, masks, pad)
    ref, ref_mask = sequence_logprobs(model, ids, attn, pmask, share_prefix=False)
    ref_loss, ref_grads = _loss_and_grads(model, ref, ref_mask)

    if ours:
        enable_gradient_checkpointing(model)
    else:
        model.get_base_model().gradient_checkpointing_enable()
        model.enable_input_require_grads()  # reentrant checkpointing needs inputs that require grad
    mlp_runs = []
    mlp = model.get_decoder().layers[0].mlp
    run_mlp = mlp.forward  # a wrapper, not a hook: forward hooks do not fire in a checkpoint's replay
    mlp.forward = lambda *a, **k: mlp_runs.append(1) or run_mlp(*a, **k)
    try:
        model.zero_grad(set_to_none=True)
        prefix = PrefixKV.compute(model, seqs[0][:40]) if given_prefix else None
        got, got_mask = shared_prefix_logprobs(model, seqs, masks, pad, prefix=prefix)
        forwards = len(mlp_runs)
        w = torch.arange(1, got.shape[0] + 1, dtype=torch.float32)[:, None]
        (-(got * got_mask * w).sum() / got_mask.sum()).backward()
        if prefix is not None:
            prefix.backward()
    finally:
        del mlp.forward
    assert len(mlp_runs) > forwards, "no layer was replayed: checkpointing is not on"
    assert bool(calls) == ours, "the checkpointed forward took the wrong path"
    torch.testing.assert_close(got * got_mask, ref * ref_mask, atol=1e-5, rtol=1e-5)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == ref_grads.keys() and grads
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])  # eager: the path other devices take (no cascade)
def test_shared_prefix_reaches_a_decoder_with_the_pre_5_24_signature(attention):
    # transformers < 5.24 takes the cache as past_key_values and ignores an unknown cache= keyword: the prefix
    # the sequences attend to would silently be missing
    model, pad = _lora_model()
    model.base_model.model.set_attn_implementation(attention)
    seqs, masks = _group()
    ids, attn, pmask = pad_batch(seqs, masks, pad)
    with torch.no_grad():
        ref, ref_mask = sequence_logprobs(model, ids, attn, pmask, share_prefix=False)
        with_past_key_values_signature(model)
        got, got_mask = shared_prefix_logprobs(model, seqs, masks, pad)
    assert torch.equal(got_mask, ref_mask) and ref_mask.any()
    assert torch.allclose(got * got_mask, ref * ref_mask, atol=1e-5)
