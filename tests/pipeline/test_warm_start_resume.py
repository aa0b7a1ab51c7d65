"""The base stage's warm start survives an interruption: a resumed stage continues the SFT fit from its last
checkpoint (a warm start takes 40 min to 3 h on two CPU cores) and keeps the fits it finished."""

from __future__ import annotations

import io
import json

import pytest

from tests.train import toy_envs
from trace_train import sft
from trace_train.pipeline.config import config_from_dict
from trace_train.pipeline.progress import Reporter
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages import base
from trace_train.pipeline.stages.common import TINY_MODEL

toy_envs.register()
WARM_START = {
    "enabled": True,
    "episodes": 4,
    "epochs": 2,
    "batch_size": 2,
    "max_turns": 4,
    "difficulty": None,
}


def base_stage(tmp_path) -> StageContext:
    config = config_from_dict(
        {
            "out": str(tmp_path),
            "target": {"env_id": "traintest/lookup-v0"},
            "base": {"model": TINY_MODEL, "lora_rank": 4, "warm_start": WARM_START},
        }
    )
    (tmp_path / "01-base").mkdir(exist_ok=True)
    return StageContext(
        name="base",
        dir=tmp_path / "01-base",
        config=config,
        upstream={},
        upstream_dirs={},
        resume=True,
        reporter=Reporter(io.StringIO(), tty=False),
        run_dir=tmp_path,
    )


def test_an_interrupted_warm_start_continues_from_its_checkpoint(tmp_path, monkeypatch):
    real, calls = sft.backward_batch, {"n": 0}

    def killed_in_step_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(sft, "backward_batch", killed_in_step_3)
        with pytest.raises(KeyboardInterrupt):
            base.run(base_stage(tmp_path))
    result = base.run(base_stage(tmp_path))
    summary = json.loads((tmp_path / "01-base" / "sft-0" / "sft_summary.json").read_text())
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 4
    assert result["model"] == summary["merged"]

    def never(*args, **kwargs):
        raise AssertionError("a finished fit is fitted again")

    monkeypatch.setattr(base, "run_sft", never, raising=False)
    monkeypatch.setattr(sft, "run_sft", never)
    assert base.run(base_stage(tmp_path))["model"] == result["model"]
