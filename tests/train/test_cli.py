"""The CLI commands end to end on a tiny model directory (in process, and under accelerate launch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trace_train.commands import main

REPO = Path(__file__).resolve().parents[2]


def test_sft_train_evaluate_cli(tiny_model_dir, tmp_path, capsys):
    sft_out = tmp_path / "sft"
    rc = main(
        [
            "sft",
            "traintest/lookup-v0",
            "--model",
            str(tiny_model_dir),
            "--episodes",
            "6",
            "--epochs",
            "1",
            "--batch-size",
            "3",
            "--lora-rank",
            "4",
            "--out",
            str(sft_out),
            "--merge",
        ]
    )
    assert rc == 0
    summary = json.loads((sft_out / "sft_summary.json").read_text())
    assert summary["trajectories"] == 6 and summary["oracle_failures"] == 0
    assert (sft_out / "adapter" / "adapter_config.json").is_file()
    assert (sft_out / "merged" / "config.json").is_file()

    train_out = tmp_path / "grpo"
    rc = main(
        [
            "train",
            "traintest/lookup-v0",
            "--model",
            str(sft_out / "merged"),
            "--out",
            str(train_out),
            "--steps",
            "2",
            "--groups-per-step",
            "2",
            "--group-size",
            "2",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--min-oracle-ceiling",  # 8 tokens cut the lookup oracle's call: the CLI is under test, not a result
            "0",
            "--lora-rank",
            "4",
            "--hint-fraction",
            "0.5",
            "--no-progress",
            "--save-every",
            "1",
        ]
    )
    assert rc == 0
    assert (train_out / "adapter" / "adapter_config.json").is_file()
    metrics = [json.loads(x) for x in (train_out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2
    for key in (
        "reward_mean",
        "reward_std",
        "success_rate",
        "informative_group_share",
        "loss",
        "kl",
        "clip_fraction",
        "gen_tokens_per_s",
        "train_tokens_per_s",
        "peak_memory_mb",
    ):
        assert key in metrics[0]
    assert list((train_out / "tensorboard").iterdir())

    traj = tmp_path / "eval.jsonl"
    capsys.readouterr()
    rc = main(
        [
            "evaluate",
            "traintest/lookup-v0",
            "--model",
            str(tiny_model_dir),
            "--adapter",
            str(train_out / "adapter"),
            "--episodes",
            "4",
            "--split",
            "test",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--min-oracle-ceiling",
            "0",
            "--out",
            str(traj),
            "--json",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "success" in out and "95% CI" in out
    rows = [json.loads(x) for x in traj.read_text().splitlines()]
    assert len(rows) == 4 and all(r["seed"] >= 1_000_000_000 for r in rows)  # test seeds only


def test_cli_errors(tiny_model_dir, tmp_path, capsys):
    assert main(["evaluate", "traintest/echo-v0", "--model", str(tmp_path / "nope"), "--episodes", "1"]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "traintest/echo-v0",
                "--model",
                str(tiny_model_dir),
                "--out",
                str(tmp_path / "r"),
                "--resume",
                str(tmp_path / "missing"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "checkpoint" in capsys.readouterr().err


def test_module_env_id_third_party_path(tiny_model_dir, tmp_path):
    """``module:ns/name-vN`` ids and plain-string observations (the third-party shape)."""
    rc = main(
        [
            "train",
            "tests.train.toy_envs:traintest/echo-v0",
            "--model",
            str(tiny_model_dir),
            "--out",
            str(tmp_path / "o"),
            "--steps",
            "1",
            "--groups-per-step",
            "2",
            "--group-size",
            "2",
            "--max-new-tokens",
            "4",
            "--lora-rank",
            "2",
            "--no-progress",
            "--no-tensorboard",
        ]
    )
    assert rc == 0


@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not installed")
def test_accelerate_two_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "ddp"
    cmd = [
        shutil.which("accelerate"),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "trace_train.commands",
        "train",
        "tests.train.toy_envs:traintest/echo-v0",
        "--model",
        str(tiny_model_dir),
        "--out",
        str(out),
        "--groups-per-step",
        "1",
        "--group-size",
        "2",
        "--max-new-tokens",
        "4",
        "--lora-rank",
        "2",
        "--no-progress",
        "--no-tensorboard",
        "--save-every",
        "1",
        "--dynamic-sampling",
        "--steps",
        "2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    ckpt = out / "checkpoints" / "step-0000002"
    assert (ckpt / "rng-rank0.pt").is_file() and (ckpt / "rng-rank1.pt").is_file()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    # resume under the same world size continues
    proc = subprocess.run(
        [*cmd, "--steps", "3", "--resume", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_evaluate_through_openai_compatible_standin(tmp_path, capsys):
    """The HTTP policy path of `trace evaluate` against the local stand-in server (no network)."""
    from tests.openai_standin import StandinServer

    def respond(request):
        question = request["messages"][-1]["content"]
        return "b" if " b." in question else "a"  # always right on the echo env

    with StandinServer(respond=respond) as server:
        rc = main(
            [
                "evaluate",
                "traintest/echo-v0",
                "--model",
                "stand-in",
                "--base-url",
                server.base_url,
                "--episodes",
                "6",
                "--out",
                str(tmp_path / "t.jsonl"),
            ]
        )
    assert rc == 0
    assert "success 1.000" in capsys.readouterr().out


def test_list_flags_take_several_values_and_optional_flags_one():
    """``levels: list[int]`` is ``--levels 1 2 3`` (it was read as one int: the item type was taken for an
    Optional's), ``lora_target_modules: list[str]`` several names, ``difficulty: int | None`` one int."""
    import argparse

    from trace_train.calibrate import register
    from trace_train.compose.config import ComposeArgs
    from trace_train.config import GRPOArgs, add_dataclass_flags

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["calibrate", "e", "--levels", "1", "2", "3"]).levels == [1, 2, 3]
    assert parser.parse_args(["calibrate", "e"]).levels == []
    train = argparse.ArgumentParser()
    add_dataclass_flags(train, GRPOArgs, skip={"env_id"})
    parsed = train.parse_args(["--lora-target-modules", "q_proj", "v_proj", "--difficulty", "2"])
    assert parsed.lora_target_modules == ["q_proj", "v_proj"] and parsed.difficulty == 2
    compose = argparse.ArgumentParser()
    add_dataclass_flags(compose, ComposeArgs, skip={"adapters", "envs", "names"})
    assert compose.parse_args(["--difficulties", "2", "none", "1"]).difficulties == [2, None, 1]
    with pytest.raises(SystemExit):
        compose.parse_args(["--difficulties", "two"])


def test_an_unreachable_server_is_one_error_line_and_leaves_no_output(tmp_path, capsys):
    from trace_train.cli import main

    out = tmp_path / "new" / "e.jsonl"
    args = ["evaluate", "trace/rg-arith1-v2", "--base-url", "http://127.0.0.1:1/v1", "--model", "x"]
    assert main([*args, "--episodes", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: POST http://127.0.0.1:1/v1/chat/completions failed" in err and "Traceback" not in err
    assert not (tmp_path / "new").exists()
