"""`evaluate` writes each episode as it finishes; `resume` keeps those of an interrupted run and runs the rest,
giving the records of an uninterrupted run (greedy, so the same episodes)."""

from __future__ import annotations

import json

import pytest

from trace_train.config import EvalSettings
from trace_train.evaluate import evaluate
from trace_train.policies.hf import HFPolicy


def _eval(policy, out, resume=False, episodes=6):
    return evaluate(
        policy,
        "traintest/lookup-v0",
        EvalSettings(episodes=episodes, max_new_tokens=6, max_turns=2, batch_size=2, min_oracle_ceiling=0),
        out_jsonl=out,
        resume=resume,
    )


def test_resume_keeps_finished_episodes_and_runs_the_rest(tiny_model_dir, tmp_path, monkeypatch):
    policy = HFPolicy.from_pretrained(str(tiny_model_dir))
    full = _eval(policy, tmp_path / "full.jsonl")
    lines = (tmp_path / "full.jsonl").read_text().splitlines()
    assert [json.loads(x)["seed"] for x in lines] == [r["seed"] for r in full.trajectories]  # task order

    # an interrupted run: three episodes written, the fourth torn mid-line
    part = tmp_path / "part.jsonl"
    part.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    ran = []
    import trace_train.episodes as ev

    real = ev.stream_collect
    monkeypatch.setattr(
        ev, "stream_collect", lambda p, e, specs, *a, **k: ran.extend(specs) or real(p, e, specs, *a, **k)
    )
    again = _eval(policy, part, resume=True)
    assert len(ran) == 3  # only the tasks without a complete record
    assert again.trajectories == full.trajectories
    assert part.read_text() == (tmp_path / "full.jsonl").read_text()


def test_without_resume_an_old_file_is_replaced(tiny_model_dir, tmp_path):
    policy = HFPolicy.from_pretrained(str(tiny_model_dir))
    out = tmp_path / "e.jsonl"
    out.write_text('{"seed": 12345, "reward": 1.0}\n')
    result = _eval(policy, out, episodes=2)
    assert len(out.read_text().splitlines()) == 2 and 12345 not in [r["seed"] for r in result.trajectories]


@pytest.mark.parametrize("episodes", [2])
def test_a_finished_evaluation_resumes_to_itself_without_running(
    tiny_model_dir, tmp_path, monkeypatch, episodes
):
    policy = HFPolicy.from_pretrained(str(tiny_model_dir))
    out = tmp_path / "e.jsonl"
    first = _eval(policy, out, episodes=episodes)
    import trace_train.episodes as ev

    monkeypatch.setattr(ev, "stream_collect", lambda *a, **k: pytest.fail("nothing should run"))
    assert _eval(policy, out, resume=True, episodes=episodes).trajectories == first.trajectories


def test_progress_counts_the_kept_episodes_then_each_new_one(tiny_model_dir, tmp_path):
    policy = HFPolicy.from_pretrained(str(tiny_model_dir))
    full = _eval(policy, tmp_path / "full.jsonl")
    lines = (tmp_path / "full.jsonl").read_text().splitlines()
    part = tmp_path / "part.jsonl"
    part.write_text("\n".join(lines[:2]) + "\n")
    seen = []
    evaluate(
        policy,
        "traintest/lookup-v0",
        EvalSettings(episodes=6, max_new_tokens=6, max_turns=2, batch_size=2, min_oracle_ceiling=0),
        out_jsonl=part,
        resume=True,
        progress=lambda done, total, passed: seen.append((done, total, passed)),
    )
    assert [done for done, _, _ in seen] == [3, 4, 5, 6] and {total for _, total, _ in seen} == {6}
    assert seen[-1][2] == sum(r["reward"] >= 1.0 for r in full.trajectories)
