"""Defect 2: test seeds are unreachable from every training command, for envs with and without split support.

``trace sft --seed-offset 1000000000`` on an env without split support trained on exactly the seeds
``trace evaluate --split test`` uses, and an out-of-range offset on a trace env ended in a traceback. Every
training command now goes through :func:`trace_gym.seeds.train_reset_seed` (the demo is covered in
test_demo.py, which records every seed its training phases reset).
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from trace_gym.registration import make_env
from trace_gym.seeds import TEST_SEED_BASE, TrainSeedError, check_train_tasks, reset_seed, train_reset_seed
from trace_train.cli import main


@pytest.fixture
def reset_seeds(monkeypatch):
    """Every absolute seed any env passes to ``gymnasium.Env.reset`` while the fixture is active."""
    seen: list[int | None] = []
    original = gym.Env.reset

    def spy(self, *, seed=None, options=None):
        seen.append(seed)
        return original(self, seed=seed, options=options)

    monkeypatch.setattr(gym.Env, "reset", spy)
    return seen


def test_guard_without_split_support():
    env = make_env("traintest/lookup-v0")
    assert train_reset_seed(TEST_SEED_BASE - 1, env) == TEST_SEED_BASE - 1
    with pytest.raises(TrainSeedError, match="would reach its evaluation seeds"):
        train_reset_seed(TEST_SEED_BASE, env)  # exactly `trace evaluate --split test`'s first seed
    assert reset_seed("test", 0, env) == TEST_SEED_BASE
    with pytest.raises(TrainSeedError, match="non-negative"):
        train_reset_seed(-1, env)
    with pytest.raises(TrainSeedError):
        check_train_tasks(env, TEST_SEED_BASE - 10, 11)
    with pytest.raises(TrainSeedError):  # reset_seed("train", ...) is guarded as well
        reset_seed("train", TEST_SEED_BASE, env)


def test_guard_with_split_support():
    pytest.importorskip("reasoning_gym")
    env = make_env("trace/rg-arith2-v2")
    assert train_reset_seed(999_999, env) == 999_999
    with pytest.raises(TrainSeedError, match="outside the train split"):
        train_reset_seed(1_000_000, env)


def test_sft_refuses_test_seeds_with_a_clear_error(tiny_model_dir, tmp_path, capsys, reset_seeds):
    argv = ["sft", "traintest/lookup-v0", "--model", str(tiny_model_dir), "--out", str(tmp_path / "sft")]
    assert main([*argv, "--episodes", "2", "--seed-offset", str(TEST_SEED_BASE - 1)]) == 2
    err = capsys.readouterr().err
    assert "error: training seed 1000000000" in err and "Traceback" not in err
    assert all(s is None or s < TEST_SEED_BASE for s in reset_seeds)
    # just below the boundary it trains, on train seeds only
    assert main([*argv, "--episodes", "2", "--epochs", "1", "--seed-offset", str(TEST_SEED_BASE - 2)]) == 0
    assert {TEST_SEED_BASE - 2, TEST_SEED_BASE - 1} <= set(reset_seeds)
    assert all(s is None or s < TEST_SEED_BASE for s in reset_seeds)


def test_sft_out_of_range_offset_on_a_trace_env_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("reasoning_gym")
    argv = ["sft", "trace/rg-arith2-v2", "--model", str(tiny_model_dir), "--out", str(tmp_path / "sft")]
    assert main([*argv, "--episodes", "2", "--seed-offset", "2000000"]) == 2
    err = capsys.readouterr().err
    assert "outside the train split" in err and "Traceback" not in err


def test_train_refuses_runs_that_would_reach_test_seeds(tiny_model_dir, tmp_path, capsys, reset_seeds):
    argv = ["train", "traintest/echo-v0", "--model", str(tiny_model_dir), "--out", str(tmp_path / "grpo")]
    argv += ["--groups-per-step", "2", "--group-size", "2", "--max-new-tokens", "2", "--no-tensorboard"]
    argv += ["--no-progress"]
    assert main([*argv, "--steps", str(TEST_SEED_BASE // 2 + 1)]) == 2  # 2 groups x (5e8 + 1) steps pass 1e9
    assert "would reach its evaluation seeds" in capsys.readouterr().err
    assert not reset_seeds  # refused before any rollout
    assert main([*argv, "--steps", "1"]) == 0
    assert reset_seeds and all(s < TEST_SEED_BASE for s in reset_seeds)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--group-size", "1", "--group-size must be >= 2"),
        ("--temperature", "-1", "--temperature must be >= 0"),
        ("--top-p", "0", "--top-p must be in"),
        ("--lr", "0", "--lr must be > 0"),
        ("--clip-eps-low", "1.5", "clip_eps_low"),
        ("--beta", "-0.1", "beta must be"),
        ("--micro-batch-size", "0", "--micro-batch-size must be"),
        ("--hint-fraction", "2", "--hint-fraction"),
    ],
)
def test_train_bad_flags_are_clear_errors(flag, value, message, capsys):
    assert main(["train", "traintest/echo-v0", flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--episodes", "0", "--episodes must be"), ("--batch-size", "0", "--batch-size must be")],
)
def test_evaluate_bad_flags_are_clear_errors(tiny_model_dir, tmp_path, flag, value, message, capsys):
    argv = [
        "evaluate",
        "traintest/echo-v0",
        "--model",
        str(tiny_model_dir),
        "--out",
        str(tmp_path / "e.jsonl"),
    ]
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
