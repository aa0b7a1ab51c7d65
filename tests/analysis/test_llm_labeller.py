"""The LLM analysis agent end to end: `trace analyze` in its own process against a local OpenAI-compatible
server (tests/openai_standin.py) that answers good, malformed and truncated JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.openai_standin import StandinServer
from trace_gym.analysis.llm_labeller import compact_messages, domain_words
from trace_gym.analysis.selection import load_selection
from trace_gym.records import read_records
from trace_train.base_rollouts import RolloutArgs, rollout

ENV = "trace/retail-v2"
SEED_RE = re.compile(r"## The conversation \(seed (\d+), (passed|failed)")
CAP_RE = re.compile(r"^- `([a-z0-9-]+)`:", re.MULTILINE)


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> tuple[Path, Path, dict[int, dict]]:
    root = tmp_path_factory.mktemp("rollouts")
    rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(root / "full"), episodes=6))
    # the oracle cut after 3 turns: failed episodes, labelled LACKING where a capability was still needed
    rollout(
        RolloutArgs(env_id=ENV, model="oracle", out=str(root / "cut"), episodes=6, seed_offset=6, max_turns=3)
    )
    records = read_records(root / "full" / "trajectories.jsonl") + read_records(
        root / "cut" / "trajectories.jsonl"
    )
    return root / "full", root / "cut", {r["seed"]: r for r in records}


def analyze(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "analyze", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def truncated(text: str) -> dict:
    return {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        ]
    }


class Analyst:
    """A scripted analysis agent: labels from the env's requirements, with scripted faults."""

    def __init__(self, records: dict[int, dict], discovery: list[object] | None = None):
        self.records = records
        self.discovery = list(discovery or [])
        self.lock = threading.Lock()
        self.label_calls = 0

    def __call__(self, request: dict) -> object:
        prompt = request["messages"][0]["content"]
        retry = len(request["messages"]) > 1
        if prompt.startswith("# Task: find the capabilities"):
            with self.lock:
                return self.discovery.pop(0) if len(self.discovery) > 1 else self.discovery[0]
        with self.lock:
            self.label_calls += 1
        seed = int(SEED_RE.search(prompt).group(1))
        names = CAP_RE.findall(prompt.split("## Capabilities", 1)[1].split("##", 1)[0])
        if seed == 7 and not retry:
            return truncated('{"labels": [{"capability": "' + names[0] + '", "label": "LACK')
        if seed == 8:
            return "I would say the agent mostly did fine."  # never valid: reported as a failure
        if seed == 9 and not retry:
            return json.dumps({"labels": [{"capability": names[0], "label": "MISSING"}]})  # schema violation
        requirements = self.records[seed]["requirements"]
        labels = [
            {"capability": n, "label": requirements.get(n, "NA"), "turn": None, "reason": "scripted"}
            for n in names
        ]
        first = None
        if seed == 10 and not retry:  # a first failure on a capability it labels NA/PRESENT: asked again
            first = {"capability": names[0], "turn": 1, "evidence": "scripted"}
            labels[0]["label"] = "NA"
        return (
            "Here is my labelling:\n```json\n"
            + json.dumps({"labels": labels, "first_failure": first})
            + "\n```"
        )


def test_both_labellers_agree_and_every_failure_is_reported(rollouts, tmp_path: Path) -> None:
    full, cut, records = rollouts
    analyst = Analyst(records)
    with StandinServer(respond=analyst) as server:
        done = analyze(
            str(full),
            str(cut),
            "--out",
            str(tmp_path),
            "--labeller",
            "both",
            "--model",
            "stand-in",
            "--base-url",
            server.base_url,
            "--runs",
            "3",
            "--max-attempts",
            "2",
            "--concurrency",
            "4",
        )
    assert done.returncode == 0, done.stderr
    selection = load_selection(tmp_path / "selected_capabilities.json")
    llm = selection["llm"]
    assert llm["runs"] == 3 and llm["calls"] == 3 * 12 and llm["failures"] == 3  # seed 8 in each run
    # seeds 7 (truncated), 9 (schema) and 10 (a first failure not labelled LACKING) in each run, repaired
    assert llm["retried_calls"] == 9
    assert analyst.label_calls == 36 + 9 + 3  # + one retry for 7, 9, 10 and 8 per run
    failures = [json.loads(line) for line in (tmp_path / "llm_failures.jsonl").read_text().splitlines()]
    assert sorted(f["seed"] for f in failures) == [8, 8, 8]
    assert all(len(f["attempts"]) == 2 and "no valid JSON" in f["error"] for f in failures)
    assert "3 of 36 LLM labelling calls failed" in done.stdout
    # labels equal the requirement labels wherever the LLM answered: kappa 1 for every capability
    assert all(c["kappa"] == pytest.approx(1.0) for c in selection["capabilities"])
    assert "kappa" in done.stdout
    html = (tmp_path / "report.html").read_text()
    assert "<b>3 failed</b>" in html and "data:image/png;base64," in html
    labels = json.loads((tmp_path / "labels.json").read_text())
    i8 = [r["seed"] for r in labels["records"]].index(8)
    assert all(run["labels"][name][i8] is None for run in labels["llm"] for name in run["labels"])
    # the LLM's first failures are kept per run and record (none here: the repaired answers name none)
    assert all(len(run["first_failures"]) == 12 and not any(run["first_failures"]) for run in labels["llm"])


def test_discovery_rejects_domain_names_then_labels_n_runs(rollouts, tmp_path: Path) -> None:
    full, cut, records = rollouts
    domain = {
        "capabilities": [
            {"name": f"order-handling-{i}", "description": "Handles orders well."} for i in range(4)
        ]
    }
    general = {
        "capabilities": [
            {"name": name, "description": f"The general skill called {name}."}
            for name in (
                "precondition-checking",
                "precise-arguments",
                "information-gathering",
                "policy-adherence",
            )
        ]
    }
    analyst = Analyst(records, discovery=["Let me think.", json.dumps(domain), json.dumps(general)])
    with StandinServer(respond=analyst) as server:
        done = analyze(
            str(full),
            str(cut),
            "--out",
            str(tmp_path),
            "--labeller",
            "llm",
            "--model",
            "stand-in",
            "--base-url",
            server.base_url,
            "--runs",
            "4",
            "--max-attempts",
            "3",
        )
        discovery_requests = [
            r for r in server.requests if "find the capabilities" in r["messages"][0]["content"]
        ]
    assert done.returncode == 0, done.stderr
    assert len(discovery_requests) == 3
    assert "is domain-specific (contains order)" in discovery_requests[2]["messages"][-1]["content"]
    selection = load_selection(tmp_path / "selected_capabilities.json")
    assert [c["name"] for c in selection["llm"]["capabilities"]] == [
        c["name"] for c in general["capabilities"]
    ]
    assert selection["labeller"] == "llm" and selection["thresholds"] == {
        "rho": 0.1,
        "delta": 0.2,
        "k": 4,
        "n": 4,
    }
    assert all(len(c["runs"]) == 4 for c in selection["capabilities"])
    # seed 8 is never labelled: each run's statistics cover the other 11 trajectories
    assert all(run["failed"] + run["passed"] == 11 for c in selection["capabilities"] for run in c["runs"])


def test_llm_labeller_needs_a_model(rollouts, tmp_path: Path) -> None:
    full, _, _ = rollouts
    done = analyze(str(full), "--out", str(tmp_path), "--labeller", "llm")
    assert done.returncode != 0 and "needs --model" in done.stderr


def test_compaction_keeps_indices_and_domain_words() -> None:
    messages = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi " * 300},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_order_details", "arguments": "{}"}}],
        },
        {"role": "tool", "name": "get_order_details", "content": "Error: no"},
    ]
    lines = compact_messages(messages, max_chars=50)
    assert [line["index"] for line in lines] == [1, 2, 3]
    assert "chars cut" in lines[0]["text"] and lines[1]["text"] == "CALL get_order_details({})"
    assert lines[2]["role"] == "tool get_order_details"
    words = domain_words(
        [
            {
                "env_id": "trace/retail-v2",
                "tools": [
                    {"function": {"name": "cancel_pending_order"}},
                    {"function": {"name": "get_user_details"}},
                ],
            }
        ]
    )
    assert words == {"retail", "cancel", "pending", "order"}
