"""Test-seed isolation: every stage except evaluation refuses test-split data before doing any work."""

from __future__ import annotations

import io
import json

import pytest

from trace_gym.seeds import TEST_SEED_BASE, TestSeedError
from trace_train.pipeline.config import config_from_dict
from trace_train.pipeline.progress import Reporter
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages import adapters, analysis, base, calibration, gates, rollouts, synthesis

ENV = (
    "pipelinetest/nosplit-v0"  # no split support: seeds are the only separation (tests/pipeline/conftest.py)
)


def context(tmp_path, data, upstream=None, dirs=None) -> StageContext:
    config = config_from_dict({"out": str(tmp_path), "target": {"env_id": ENV}, **data})
    (tmp_path / "stage").mkdir(exist_ok=True)
    return StageContext(
        name="under-test",
        dir=tmp_path / "stage",
        config=config,
        upstream=upstream or {},
        upstream_dirs=dirs or {},
        resume=False,
        reporter=Reporter(io.StringIO(), tty=False),
        run_dir=tmp_path,
    )


MODEL = {"base": {"model": "no-such-model-is-ever-loaded"}}


def test_warm_start_refuses_test_seeds(tmp_path):
    ctx = context(
        tmp_path, {"base": {"model": "x", "warm_start": {"enabled": True, "seed_offset": TEST_SEED_BASE}}}
    )
    with pytest.raises(TestSeedError, match="stage base"):
        base.run(ctx)


def test_rollouts_refuse_test_seeds(tmp_path):
    ctx = context(tmp_path, {"rollouts": {"seed_offset": TEST_SEED_BASE - 2, "episodes": 4}}, MODEL)
    with pytest.raises(TestSeedError, match="stage rollouts"):
        rollouts.run(ctx)


def test_analysis_refuses_test_trajectories(tmp_path):
    rdir = tmp_path / "rollouts"
    rdir.mkdir()
    line = {"seed": 3, "split": "test", "reward": 0.0, "success": False, "env_id": ENV, "messages": []}
    (rdir / "trajectories.jsonl").write_text(json.dumps(line) + "\n")
    ctx = context(tmp_path, {}, {"rollouts": {"file": "trajectories.jsonl"}}, {"rollouts": rdir})
    with pytest.raises(
        TestSeedError, match="stage analysis:1: a trajectory of seed 3 comes from the 'test' split"
    ):
        analysis.run(ctx)


def test_synthesis_refuses_test_examples(tmp_path):
    adir = tmp_path / "analysis"
    adir.mkdir()
    cap = {"name": "error-recovery", "examples": [{"seed": 5, "split": "test"}]}
    (adir / "capabilities_to_train.json").write_text(json.dumps([cap]))
    (adir / "selected_capabilities.json").write_text(json.dumps({"capabilities": [cap], "selected": []}))
    ctx = context(tmp_path, {}, {"analysis": {"selection": "selected_capabilities.json"}}, {"analysis": adir})
    with pytest.raises(TestSeedError, match="stage synthesis"):
        synthesis.run(ctx)


ENVS = {"envs": [{"capability": "error-recovery", "env_id": ENV, "difficulty": None}]}


def test_calibration_refuses_test_seeds(tmp_path):
    ctx = context(tmp_path, {"calibration": {"seeds": TEST_SEED_BASE + 1}}, {**MODEL, "synthesis": ENVS})
    with pytest.raises(TestSeedError, match="stage calibration"):
        calibration.run(ctx)


def test_adapter_training_refuses_test_seeds(tmp_path):
    data = {"adapters": {"steps": TEST_SEED_BASE // 4 + 1, "groups_per_step": 4}}
    with pytest.raises(TestSeedError, match="stage adapters"):
        adapters.run(context(tmp_path, data, {**MODEL, "calibration": ENVS}))


def test_adapter_oracle_fit_refuses_test_seeds(tmp_path):
    """The SFT fit before GRPO (``[adapters.sft]``) reads oracle episodes from its ``seed_offset`` on."""
    data = {"adapters": {"steps": 1, "sft": {"episodes": 4, "seed_offset": TEST_SEED_BASE - 2}}}
    with pytest.raises(TestSeedError, match="stage adapters"):
        adapters.run(context(tmp_path, data, {**MODEL, "calibration": ENVS}))


def test_gate_data_refuses_test_seeds(tmp_path):
    ups = {**MODEL, "adapters": {"adapters": {"error-recovery": {"env_id": ENV, "adapter": "x"}}}}
    with pytest.raises(TestSeedError, match="stage gates"):
        gates.run(context(tmp_path, {"gates": {"episodes_per_env": TEST_SEED_BASE}}, ups))
