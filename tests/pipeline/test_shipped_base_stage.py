"""The base stage loads the shipped base whose recipe is exactly the run's warm start (and says so), fits
anything else, and refuses a shipped adapter whose hash differs from its recipe."""

from __future__ import annotations

import io
import json

import pytest

from tests.train import toy_envs
from trace_train import bases, sft
from trace_train.bases.commands import install_fit
from trace_train.config import SFTArgs
from trace_train.pipeline.config import config_from_dict
from trace_train.pipeline.progress import Reporter
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages import base

toy_envs.register()
ENV = "traintest/lookup-v0"
FIT = {
    "episodes": 4,
    "epochs": 1,
    "batch_size": 2,
    "lr": 1e-2,
    "max_turns": 4,
    "difficulty": None,
    "seed_offset": 500_000,
}


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from trace_train.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def shipped_root(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    fit = root.parent / "fit"
    sft.run_sft(SFTArgs(env_id=ENV, model=str(tiny_model_dir), out=str(fit), lora_rank=4, **FIT))
    install_fit("toy-tiny", fit, root=root, dtype="float32")
    return root


def stage(tmp_path, model: str, **warm) -> tuple[StageContext, io.StringIO]:
    log = io.StringIO()
    config = config_from_dict(
        {
            "out": str(tmp_path),
            "target": {"env_id": ENV},
            "base": {"model": model, "lora_rank": 4, "warm_start": {"enabled": True, **FIT, **warm}},
        }
    )
    (tmp_path / "01-base").mkdir(parents=True, exist_ok=True)
    ctx = StageContext("base", tmp_path / "01-base", config, {}, {}, True, Reporter(log, tty=False), tmp_path)
    return ctx, log


def test_the_exact_warm_start_loads_the_shipped_base(shipped_root, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(bases, "BASES_DIR", shipped_root)
    fits = []
    monkeypatch.setattr(sft, "run_sft", lambda args, **kw: fits.append(args) or pytest.fail("fitted"))
    ctx, log = stage(tmp_path, str(tiny_model_dir))
    result = base.run(ctx)
    assert result["shipped"]["name"] == "toy-tiny" and not fits
    assert "using the shipped base toy-tiny" in log.getvalue()
    assert (tmp_path / "01-base" / "sft-0" / "merged" / "config.json").is_file()
    assert result["trained_on"][0]["task_indices"] == [500_000, 500_003]


def test_another_run_seed_keeps_the_shipped_base_and_another_fit_seed_does_not(
    shipped_root, tiny_model_dir, tmp_path, monkeypatch
):
    """A second seed of every stage after the base (``seed = 1``) starts from the same shipped base; a warm
    start with its own other seed (``base.warm_start.seed``) is another fit."""
    monkeypatch.setattr(bases, "BASES_DIR", shipped_root)
    ctx, _ = stage(tmp_path / "run-seed", str(tiny_model_dir))
    ctx.config.seed = 1
    assert base.run(ctx)["shipped"]["name"] == "toy-tiny"
    fits = []
    monkeypatch.setattr(sft, "run_sft", lambda args, **kw: fits.append(args) or pytest.fail("fitted"))
    ctx, _ = stage(tmp_path / "fit-seed", str(tiny_model_dir), seed=1)
    with pytest.raises(pytest.fail.Exception, match="fitted"):
        base.run(ctx)
    assert fits[0].seed == 1


def test_another_warm_start_is_fitted_and_a_changed_file_refused(
    shipped_root, tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(bases, "BASES_DIR", shipped_root)
    ctx, _ = stage(tmp_path / "a", str(tiny_model_dir), lr=2e-2)  # not the shipped recipe: fitted here
    result = base.run(ctx)
    assert "shipped" not in result
    assert json.loads((tmp_path / "a" / "01-base" / "sft-0" / "sft_summary.json").read_text())["steps"] == 2
    ctx, _ = stage(tmp_path / "b", str(tiny_model_dir), shipped=False)  # asked to fit
    assert "shipped" not in base.run(ctx)

    weights = shipped_root / "toy-tiny" / "adapter_model.safetensors"
    original = weights.read_bytes()
    try:
        weights.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        ctx, _ = stage(tmp_path / "c", str(tiny_model_dir))
        with pytest.raises(bases.ShippedBaseError, match="has sha256"):
            base.run(ctx)
    finally:
        weights.write_bytes(original)
