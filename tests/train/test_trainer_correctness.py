"""The GRPO trainer end to end on the tiny model: log-probs at the sampling temperature (defect 3), the
sampler/trainer mismatch measured and corrected (defect 4), honest metrics (defect 7), reproducible runs
(defect 8)."""

from __future__ import annotations

import json

import pytest
import torch

import trace_train.grpo.trainer as trainer_module
from trace_train.config import GRPOArgs
from trace_train.grpo.trainer import GRPOTrainer


def _no_zero_rows(self, adv):
    return torch.zeros_like(adv, dtype=torch.bool)


def _optimise_seeing_gradients(trainer, trajs) -> tuple[list[dict[str, torch.Tensor]], dict]:
    """``trainer.optimise(trajs)``, with each update's gradients as clipping sees them, and its metrics."""
    seen: list[dict[str, torch.Tensor]] = []
    real_clip = trainer._clip_and_check

    def spy():
        seen.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
        return real_clip()

    trainer._clip_and_check = spy
    try:
        metrics = trainer.optimise(trajs)
    finally:
        trainer._clip_and_check = real_clip
    return seen, metrics


@pytest.fixture(autouse=True)
def full_passes(monkeypatch):
    """The tiny model scores every rollout of these envs alike, and a batch of equal rewards skips the
    forward/backward passes (its gradient is exactly 0): these tests are about those passes, so they run them."""
    monkeypatch.setattr(GRPOTrainer, "_zero_gradient_rows", _no_zero_rows)


def _args(tmp_path, model, **kw) -> GRPOArgs:
    base = dict(
        env_id="traintest/echo-v0",
        model=str(model),
        out=str(tmp_path / "grpo"),
        steps=1,
        groups_per_step=2,
        group_size=2,
        max_new_tokens=4,
        save_every=1000,  # more than the steps: one checkpoint at the end (0 is refused)
        tensorboard=False,
        progress=False,
        num_threads=1,
    )
    return GRPOArgs(**{**base, **kw})


def _metrics(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_trainer_logprobs_are_the_samplers_at_the_sampling_temperature(tiny_model_dir, tmp_path):
    """At T=0.7 the trainer scored tokens at T=1 (0.163 nats/token off on SmolLM2). In float32 the trainer's
    log-probs must now equal the sampler's: no mismatch left to correct."""
    args = _args(tmp_path, tiny_model_dir, temperature=0.7, top_p=0.9)
    GRPOTrainer(args).train()
    m = _metrics(tmp_path / "grpo")[0]
    assert m["mismatch_tokens"] > 0
    assert m["mismatch_abs_mean"] < 1e-4 and m["mismatch_abs_max"] < 1e-3
    assert m["mismatch_is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["mismatch_truncated_fraction"] == 0.0


def test_trainer_reports_and_corrects_a_sampler_mismatch(tiny_model_dir, tmp_path, monkeypatch):
    """A sampler whose log-probs are off (as bf16 merged-LoRA decoding or a vLLM server are): the trainer
    measures the gap and weights each token by min(exp(old - sampler), cap)."""
    original = trainer_module._sampler_row

    def shifted(traj, mask):
        row = original(traj, mask)
        return row - 0.2 * (torch.arange(len(row)) % 2)  # every other token 0.2 nats less likely

    monkeypatch.setattr(trainer_module, "_sampler_row", shifted)
    seen: list[torch.Tensor] = []
    real_loss = trainer_module.policy_loss

    def spy(*a, **kw):
        seen.append(a[7] if len(a) > 7 else kw.get("is_weights"))
        return real_loss(*a, **kw)

    monkeypatch.setattr(trainer_module, "policy_loss", spy)
    GRPOTrainer(_args(tmp_path, tiny_model_dir, temperature=1.0)).train()
    m = _metrics(tmp_path / "grpo")[0]
    assert m["mismatch_abs_max"] == pytest.approx(0.2, abs=1e-3)
    assert 0.05 < m["mismatch_abs_mean"] < 0.15
    assert m["mismatch_kl"] > 0 and m["kl"] == 0.0  # beta = 0: the policy KL metric stays 0 (no key clash)
    assert m["mismatch_residual_abs_mean"] < 1e-4  # e^0.2 is below the cap: fully corrected
    weights = torch.cat([w.flatten() for w in seen if w is not None])
    assert weights.max().item() == pytest.approx(float(torch.exp(torch.tensor(0.2))), abs=1e-3)
    # turned off: no weights, the whole gap stays
    seen.clear()
    GRPOTrainer(_args(tmp_path, tiny_model_dir, out=str(tmp_path / "off"), is_cap=0.0)).train()
    assert all(w is None for w in seen)
    off = _metrics(tmp_path / "off")[0]
    assert off["mismatch_residual_abs_mean"] == pytest.approx(off["mismatch_abs_mean"], rel=1e-4)


def test_metrics_average_over_the_minibatches_actually_run(tiny_model_dir, tmp_path, monkeypatch):
    """4 sequences in 3 planned minibatches are 2 minibatches of 2: the loss and grad norm are means over
    those 2, not sums divided by the planned 3. The rewards differ (parity env), so the losses are not 0 and
    the two divisors give different numbers."""
    losses: list[float] = []
    real_loss = trainer_module.policy_loss

    def spy(*a, **kw):
        loss, m = real_loss(*a, **kw)
        losses.append(loss.item())
        return loss, m

    monkeypatch.setattr(trainer_module, "policy_loss", spy)
    args = _args(
        tmp_path,
        tiny_model_dir,
        env_id="traintest/parity-v0",
        groups_per_step=1,
        group_size=4,
        temperature=1.0,
        num_minibatches=3,
        micro_batch_size=2,
        dynamic_sampling=True,  # a group of equal rewards (another CPU samples differently) is replaced
        max_refill_rounds=6,
    )
    GRPOTrainer(args).train()
    m = _metrics(tmp_path / "grpo")[0]
    assert 0 < m["reward_mean"] < 1  # rewards differ inside the group: non-zero advantages
    assert m["optimizer_updates"] == 2 and len(losses) == 2
    assert all(abs(x) > 1e-4 for x in losses), losses
    assert m["loss"] == pytest.approx(sum(losses) / 2, abs=1e-6)
    assert m["loss"] != pytest.approx(sum(losses) / 3, abs=1e-6)
    assert m["grad_norm"] > 0


def test_same_seed_same_run(tiny_model_dir, tmp_path):
    """Defect 8: two runs with one seed give the same rollouts, metrics and adapter weights, and the weights
    did move (rewards differ inside groups on the parity env; LoRA B starts at 0)."""
    runs = []
    for name in ("a", "b"):
        args = _args(
            tmp_path,
            tiny_model_dir,
            env_id="traintest/parity-v0",
            out=str(tmp_path / name),
            steps=2,
            group_size=4,
            temperature=1.0,
            lr=1e-3,
            dynamic_sampling=True,
            max_refill_rounds=6,
        )
        trainer = GRPOTrainer(args)
        trainer.train()
        state = {k: v.clone() for k, v in trainer.policy.model.state_dict().items() if "lora" in k}
        runs.append((_metrics(tmp_path / name), state))
    (m_a, w_a), (m_b, w_b) = runs
    assert all(step["grad_norm"] > 0 for step in m_a)
    moved = [k for k, v in w_a.items() if "lora_B" in k and v.abs().max() > 1e-5]
    assert moved, "the adapter never moved: the comparison below would hold for any run"
    keys = ("reward_mean", "loss", "grad_norm", "clip_fraction", "mismatch_abs_mean")
    assert [[step[k] for k in keys] for step in m_a] == [[step[k] for k in keys] for step in m_b]
    assert w_a.keys() == w_b.keys() and all(torch.equal(w_a[k], w_b[k]) for k in w_a)


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_micro_batches_sharing_one_prefix_give_the_gradients_of_one_batch(tiny_model_dir, tmp_path, beta):
    """With the cached engine a minibatch's shared prompt prefix is computed once for all its micro-batches
    (PrefixKV): the update's gradients (with the old-policy and KL-reference log-probs, also computed with the
    prefix once) equal those of one micro-batch."""
    from trace_train.rollout import RolloutStats

    args = _args(
        tmp_path,
        tiny_model_dir,
        env_id="traintest/parity-v0",  # rewards differ inside groups: a policy gradient even at beta = 0
        dynamic_sampling=True,
        max_refill_rounds=6,
        temperature=1.0,
        micro_batch_size=4,
        beta=beta,
        ppo_epochs=2,
    )
    trainer = GRPOTrainer(args)
    with torch.no_grad():  # non-zero B so that every LoRA weight gets a gradient
        for n, p in trainer.policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    trajs, _ = trainer.collect_groups(RolloutStats())
    start = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    used: list[bool] = []
    real_prefix = trainer._batch_prefix
    trainer._batch_prefix = lambda *a: used.append((p := real_prefix(*a)) is not None) or p

    def grads_with(micro: int, tokens: int = 10**6) -> list[dict[str, torch.Tensor]]:
        trainer.policy.model.load_state_dict(start)
        trainer.args.micro_batch_size, trainer.args.micro_batch_tokens = micro, tokens
        trainer.optimizer.state.clear()
        return _optimise_seeing_gradients(trainer, trajs)[0]

    whole = grads_with(4)
    assert used and not any(used)  # one micro-batch: nothing to share across
    used.clear()
    split = grads_with(1)
    assert used and all(used)
    # the first update only: later ones start from weights that Adam moved by ~lr*sign(g), which amplifies
    # float noise in near-zero gradients
    used.clear()
    by_tokens = grads_with(4, tokens=1)  # micro_batch_tokens splits too: one sequence per micro-batch
    assert used[-2:] == [True, True]  # the two training passes (the no-grad ones go by micro_batch_size)
    a, b, c = whole[0], split[0], by_tokens[0]
    assert len(whole) == len(split) == len(by_tokens) == 2 and a and a.keys() == b.keys() == c.keys()
    assert any(len({t.reward for t in trajs if t.spec.group == g}) > 1 for g in (0, 1))
    assert all(float(g.abs().max()) > 1e-6 for g in a.values())  # non-zero, else the comparison is empty
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=1e-4)
        # the same training micro-batches either way; the no-grad old/reference passes are batched by
        # micro_batch_size (4 vs 1), which moves their log-probs by float noise
        torch.testing.assert_close(c[name], b[name], atol=1e-9, rtol=1e-4)


def test_a_batch_of_equal_rewards_skips_the_passes_and_changes_what_it_would(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Every group's rewards equal (the tiny model solves nothing): the zero gradient is not computed, yet the
    adapter after two steps is exactly the one the full forward/backward passes give (AdamW's decay included)."""
    monkeypatch.undo()  # the real check (the autouse fixture forces the passes)

    def run(out, skip):
        if not skip:
            monkeypatch.setattr(GRPOTrainer, "_zero_gradient_rows", _no_zero_rows)
        args = _args(
            tmp_path,
            tiny_model_dir,
            out=str(tmp_path / out),
            steps=2,
            dynamic_sampling=False,
            weight_decay=0.1,
        )
        trainer = GRPOTrainer(args)
        trainer.train()
        monkeypatch.undo()
        return trainer, _metrics(tmp_path / out)

    skipped, m_skip = run("skip", True)
    full, m_full = run("full", False)
    assert [m["reward_std"] for m in m_skip] == [0.0, 0.0]
    assert all(m.get("zero_advantage_batch") == 1 for m in m_skip)
    assert not any("zero_advantage_batch" in m for m in m_full) and all(m["loss"] == 0.0 for m in m_full)
    a = dict(skipped.policy.model.named_parameters())
    changed = 0
    for name, p in full.policy.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, a[name]), name
            changed += int(not torch.equal(p, torch.zeros_like(p)))
    assert changed  # weight decay moved the (nonzero) LoRA A matrices on both paths alike


@pytest.mark.parametrize(("loss_type", "ppo_epochs"), [("grpo", 1), ("dapo", 1), ("dr_grpo", 2)])
def test_rows_of_an_equal_reward_group_are_skipped_with_the_same_gradient(
    tiny_model_dir, tmp_path, monkeypatch, loss_type, ppo_epochs
):
    """A step's groups mix informative ones and equal-reward ones (half of the demo's): the equal group's rows
    have advantage 0 and exactly zero gradient, so they are not passed forward/backward, yet every update's
    gradient equals the full passes' (the normaliser still counts them) and the metric says how many were
    skipped."""
    from trace_train.rollout import RolloutStats

    monkeypatch.undo()  # the real per-row check
    args = _args(
        tmp_path,
        tiny_model_dir,
        env_id="traintest/parity-v0",
        dynamic_sampling=True,
        max_refill_rounds=6,
        temperature=1.0,
        group_size=4,
        micro_batch_size=2,
        loss_type=loss_type,
        ppo_epochs=ppo_epochs,
    )
    trainer = GRPOTrainer(args)
    with torch.no_grad():
        for n, p in trainer.policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    trajs, _ = trainer.collect_groups(RolloutStats())
    groups = sorted({t.spec.group for t in trajs})
    flat = [t for t in trajs if t.spec.group == groups[-1]]
    for t in flat:  # one group's rewards made equal: its advantages are 0
        t.reward = 1.0
    assert any(len({t.reward for t in trajs if t.spec.group == g}) > 1 for g in groups[:-1])
    start = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}

    def grads(skip: bool) -> tuple[list[dict[str, torch.Tensor]], dict]:
        trainer.policy.model.load_state_dict(start)
        trainer.optimizer.state.clear()
        if not skip:
            monkeypatch.setattr(GRPOTrainer, "_zero_gradient_rows", _no_zero_rows)
        seen, metrics = _optimise_seeing_gradients(trainer, trajs)
        monkeypatch.undo()
        return seen, metrics

    skipped, m_skip = grads(True)
    full, m_full = grads(False)
    assert m_skip["zero_advantage_rows"] == len(flat) and m_full["zero_advantage_rows"] == 0
    assert len(skipped) == len(full) == ppo_epochs
    a, b = skipped[0], full[0]
    assert a.keys() == b.keys() and all(float(g.abs().max()) > 1e-6 for g in b.values())
    for name in b:
        torch.testing.assert_close(a[name], b[name], atol=1e-7, rtol=1e-4)
