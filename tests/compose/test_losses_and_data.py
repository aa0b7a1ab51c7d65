"""Gate losses on hand-computed cases, and how rollout tokens become gate labels."""

from __future__ import annotations

import math

import torch

from tests.compose.helpers import randomise_gates
from trace_train.compose.data import GateExample, label_trajectory
from trace_train.compose.losses import IGNORE, balance_loss, label_loss, lm_loss_from_hidden
from trace_train.rollout import ResetSpec, Trajectory


def test_balance_loss_hand_computed():
    # 4 tokens, 3 slots, one layer. Top-1: slot 0, 0, 1, 2 -> f = (1/2, 1/4, 1/4).
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.25, 0.25], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]]))
    # P = mean probabilities = (0.35, 0.3625, 0.2875); loss = 3 * (0.5*0.35 + 0.25*0.3625 + 0.25*0.2875)
    expected = 3 * (0.5 * 0.35 + 0.25 * 0.3625 + 0.25 * 0.2875)
    got = balance_loss([logits], torch.ones(4))
    assert math.isclose(float(got), expected, rel_tol=1e-6)
    # padding is left out: masking the last token gives f = (2/3, 1/3, 0), P over the first three tokens
    p = logits[:3].softmax(-1).mean(0)
    masked = balance_loss([logits], torch.tensor([1, 1, 1, 0]))
    assert math.isclose(float(masked), 3 * (2 / 3 * float(p[0]) + 1 / 3 * float(p[1])), rel_tol=1e-6)
    # uniform routing with uniform probabilities is the minimum, 1
    assert math.isclose(
        float(balance_loss([torch.zeros(3, 3).fill_diagonal_(1e-6)], torch.ones(3))), 1.0, rel_tol=1e-4
    )


def test_balance_loss_gradient_flows_through_probabilities_only():
    logits = torch.randn(6, 4, requires_grad=True)
    balance_loss([logits, logits * 2], torch.ones(6)).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_label_loss_ignores_unlabelled_positions_and_averages_layers():
    a = torch.tensor([[2.0, 0.0], [0.0, 2.0], [5.0, -5.0]])
    b = torch.zeros(3, 2)
    labels = torch.tensor([0, 1, IGNORE])
    ce_a = -math.log(math.exp(2) / (math.exp(2) + 1))
    ce_b = math.log(2)
    assert math.isclose(float(label_loss([a, b], labels)), (ce_a + ce_b) / 2, rel_tol=1e-6)
    assert float(label_loss([a], torch.full((3,), IGNORE))) == 0.0


def test_lm_loss_predicts_only_masked_tokens():
    logits = torch.zeros(1, 4, 5)
    logits[0, 1, 3] = 10.0  # position 1 predicts token 2 = 3 confidently
    ids = torch.tensor([[1, 2, 3, 4]])
    head = torch.nn.Identity()  # the "hidden states" are the logits
    loss = lm_loss_from_hidden(logits, head, ids, torch.tensor([[0, 0, 1, 0]]))
    expected = -math.log(math.exp(10) / (math.exp(10) + 4))
    assert math.isclose(float(loss), expected, rel_tol=1e-3)


def test_labels_sit_on_the_position_that_produced_each_generated_token():
    traj = Trajectory(
        spec=ResetSpec(seed=0), token_ids=[10, 11, 12, 13, 14, 15, 16], policy_mask=[0, 0, 1, 1, 0, 1, 0]
    )
    traj.reward = 1.0
    ex = label_trajectory(traj, slot=2, env_id="x", lm=True)
    # tokens 2, 3, 5 were generated: produced at positions 1, 2, 4
    assert ex.gate_labels == [IGNORE, 2, 2, IGNORE, 2, IGNORE, IGNORE]
    assert ex.lm_mask == [0, 0, 1, 1, 0, 1, 0]
    assert label_trajectory(traj, slot=0, env_id="x", lm=False).lm_mask == [0] * 7


def test_an_adapter_without_successes_is_labelled_on_oracle_episodes(composition):
    """No rollout reaches min_reward: with ``oracle_episodes`` each slot is labelled on its env's oracle
    conversations instead (train tasks from the oracle offset), and the report names them."""
    from tests.compose.helpers import lookup_gate_args
    from trace_train.compose.data import collect_gate_data

    args = lookup_gate_args(oracle_episodes=2, difficulties=["none"] * 3)
    envs = args.envs
    examples, report = collect_gate_data(composition, composition.tokenizer, envs, args)
    assert sorted({e.slot for e in examples}) == [1, 2, 3]
    assert all(e.reward >= 1.0 and any(e.lm_mask) for e in examples)  # oracle episodes: solved, imitated
    assert {k: v["kept"] for k, v in report.per_slot.items() if k.endswith("(oracle)")} == {
        "cap0 (oracle)": 2,
        "cap1 (oracle)": 2,
        "cap2 (oracle)": 2,
    }
    args.oracle_episodes = 0
    import pytest

    with pytest.raises(RuntimeError, match="no adapter produced a successful episode"):
        collect_gate_data(composition, composition.tokenizer, envs, args)


def test_base_target_episodes_label_the_bases_own_target_contexts_slot_0(composition, monkeypatch):
    """Issue 30's do no harm: with ``base_target_episodes`` the base is also rolled out on the target's train
    tasks from ``base_target_seed_offset`` and every generated token there is labelled slot 0."""
    import pytest

    from trace_train.compose import data
    from trace_train.compose.config import ComposeArgs

    calls = []
    real = data._rollouts

    def spy(policy, env_id, episodes, first_index, *rest):
        calls.append((policy.slot, env_id, episodes, first_index))
        return real(policy, env_id, episodes, first_index, *rest)

    monkeypatch.setattr(data, "_rollouts", spy)
    envs = ["traintest/lookup-v0"] * 3
    common = dict(adapters=["a"] * 3, envs=envs, episodes_per_env=1, base_episodes_per_env=0, min_reward=0.0)
    common.update(max_new_tokens=4, max_turns=2, rollout_batch_size=2, difficulties=["none"] * 3)
    args = ComposeArgs(
        **common, base_target_episodes=2, base_target_seed_offset=7, target="traintest/echo-v0"
    )
    examples, report = data.collect_gate_data(composition, composition.tokenizer, envs, args)
    target = [e for e in examples if e.env_id == "traintest/echo-v0"]
    assert len(target) == 2 and {e.slot for e in target} == {0}
    assert all(label in (0, IGNORE) for e in target for label in e.gate_labels)
    assert calls[-1] == (0, "traintest/echo-v0", 2, 7)
    assert report.per_slot["base@traintest/echo-v0 (target)"]["episodes"] == 2
    with pytest.raises(ValueError, match="needs --target"):
        ComposeArgs(**common, base_target_episodes=2)


def test_micro_batches_give_the_whole_batch_gradient(composition):
    """Gate training split into micro-batches (each right-padded alone, gradients accumulated) gives the
    whole batch's label and LM losses and gate gradients; the LM head runs only on target positions."""
    from trace_train.compose.config import ComposeArgs
    from trace_train.compose.data import GateExample
    from trace_train.compose.train import gate_step, micro_batches

    randomise_gates(composition, seed=2)
    gen = torch.Generator().manual_seed(0)
    examples = []
    for i, n in enumerate([9, 14, 6, 11]):
        ids = torch.randint(5, 300, (n,), generator=gen).tolist()
        labels = [IGNORE if j < n // 2 else (i % 4) for j in range(n)]
        lm = [0] * (n // 2) + [1] * (n - n // 2)
        examples.append(GateExample(ids, labels, lm, slot=i % 4, env_id="x", reward=1.0))
    assert [len(g) for g in micro_batches(examples, 28)] == [2, 2]
    assert [len(g) for g in micro_batches(examples, 0)] == [4]
    pad = composition.tokenizer.pad_token_id
    results, grads = [], []
    for tokens in (0, 20):  # whole batch; then micro-batches of at most 20 padded positions
        args = ComposeArgs(adapters=[], envs=[], balance_weight=0.0, micro_batch_tokens=tokens)
        for p in composition.gate_parameters():
            p.grad = None
        results.append(gate_step(composition, examples, args, pad))
        grads.append([p.grad.clone() for p in composition.gate_parameters()])
    whole, split = results
    assert whole["micro_batches"] == 1 and split["micro_batches"] == 4
    # each forward and backward is in the roofline's ledger (TRACE's training compute counts the gate steps):
    # the same tokens however the batch is split, once per step
    from trace_train.roofline import LEDGER

    before = LEDGER.snapshot()
    gate_step(composition, examples, args, pad)
    work = LEDGER.since(before)["train"]
    assert work.tokens == sum(len(e.input_ids) for e in examples) and work.calls == 4 and work.flops > 0
    for key in ("label_loss", "lm_loss", "loss", "label_accuracy"):
        assert math.isclose(whole[key], split[key], rel_tol=1e-5), key
    assert grads[0] and all(float(g.abs().max()) > 1e-6 for g in grads[0])  # non-zero gate gradients
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def _example(slot: int, n: int = 40, labelled=range(6, 30)) -> GateExample:
    gen = torch.Generator().manual_seed(slot)
    ids = torch.randint(5, 200, (n,), generator=gen).tolist()
    labels = [slot if j in labelled else IGNORE for j in range(n)]
    mask = [1 if j - 1 in labelled else 0 for j in range(n)]
    return GateExample(ids, labels, mask, slot, "traintest/lookup-v0", 1.0)


def test_advantage_labels_keep_only_tokens_the_adapter_predicts_better(composition):
    """Each kept label is a token the adapter gives more log-probability than the base by the margin, computed
    here by separate forward passes on the token's own prefix (an off-by-one position or a swapped sign fails);
    every other labelled token becomes a base label, unlabelled positions and the LM mask stay."""
    from trace_train.compose.data import advantage_labels

    example = _example(slot=2)
    margin = 0.05
    relabelled, kept = advantage_labels(composition, example, margin)
    expected = []
    for j, label in enumerate(example.gate_labels):
        if label == IGNORE:
            expected.append(IGNORE)
            continue
        prefix = torch.tensor([example.input_ids[: j + 1]])
        logp = {}
        for slot in (0, 2):
            with torch.no_grad(), composition.forced(slot):
                logp[slot] = composition.model(prefix).logits[0, -1].float().log_softmax(-1)
        token = example.input_ids[j + 1]
        expected.append(2 if float(logp[2][token] - logp[0][token]) > margin else 0)
    assert relabelled.gate_labels == expected
    assert 0 < kept < 24 and kept == expected.count(2), (
        "a random adapter should win some tokens and lose some"
    )
    assert relabelled.lm_mask == example.lm_mask and relabelled.input_ids == example.input_ids
    assert example.gate_labels.count(2) == 24  # the input is not changed in place


def test_an_adapter_that_adds_nothing_keeps_no_label(compose_base, tmp_path):
    """An adapter equal to the base (PEFT's zero-initialised B) predicts no token better: with advantage labels
    its slot is labelled nowhere, as an oracle episode it cannot write should not label it."""
    from peft import LoraConfig, get_peft_model

    from tests.compose.helpers import TARGETS
    from trace_train.compose.artefact import AdapterSpec, build_composition
    from trace_train.compose.data import advantage_labels
    from trace_train.models import load_model

    model, _ = load_model(compose_base)
    get_peft_model(model, LoraConfig(r=4, target_modules=TARGETS)).save_pretrained(tmp_path / "zero")
    base, _ = load_model(compose_base)
    comp = build_composition(base, [AdapterSpec("zero", str(tmp_path / "zero"))])
    relabelled, kept = advantage_labels(comp, _example(slot=1), margin=0.0)
    assert kept == 0 and set(relabelled.gate_labels) == {IGNORE, 0}
    base_example = _example(slot=0)
    assert advantage_labels(comp, base_example, 0.0) == (base_example, 0)


def test_advantage_labels_in_the_collection_report(composition):
    from tests.compose.helpers import lookup_gate_args
    from trace_train.compose.data import collect_gate_data

    args = lookup_gate_args(oracle_episodes=2, labels="advantage", advantage_margin=0.0)
    examples, report = collect_gate_data(composition, composition.tokenizer, args.envs, args)
    for k, name in enumerate(["cap0 (oracle)", "cap1 (oracle)", "cap2 (oracle)"], start=1):
        own = [e for e in examples if e.slot == k]
        labels = [x for e in own for x in e.gate_labels if x != IGNORE]
        assert report.per_slot[name]["advantage_share"] == labels.count(k) / len(labels)
    import pytest

    with pytest.raises(ValueError, match="--labels must be one of slot, advantage"):
        lookup_gate_args(labels="oracle")
