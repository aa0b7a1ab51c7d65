"""`trace rollout`: JSONL records, test-split refusal, and resume after a run killed part-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.openai_standin import StandinServer
from trace_gym.records import read_records
from trace_train.base_rollouts import (
    RolloutArgs,
    RolloutError,
    SplitRefusedError,
    rollout,
)
from trace_train.cli import main

ENV = "trace/retail-v2"


def test_oracle_records_carry_everything_analysis_needs(tmp_path: Path) -> None:
    summary = rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=6, batch_size=4))
    assert (summary.written, summary.passed, summary.skipped) == (6, 6, 0)
    records = read_records(tmp_path / "trajectories.jsonl")
    assert sorted(r["seed"] for r in records) == list(range(6))
    first = records[0]
    for key in (
        "messages",
        "tools",
        "reward",
        "reward_components",
        "requirements",
        "seed",
        "split",
        "env_id",
        "model",
        "run",
        "timing",
        "turns",
    ):
        assert key in first, key
    assert (
        first["split"] == "train"
        and first["model"] == "oracle"
        and first["run"]["sampling"]["temperature"] == 0
    )
    assert all(v == "PRESENT" for r in records for v in r["requirements"].values())
    assert first["messages"][0]["role"] == "system" and first["tools"][0]["type"] == "function"


def test_test_split_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SplitRefusedError, match="train split only"):
        rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=2, split="test"))
    assert not (tmp_path / "trajectories.jsonl").exists()
    assert main(["rollout", ENV, "--model", "oracle", "--out", str(tmp_path), "--split", "test"]) == 2
    assert "must never see test-split tasks" in capsys.readouterr().err


def test_existing_file_needs_resume_and_same_settings(tmp_path: Path) -> None:
    args = RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=3)
    rollout(args)
    before = (tmp_path / "trajectories.jsonl").read_bytes()
    with pytest.raises(RolloutError, match="pass --resume"):
        rollout(args)
    with pytest.raises(RolloutError, match="max_turns: file None vs now 7"):
        rollout(
            RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=3, max_turns=7, resume=True)
        )
    assert (tmp_path / "trajectories.jsonl").read_bytes() == before  # bad input loses nothing
    summary = rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=5, resume=True))
    assert (summary.written, summary.skipped) == (2, 3)
    assert sorted(r["seed"] for r in read_records(tmp_path / "trajectories.jsonl")) == list(range(5))


def test_a_line_cut_by_a_kill_is_dropped_and_rerun(tmp_path: Path) -> None:
    rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=2))
    path = tmp_path / "trajectories.jsonl"
    with path.open("a") as f:
        f.write('{"seed": 2, "reward": 1.0, "messa')  # the kill came mid-write
    assert len(read_records(path)) == 2
    rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(tmp_path), episodes=3, resume=True))
    records = read_records(path)
    assert sorted(r["seed"] for r in records) == [0, 1, 2] and records[2]["messages"]


def test_ablation_needs_a_target_that_supports_it(tmp_path: Path) -> None:
    with pytest.raises(RolloutError, match="cannot remove a capability"):
        rollout(
            RolloutArgs(
                env_id="trace/bfcl-multi-turn-base-v0",
                model="oracle-without:policy-adherence",
                out=str(tmp_path),
                episodes=1,
            )
        )


class GatedGreeter:
    """Answers the first ``n`` requests, then holds every later one until ``gate`` is set: a rollout can finish
    at most n / turns episodes before it is killed, however slow or loaded the machine (no wall clock)."""

    def __init__(self, n: int):
        self.n, self.count, self.lock, self.gate = n, 0, threading.Lock(), threading.Event()

    def __call__(self, request: dict) -> str:
        with self.lock:
            self.count += 1
            held = self.count > self.n
        if held:
            self.gate.wait(timeout=600)
        return "Hello! How can I help you today?"


def test_resume_after_killing_a_running_rollout(tmp_path: Path) -> None:
    """A real `trace rollout` process against an OpenAI-compatible server that stops answering after 8 requests
    (4 two-turn episodes at most), killed once 3 episodes are written, then resumed."""
    out = tmp_path / "run"
    path = out / "trajectories.jsonl"
    greeter = GatedGreeter(8)
    with StandinServer(respond=greeter) as server:
        cmd = [
            sys.executable,
            "-m",
            "trace_train.cli",
            "rollout",
            ENV,
            "--model",
            "stand-in",
            "--base-url",
            server.base_url,
            "--out",
            str(out),
            "--episodes",
            "12",
            "--max-turns",
            "2",
            "--batch-size",
            "2",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 600  # generous: only a rollout that never writes fails
            while (
                time.monotonic() < deadline
                and proc.poll() is None
                and (not path.exists() or len(path.read_bytes().splitlines()) < 3)
            ):
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            greeter.gate.set()  # the resumed run gets its answers
        kept = read_records(path)
        assert 3 <= len(kept) <= 4, "the kill should land part-way (the server held the 9th request on)"
        kept_bytes = path.read_bytes()[: path.read_bytes().rfind(b"\n") + 1]
        done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    records = read_records(path)
    seeds = [r["seed"] for r in records]
    assert sorted(seeds) == list(range(12)) and len(set(seeds)) == 12  # no seed duplicated or lost
    # each record's group is its task's index in the whole run, resumed or not: the uninterrupted run's records
    assert all(r["group"] == r["seed"] for r in records)
    assert path.read_bytes().startswith(kept_bytes)  # finished lines kept as written
    assert all(r["model"] == "stand-in" and r["turns"] == 2 and r["truncated"] for r in records)
    assert all(isinstance(r["requirements"], dict) for r in records)  # the env labels a cut episode too
    assert json.loads((out / "rollout.json").read_text())["episodes"] == 12


@pytest.mark.slow  # ~10k-token byte-level prompts: 30-100 s on the shared 2-core machine
def test_local_model_through_the_batched_engine_then_analyze(tmp_path: Path) -> None:
    """A saved (tiny random) transformers model through the trainer's engine, then the analysis. The byte-level
    tokenizer makes retail's prompt ~10k tokens: with max_total_tokens 4096 the engine cuts every episode after
    one turn, and the env scores and labels it as it stands."""
    import torch

    from trace_gym.analysis.analyze import AnalyzeArgs, analyze
    from trace_train.models import save_tiny_model

    torch.set_num_threads(1)
    model = save_tiny_model(tmp_path / "tiny")
    args = RolloutArgs(
        env_id=ENV,
        model=str(model),
        out=str(tmp_path / "ro"),
        episodes=3,
        batch_size=2,
        max_turns=2,
        max_new_tokens=6,
        max_total_tokens=4096,
    )
    summary = rollout(args)
    assert summary.written == 3 and summary.passed == 0
    records = read_records(tmp_path / "ro" / "trajectories.jsonl")
    assert sorted(r["seed"] for r in records) == [0, 1, 2]
    assert all(
        r["generated_tokens"] == 6 and r["turns"] == 1 and r["cut"] == "max_total_tokens" for r in records
    )
    assert all(r["requirements"] and r["reward_components"] for r in records)
    assert all(r["messages"][0]["role"] == "system" and r["tools"] for r in records)
    result = analyze(AnalyzeArgs(rollouts=[str(tmp_path / "ro")], out=str(tmp_path / "an")))
    assert result.selection["target"]["failed"] == 3
    # a random model lacks whatever its tasks needed; with no success there is no contrast (ER+ = 0)
    assert all(r.selected == (r.mean_cov >= 0.1) for r in result.results)
