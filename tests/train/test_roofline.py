"""The roofline account: its FLOP counts against torch's own counter, the engine's and trainers' records
against what they ran, and the account's arithmetic."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch.utils.flop_counter import FlopCounterMode

from tests.train.test_engine import GREEDY, _policy, _run
from trace_train.engine import engine_for
from trace_train.grpo.logprobs import pad_batch, sequence_logprobs
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.roofline import LEDGER, MachinePeak, ModelCost, PhaseWork, account, format_account


def _eager_model(**kw):
    model, tokenizer = build_tiny_model(hidden_size=64, num_layers=2, **kw)
    # eager attention: torch's FlopCounterMode counts its matmuls (the CPU sdpa kernel has no FLOP formula)
    model.config._attn_implementation = "eager"
    return model, tokenizer


def _causal_waste(cost: ModelCost, n: int) -> float:
    """Eager attention computes every (query, key) pair, the causal half included: FLOPs it spends that the
    account (which counts only the pairs a causal model needs) leaves out."""
    return 4.0 * cost.layers * cost.q_heads * cost.head_dim * (n * n - n * (n + 1) / 2)


def test_forward_flops_equal_torch_flop_counter():
    model, _ = _eager_model()
    cost = ModelCost.of(model)
    n = 23
    with FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(5, 100, (1, n)))
    # body matmuls, the tied LM head at every position, attention: exactly what torch counts
    assert cost.forward_flops(n, 0, n) + _causal_waste(cost, n) == counter.get_total_flops()
    # the head is the tied embedding: counted as the head, not twice, not as the body
    assert cost.head_params == model.get_input_embeddings().weight.numel()
    assert cost.body_params == sum(
        m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear)
    )


def test_lora_training_flops_equal_torch_flop_counter():
    """Forward and backward of a LoRA model through the trainer's log-prob path: the ledger's FLOPs are
    torch's count (input gradients everywhere, weight gradients only for the adapter's matrices)."""
    model, _ = _eager_model()
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    n = 17
    seqs = [list(range(5, 5 + n)), list(range(7, 7 + n))]  # no padding: every computed token is needed
    masks = [[0] * 6 + [1] * (n - 6) for _ in seqs]
    ids, attn, pmask = pad_batch(seqs, masks, 0)
    before = LEDGER.snapshot()
    with FlopCounterMode(display=False) as counter:
        logp, tmask = sequence_logprobs(model, ids, attn, pmask, SamplingConfig(), share_prefix=False)
        (logp * tmask).sum().backward()
    work = LEDGER.since(before)["train"]
    cost = ModelCost.of(model)
    assert work.tokens == 2 * n
    # attention's backward is twice its forward, for the needed and the wasted (causal) pairs alike
    needed = counter.get_total_flops() - 2 * 3 * _causal_waste(cost, n)
    # the account counts every layer's input gradients; autograd skips those of the first layer's projections
    # that read the (frozen) embedding, and dK there when k_proj has no adapter: at most 1/layers of the count
    assert needed <= work.flops <= needed * (1 + 1 / cost.layers)
    assert work.flops > counter.get_total_flops() / 3  # the backward is in it (a forward alone is ~1/3)


def test_no_grad_scoring_counts_one_forward():
    model, _ = _eager_model()
    seqs = [list(range(5, 25))]
    masks = [[0] * 5 + [1] * 15]
    ids, attn, pmask = pad_batch(seqs, masks, 0)
    before = LEDGER.snapshot()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        sequence_logprobs(model, ids, attn, pmask, SamplingConfig(), share_prefix=False)
    work = LEDGER.since(before)["train"]
    cost = ModelCost.of(model)
    assert work.flops + _causal_waste(cost, 20) == counter.get_total_flops()


@pytest.mark.parametrize("max_padding", [0.0, 1.0], ids=["row-by-row", "padded"])
def test_engine_records_what_it_ran(max_padding):
    """The cached engine's ledger entries are the tokens and seconds its own stats count; the needed work does
    not depend on how prefill batches its rows (padding is waste, not work), only the model calls do."""
    policy = _policy()
    engine = engine_for(policy)
    engine.max_prefill_padding = max_padding
    before = LEDGER.snapshot()
    _run(policy, "cached", list(range(7)), GREEDY)
    work, stats = LEDGER.since(before), engine.stats
    assert work["prefill"].tokens == stats.prefill_tokens > 0
    assert work["decode"].tokens == stats.decode_tokens > 0
    assert work["prefill"].seconds == pytest.approx(stats.prefill_seconds, abs=1e-6)
    assert work["decode"].seconds == pytest.approx(stats.decode_seconds, abs=1e-6)
    cost = ModelCost.of(policy.model)
    assert work["decode"].bytes >= work["decode"].calls * cost.weight_bytes  # the weights, once per step
    assert work["decode"].flops >= 2 * cost.body_params * work["decode"].tokens
    _NEEDED[max_padding] = (work["prefill"].tokens, work["prefill"].flops, work["prefill"].calls)
    if len(_NEEDED) == 2:
        (rows_t, rows_f, rows_c), (pad_t, pad_f, pad_c) = _NEEDED[0.0], _NEEDED[1.0]
        assert (rows_t, rows_f) == (pad_t, pad_f) and rows_c > pad_c


_NEEDED: dict[float, tuple[int, float, int]] = {}


def test_account_arithmetic():
    peak = MachinePeak("float32", flops_per_s=1e9, bytes_per_s=1e8, threads=2)
    work = {
        "prefill": PhaseWork(tokens=100, flops=4e9, bytes=1e8, seconds=8.0, calls=2, dtype="float32"),
        "decode": PhaseWork(tokens=10, flops=1e8, bytes=5e8, seconds=20.0, calls=10, dtype="float32"),
        "train": PhaseWork(),
    }
    acc = account(work, wall_s=40.0, peak=peak)
    assert acc["phases"]["prefill"]["bound_s"] == 4.0  # compute: 4e9 / 1e9
    assert acc["phases"]["prefill"]["limited_by"] == "compute"
    assert acc["phases"]["prefill"]["share_of_bound"] == 0.5
    assert acc["phases"]["decode"]["bound_s"] == 5.0  # memory: 5e8 / 1e8
    assert acc["phases"]["decode"]["limited_by"] == "memory"
    assert acc["phases"]["decode"]["share_of_bound"] == 0.25
    assert "train" not in acc["phases"]  # nothing ran there
    assert acc["phases"]["other"]["seconds"] == 12.0
    assert acc["bound_s"] == 9.0 and acc["share_of_bound"] == pytest.approx(9.0 / 40.0, abs=1e-4)
    assert "decode" in format_account(acc)


def test_the_peak_is_measured_per_thread_count():
    """A peak measured with one thread must not stand for two (the decode benchmark switches between them)."""
    from trace_train.roofline import machine_peak

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = machine_peak("float32", repeats=1)
        torch.set_num_threads(2)
        two = machine_peak("float32", repeats=1)
    finally:
        torch.set_num_threads(threads)
    assert (one.threads, two.threads) == (1, 2)
