"""A run's capability envs are the target at the run's difficulty, whatever the generated package said when
trace_gym was imported (the committed package, or the files before this run's synthesis rewrote them)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tests.pipeline.test_isolation import context
from trace_gym.registration import register_env
from trace_train.pipeline.stages import adapters, calibration, gates
from trace_train.pipeline.stages.common import use_run_envs

STALE = "trace/retail-runenvs-precise-arguments-v0"


@pytest.fixture
def stale_env():
    """A derived env registered as a committed package registers it: the target's default difficulty (2)."""
    register_env(
        STALE,
        entry_point="trace_gym.derived.env:DerivedCapabilityEnv",
        kwargs={"target_id": "trace/retail-v2", "capability": "precise-arguments", "target_kwargs": {}},
    )
    yield STALE
    del gym.registry[STALE]


def _target_difficulty(env_id: str) -> int:
    env = gym.make(env_id, disable_env_checker=True)
    try:
        return env.unwrapped.target.difficulty
    finally:
        env.close()


def test_a_stale_registration_is_made_the_runs(tmp_path, stale_env):
    assert _target_difficulty(stale_env) == 2  # what the run used before
    cfg = context(tmp_path, {"target": {"env_id": "trace/retail-v2", "difficulty": 1}}).config
    use_run_envs(cfg, [stale_env])
    assert gym.registry[stale_env].kwargs["target_kwargs"] == {"difficulty": 1}
    assert _target_difficulty(stale_env) == 1


def test_envs_not_derived_from_a_target_are_left_alone_and_unknown_ids_named(tmp_path):
    cfg = context(tmp_path, {"target": {"env_id": "trace/retail-v2", "difficulty": 1}}).config
    before = gym.registry["pipelinetest/nosplit-v0"]
    use_run_envs(cfg, ["pipelinetest/nosplit-v0"])
    assert gym.registry["pipelinetest/nosplit-v0"] is before
    with pytest.raises(RuntimeError, match="trace/no-such-env-v0 is not registered"):
        use_run_envs(cfg, ["trace/no-such-env-v0"])


@pytest.mark.parametrize("stage", ["calibration", "adapters", "gates"])
def test_every_stage_that_plays_capability_envs_makes_them_the_runs_first(tmp_path, stale_env, stage):
    envs = {"envs": [{"capability": "precise-arguments", "env_id": stale_env, "difficulty": None}]}
    upstream = {
        "base": {"model": "no-such-model-is-ever-loaded"},
        "synthesis": envs,
        "calibration": envs,
        "adapters": {"adapters": {"precise-arguments": {"env_id": stale_env, "adapter": "x"}}},
    }
    data = {"target": {"env_id": "trace/retail-v2", "difficulty": 1}}
    run = {"calibration": calibration.run, "adapters": adapters.run, "gates": gates.run}[stage]
    with pytest.raises(Exception):  # noqa: B017, PT011 - the model does not exist: the stage stops there
        run(context(tmp_path, data, upstream))
    assert gym.registry[stale_env].kwargs["target_kwargs"] == {"difficulty": 1}
