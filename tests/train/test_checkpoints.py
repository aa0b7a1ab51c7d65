"""Resume exactness, atomic checkpoints and clear errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from trace_train.grpo.checkpoint import CheckpointError
from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer


def _args(model_dir, out, **kw):
    base = dict(
        env_id="traintest/echo-v0",
        model=str(model_dir),
        out=str(out),
        steps=4,
        groups_per_step=2,
        group_size=4,
        max_new_tokens=6,
        lora_rank=4,
        lr=5e-2,
        save_every=2,
        ppo_epochs=2,
        num_minibatches=2,
        micro_batch_size=3,
        loss_type="dapo",
        beta=0.05,
        dynamic_sampling=True,
        tensorboard=False,
        progress=False,
    )
    base.update(kw)
    return GRPOArgs(**base)


def _weights(out):
    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


def test_resume_is_exact(tiny_model_dir, tmp_path):
    """On the parity env (rewards differ inside groups: a policy gradient, not only the KL term's)."""
    parity = {"env_id": "traintest/parity-v0", "temperature": 1.0}
    full = GRPOTrainer(_args(tiny_model_dir, tmp_path / "full", **parity)).train()
    GRPOTrainer(_args(tiny_model_dir, tmp_path / "half", steps=2, **parity)).train()
    resumed = GRPOTrainer(
        _args(tiny_model_dir, tmp_path / "half", resume=str(tmp_path / "half"), **parity)
    ).train()
    assert full["step"] == resumed["step"] == 4
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "half")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # the adapter actually moved away from its initialisation (lora_B starts at zero)
    assert any(v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k)
    lines = (tmp_path / "half" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4]
    assert all(json.loads(x)["reward_std"] > 0 for x in lines)  # non-zero advantages every step
    ckpts = tmp_path / "half" / "checkpoints"
    assert (ckpts / "latest").read_text() == "step-0000004"
    assert not list(ckpts.glob(".staging*"))


def test_mismatched_and_corrupt_checkpoints(tiny_model_dir, tmp_path):
    GRPOTrainer(_args(tiny_model_dir, tmp_path / "run", steps=2, ppo_epochs=1, num_minibatches=1)).train()
    with pytest.raises(CheckpointError, match="group_size"):
        GRPOTrainer(_args(tiny_model_dir, tmp_path / "x", group_size=2, resume=str(tmp_path / "run")))
    ckpt = tmp_path / "run" / "checkpoints" / "step-0000002"
    (ckpt / "trainer.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        GRPOTrainer(_args(tiny_model_dir, tmp_path / "y", resume=str(tmp_path / "run")))
    (ckpt / "COMPLETE").unlink()
    with pytest.raises(CheckpointError, match="COMPLETE"):
        GRPOTrainer(_args(tiny_model_dir, tmp_path / "z", resume=str(ckpt)))


def test_non_finite_loss_is_caught(tiny_model_dir, tmp_path, monkeypatch):
    from trace_train.grpo import trainer as trainer_mod

    t = GRPOTrainer(
        _args(tiny_model_dir, tmp_path / "nan", steps=1, ppo_epochs=1, num_minibatches=1, beta=0.0)
    )
    real = trainer_mod.policy_loss

    def bad(*a, **k):
        loss, m = real(*a, **k)
        return loss * float("nan"), m

    monkeypatch.setattr(trainer_mod, "policy_loss", bad)
    with pytest.raises(trainer_mod.NonFiniteError):
        t.train()


def test_non_finite_gradients_skip_the_update(tiny_model_dir, tmp_path, monkeypatch):
    t = GRPOTrainer(_args(tiny_model_dir, tmp_path / "nangrad", steps=1, ppo_epochs=1, num_minibatches=1))
    before = {k: v.clone() for k, v in t.policy.model.named_parameters() if v.requires_grad}
    monkeypatch.setattr(t, "_clip_and_check", lambda: None)
    result = t.train()
    assert result["skipped_updates"] == 1
    for k, v in t.policy.model.named_parameters():
        if v.requires_grad:
            assert torch.equal(v, before[k])


def test_a_resume_path_that_does_not_exist_says_so(tmp_path):
    from trace_train.grpo.checkpoint import find_checkpoint

    with pytest.raises(CheckpointError, match="no such directory"):
        find_checkpoint(tmp_path / "no" / "run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="not a complete trace checkpoint"):
        find_checkpoint(tmp_path / "empty")
