"""An interrupted SFT fit resumes from its last checkpoint to the weights the uninterrupted fit ends with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trace_train import sft
from trace_train.config import SFTArgs
from trace_train.grpo.checkpoint import CheckpointError

ENV = "traintest/lookup-v0"  # tests/train/toy_envs.py: one lookup call, then the answer


def fit_args(out: Path, tiny_model_dir: Path, **overrides) -> SFTArgs:
    settings = dict(episodes=6, epochs=2, batch_size=2, lr=1e-2, lora_rank=4, max_turns=4, save_every=1)
    return SFTArgs(env_id=ENV, model=str(tiny_model_dir), out=str(out), **{**settings, **overrides})


def interrupt_at_step(monkeypatch, step: int) -> None:
    """Raise KeyboardInterrupt in the backward pass of ``step`` (1-based), as a killed run stops mid-step."""
    calls = {"n": 0}
    real = sft.backward_batch

    def backward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == step:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sft, "backward_batch", backward)


def adapter_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


def logged_losses(out: Path) -> list[tuple[int, float]]:
    lines = (out / "sft_metrics.jsonl").read_text().splitlines()
    return [(row["step"], row["loss"]) for row in map(json.loads, lines)]


def test_an_interrupted_fit_resumes_to_the_uninterrupted_weights(tiny_model_dir, tmp_path, monkeypatch):
    whole = sft.run_sft(fit_args(tmp_path / "whole", tiny_model_dir))
    assert whole["steps"] == 6 and whole["resumed_from_step"] == 0
    assert not (tmp_path / "whole" / "checkpoints").exists()  # a finished fit keeps its adapter only

    out = tmp_path / "interrupted"
    with monkeypatch.context() as patch:
        interrupt_at_step(patch, 4)
        with pytest.raises(KeyboardInterrupt):
            sft.run_sft(fit_args(out, tiny_model_dir))
    # one checkpoint, the newest: steps 1-3 are done
    assert [p.name for p in (out / "checkpoints").glob("step-*")] == ["step-0000003"]
    with open(out / "sft_metrics.jsonl", "a") as log:  # a kill may cut the last line it wrote
        log.write('{"step": 4, "epo')
    resumed = sft.run_sft(fit_args(out, tiny_model_dir, resume=True))

    assert resumed["resumed_from_step"] == 3 and resumed["steps"] == 6
    assert resumed["first_loss"] == whole["first_loss"] and resumed["final_loss"] == whole["final_loss"]
    assert logged_losses(out) == logged_losses(tmp_path / "whole")
    expected, got = adapter_weights(tmp_path / "whole"), adapter_weights(out)
    assert expected.keys() == got.keys()
    moved = [k for k in expected if not torch.equal(expected[k], got[k])]
    assert not moved, f"resumed weights differ from the uninterrupted fit's: {moved[:3]}"


def test_without_resume_an_interrupted_fit_is_refused_not_overwritten(tiny_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "fit"
    with monkeypatch.context() as patch:
        interrupt_at_step(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            sft.run_sft(fit_args(out, tiny_model_dir))
    with pytest.raises(CheckpointError, match="pass --resume to continue it"):
        sft.run_sft(fit_args(out, tiny_model_dir))
    assert [p.name for p in (out / "checkpoints").glob("step-*")] == ["step-0000002"]
    assert [step for step, _ in logged_losses(out)] == [1, 2]
    again = sft.run_sft(fit_args(out, tiny_model_dir, resume=True))
    assert again["resumed_from_step"] == 2 and [s for s, _ in logged_losses(out)] == [1, 2, 3, 4, 5, 6]


def test_resume_refuses_a_checkpoint_of_other_settings_or_a_corrupt_one(
    tiny_model_dir, tmp_path, monkeypatch
):
    out = tmp_path / "fit"
    with monkeypatch.context() as patch:
        interrupt_at_step(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            sft.run_sft(fit_args(out, tiny_model_dir))
    with pytest.raises(CheckpointError, match=r"does not match this run \(lr: checkpoint=0.01 now=0.02\)"):
        sft.run_sft(fit_args(out, tiny_model_dir, lr=2e-2, resume=True))
    # where it is written and how often it is saved may change
    assert sft.resume_config(
        fit_args(tmp_path / "elsewhere", tiny_model_dir, save_every=5)
    ) == sft.resume_config(fit_args(out, tiny_model_dir))
    trainer_state = next((out / "checkpoints").glob("step-*")) / "trainer.pt"
    trainer_state.write_bytes(trainer_state.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="corrupt checkpoint"):
        sft.run_sft(fit_args(out, tiny_model_dir, resume=True))


def test_the_batch_plan_is_the_same_for_every_run_of_a_seed():
    plan = sft.batch_plan(5, 2, 2, seed=3)
    assert plan == sft.batch_plan(5, 2, 2, seed=3) and plan != sft.batch_plan(5, 2, 2, seed=4)
    assert [epoch for epoch, _ in plan] == [0, 0, 0, 1, 1, 1]
    for epoch in (0, 1):  # each epoch sees every episode once
        assert sorted(i for e, batch in plan if e == epoch for i in batch) == [0, 1, 2, 3, 4]


def test_resume_of_a_finished_fit_returns_it_and_refuses_other_settings(
    tiny_model_dir, tmp_path, monkeypatch
):
    out = tmp_path / "fit"
    whole = sft.run_sft(fit_args(out, tiny_model_dir, merge=True))

    def no_fit(*args, **kwargs):
        raise AssertionError("a finished fit was fitted again")

    monkeypatch.setattr(sft, "oracle_trajectories", no_fit)
    assert sft.run_sft(fit_args(out, tiny_model_dir, merge=True, resume=True)) == whole
    with pytest.raises(CheckpointError, match=r"finished fit of other settings \(lr: fit=0.01 now=0.02\)"):
        sft.run_sft(fit_args(out, tiny_model_dir, lr=2e-2, resume=True))
