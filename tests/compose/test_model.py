"""The composed model: exact top-1 routing, only chosen adapters computed, frozen everything but gates."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel

import trace_train.compose.model as compose_model
from tests.compose.helpers import randomise_gates
from trace_train.compose.model import CompositionError
from trace_train.engine import decode_kernel
from trace_train.models import load_model


def ids(batch=2, length=11, seed=0):
    return torch.randint(5, 300, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_fresh_gates_route_everything_to_the_base(composition, compose_base):
    base, _ = load_model(compose_base)
    x = ids()
    with composition.recording() as logs:
        out = composition.model(x).logits
    assert composition.slot_share(logs)[0] == 1.0
    assert torch.equal(out, base(x).logits)


@torch.no_grad()
@pytest.mark.parametrize("slot", [0, 1, 2, 3])
def test_forced_slot_reproduces_that_adapter_exactly(composition, compose_base, adapters, slot):
    randomise_gates(composition)  # forcing must override whatever the gates say
    x = ids()
    with composition.forced(slot):
        out = composition.model(x).logits
    base, _ = load_model(compose_base)
    ref = base if slot == 0 else PeftModel.from_pretrained(base, str(adapters[slot - 1]))
    assert torch.equal(out, ref(x).logits)


@torch.no_grad()
@pytest.mark.parametrize("path", ["grouped", "per_token", "per_token_matmuls"])
def test_top1_routing_per_token_and_only_chosen_adapters_computed(composition, monkeypatch, path):
    """Layer 0 sees the same input whatever the routing, so each token's q_proj output must equal the
    forced-slot output of the slot its gate chose; and (grouped path) adapter k's A only sees k's tokens.
    ``per_token`` runs the C++ update where it builds (decode_kernel), ``per_token_matmuls`` the masked matmuls."""
    monkeypatch.setattr(compose_model, "PER_TOKEN_MAX", 0 if path == "grouped" else 10_000)
    monkeypatch.setattr(compose_model, "use_lora_kernel", path == "per_token")
    kernel_calls = decode_kernel.calls
    randomise_gates(composition)
    x = ids(batch=3, length=17)
    q0 = composition.routed["model.layers.0.self_attn.q_proj"]
    captured = {}
    hook = q0.register_forward_hook(lambda _m, _i, o: captured.__setitem__("out", o.detach().clone()))
    calls = []
    real_linear = torch.nn.functional.linear

    class Spy:
        def __getattr__(self, name):
            return getattr(torch.nn.functional, name)

        @staticmethod
        def linear(inp, weight, bias=None):
            calls.append((weight.data_ptr(), inp.shape[0]))
            return real_linear(inp, weight, bias)

    monkeypatch.setattr(compose_model, "F", Spy())
    with composition.recording() as logs:
        composition.model(x)
    routed_out = captured["out"].reshape(-1, q0.out_features)
    slots = logs[0][0].argmax(-1)
    assert len(set(slots.tolist())) == 4, "the test needs tokens on every slot"
    monkeypatch.setattr(compose_model, "F", torch.nn.functional)
    for k in range(4):
        with composition.forced(k):
            composition.model(x)
        forced = captured["out"].reshape(-1, q0.out_features)
        rows = slots == k
        torch.testing.assert_close(routed_out[rows], forced[rows], rtol=0, atol=1e-6)
    hook.remove()
    if path == "per_token" and decode_kernel.load() is not None:
        assert decode_kernel.calls > kernel_calls, "the per-token update did not take the kernel"
    if path != "grouped":
        assert not [c for c in calls if c[0] in {a.data_ptr() for a in q0.lora_A}]
        return
    # every A matmul of layer 0's q_proj ran on exactly the tokens of its slot, never on all tokens
    for k in range(1, 4):
        a_ptr = q0.lora_A[k - 1].data_ptr()
        sizes = [n for ptr, n in calls if ptr == a_ptr]
        assert sizes == [int((slots == k).sum())]


def test_gradients_reach_only_the_gates(composition):
    randomise_gates(composition)
    composition.model.train()
    with composition.recording() as logs:
        out = composition.model(ids())
    loss = out.logits.float().logsumexp(-1).mean() + sum(lg[0].sum() for lg in logs)
    loss.backward()
    gate_params = {id(p) for p in composition.gate_parameters()}
    with_grad = [n for n, p in composition.model.named_parameters() if p.grad is not None]
    assert with_grad and all(n.startswith("trace_gates.") for n in with_grad)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in composition.gate_parameters())
    assert sum(p.requires_grad for p in composition.model.parameters()) == len(gate_params)


@torch.no_grad()
def test_straight_through_keeps_the_forward_value(composition):
    randomise_gates(composition)
    x = ids()
    composition.model.eval()
    ref = composition.model(x).logits
    with torch.enable_grad():
        train_out = composition.model(x).logits
    torch.testing.assert_close(train_out, ref, rtol=0, atol=1e-6)


@torch.no_grad()
@pytest.mark.parametrize("per_token_max", [0, 64])
def test_generate_with_kv_cache_equals_stepwise_forward(composition, monkeypatch, per_token_max):
    monkeypatch.setattr(compose_model, "PER_TOKEN_MAX", per_token_max)  # grouped and per-token decode paths
    randomise_gates(composition, seed=3)
    model = composition.model.eval()
    tok = composition.tokenizer
    prompts = [[5, 9, 33, 71, 80, 12], [44, 45, 46]]
    width = max(map(len, prompts))
    input_ids = torch.full((2, width), tok.pad_token_id)
    attention = torch.zeros((2, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p)
        attention[i, width - len(p) :] = 1
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        max_new_tokens=12,
        do_sample=False,
        use_cache=True,
        eos_token_id=None,
        pad_token_id=tok.pad_token_id,
        min_new_tokens=12,
    )
    used = set()
    for i, p in enumerate(prompts):
        seq = list(p)
        for _ in range(12):  # full forward of the whole sequence, no cache, one row
            with composition.recording() as logs:
                logits = model(torch.tensor([seq])).logits
            used |= set(logs[0][0].argmax(-1).tolist())
            seq.append(int(logits[0, -1].argmax()))
        assert out[i, width:].tolist() == seq[len(p) :]
    assert len(used) > 1, "routing should mix slots for this test to mean something"


def test_force_out_of_range_is_a_clear_error(composition):
    with pytest.raises(CompositionError, match="slot 7 out of range"), composition.forced(7):
        pass


@torch.no_grad()
def test_dense_mode_mixes_every_adapter(composition):
    randomise_gates(composition)
    with composition.dense():
        dense = composition.model(ids()).logits
    assert torch.isfinite(dense).all()
    assert not torch.equal(dense, composition.model(ids()).logits)


@pytest.mark.parametrize("slot", [0, 1, 3])
def test_merged_slot_equals_forced_slot_and_restores_the_weights(composition, slot):
    """``merged(k)`` folds adapter k into the weights and routes every token to the base: the logits of
    ``forced(k)`` within float tolerance, the plain base's path, and the original weights bit for bit after."""
    randomise_gates(composition, seed=4)
    x = torch.randint(5, 300, (2, 11))
    before = {k: v.clone() for k, v in composition.model.state_dict().items()}
    with torch.no_grad():
        with composition.forced(slot):
            want = composition.model(x).logits
        with composition.merged(slot):
            got = composition.model(x).logits
            assert all(g.plan is None or not g.plan.groups for g in composition.gates)  # no adapter computed
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    if slot:
        assert not torch.equal(got, composition.model(x).logits)  # the adapter mattered
    after = composition.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(CompositionError, match="out of range"), composition.merged(9):
        pass
