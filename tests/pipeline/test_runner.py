"""The stage runner's skip / redo / resume / --from logic, on small stages that write files."""

from __future__ import annotations

import io
import json

import pytest

from trace_train.metrics import reset_peak_rss
from trace_train.pipeline.config import RunConfig, config_from_dict
from trace_train.pipeline.progress import Reporter
from trace_train.pipeline.runner import Pipeline, Stage, StageError


class Calls:
    def __init__(self):
        self.log: list[tuple[str, bool]] = []
        self.interrupt_at: str | None = None
        self.fail_at: str | None = None
        self.server_down_at: str | None = None


def make_stages(calls: Calls) -> list[Stage]:
    def first(ctx):
        calls.log.append(("first", ctx.resume))
        (ctx.dir / "out.txt").write_text(f"rollouts={ctx.config.rollouts.episodes}")
        return {"n": ctx.config.rollouts.episodes}

    def second(ctx):
        calls.log.append(("second", ctx.resume))
        partial = ctx.dir / "partial.txt"
        if ctx.resume:
            assert partial.read_text() == "half"  # the interrupted attempt's work is still there
        partial.write_text("half")
        if calls.interrupt_at == "second":
            calls.interrupt_at = None
            raise KeyboardInterrupt
        if calls.fail_at == "second":
            calls.fail_at = None
            raise RuntimeError("boom")
        if calls.server_down_at == "second":
            from trace_train.policies.remote_generation import RemoteGenerationError

            calls.server_down_at = None
            raise RemoteGenerationError(
                "generation ... on the generation server at http://h:1/v1 failed: refused"
            )
        upstream = (ctx.upstream_dirs["first"] / "out.txt").read_text()
        (ctx.dir / "out.txt").write_text(upstream + f"|steps={ctx.config.adapters.steps}")
        return {"from": ctx.upstream["first"]["n"]}

    def third(ctx):
        calls.log.append(("third", ctx.resume))
        return {"summary": (ctx.upstream_dirs["second"] / "out.txt").read_text()}

    return [
        Stage("first", first, sections=("rollouts",)),
        Stage("second", second, sections=("adapters",), needs=("first",)),
        Stage("third", third, sections=("report",), needs=("second",)),
    ]


def run(tmp_path, calls, from_stage=None, **overrides) -> list[str]:
    data = {"out": str(tmp_path / "run"), **overrides}
    config = config_from_dict(data)
    pipe = Pipeline(make_stages(calls), config, Reporter(io.StringIO(), tty=False))
    calls.log.clear()
    return [r.action for r in pipe.run(from_stage=from_stage)]


def test_skip_redo_resume_and_from(tmp_path):
    calls = Calls()
    assert run(tmp_path, calls) == ["ran", "ran", "ran"]
    assert run(tmp_path, calls) == ["skipped", "skipped", "skipped"]
    assert calls.log == []
    # a change in a section only the second stage reads: it and its successor are redone
    assert run(tmp_path, calls, adapters={"steps": 3}) == ["skipped", "ran", "ran"]
    # a change upstream cascades: the first stage's output changes, so everything after it reruns
    assert run(tmp_path, calls, adapters={"steps": 3}, rollouts={"episodes": 9}) == ["ran", "ran", "ran"]
    # same config again: nothing to do; --from forces that stage and the rest
    assert run(tmp_path, calls, adapters={"steps": 3}, rollouts={"episodes": 9}) == ["skipped"] * 3
    assert run(tmp_path, calls, "second", adapters={"steps": 3}, rollouts={"episodes": 9}) == [
        "skipped",
        "ran",
        "ran",
    ]
    state = json.loads((tmp_path / "run" / "02-second" / "stage.json").read_text())
    assert state["status"] == "done" and len(state["output_hash"]) == 64
    cfg = json.loads((tmp_path / "run" / "02-second" / "config.json").read_text())
    assert cfg["sections"]["adapters"]["steps"] == 3 and set(cfg["upstream"]) == {"first"}


def test_interrupted_stage_resumes_and_failed_stage_reruns(tmp_path):
    calls = Calls()
    calls.interrupt_at = "second"
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, calls)
    state = json.loads((tmp_path / "run" / "02-second" / "stage.json").read_text())
    assert state["status"] == "running"
    assert run(tmp_path, calls) == ["skipped", "resumed", "ran"]
    assert calls.log == [("second", True), ("third", False)]

    calls.fail_at = "second"
    with pytest.raises(StageError, match="stage second failed: RuntimeError: boom"):
        run(tmp_path, calls, "second")
    assert json.loads((tmp_path / "run" / "02-second" / "stage.json").read_text())["status"] == "failed"
    assert run(tmp_path, calls) == ["skipped", "ran", "ran"]
    assert calls.log[0] == ("second", False)  # a failed stage starts over in an emptied folder


def test_a_stage_stopped_by_the_generation_server_resumes_with_its_work_kept(tmp_path):
    """Issue 51: a server that went down is an interruption, not a failure of the stage: its folder (finished
    episodes, checkpoints) is kept and the next run resumes it."""
    calls = Calls()
    calls.server_down_at = "second"
    with pytest.raises(StageError, match="generation server at http://h:1/v1 failed"):
        run(tmp_path, calls)
    state = json.loads((tmp_path / "run" / "02-second" / "stage.json").read_text())
    assert state["status"] == "running" and "RemoteGenerationError" in state["error"]
    assert run(tmp_path, calls) == ["skipped", "resumed", "ran"]  # `second` asserts its partial work is there
    assert calls.log == [("second", True), ("third", False)]


def test_a_killed_stage_keeps_its_wall_time(tmp_path):
    """A kill leaves no chance to save the wall time: the resumed stage counts the killed attempt up to the newest
    file it wrote, on top of the attempts before it."""
    import os

    calls = Calls()
    calls.interrupt_at = "second"
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, calls)
    stage_dir = tmp_path / "run" / "02-second"
    state = json.loads((stage_dir / "stage.json").read_text())
    saved = state["wall_s"]  # Ctrl-C: saved
    # now pretend the process was killed 500 s into an attempt that had already run 100 s before it
    state = {
        "status": "running",
        "input_hash": state["input_hash"],
        "started": 1000.0,
        "wall_s_before": 100.0,
    }
    (stage_dir / "stage.json").write_text(json.dumps(state))
    os.utime(stage_dir / "partial.txt", (1500.0, 1500.0))
    assert run(tmp_path, calls) == ["skipped", "resumed", "ran"]
    done = json.loads((stage_dir / "stage.json").read_text())
    assert 600.0 <= done["wall_s"] < 660.0
    assert saved < 60.0


def test_unchanged_output_does_not_cascade(tmp_path):
    calls = Calls()
    run(tmp_path, calls)
    # the first stage redone (its state lost) reproduces the same files and result: successors keep their work
    (tmp_path / "run" / "01-first" / "stage.json").unlink()
    assert run(tmp_path, calls) == ["ran", "skipped", "skipped"]


def test_bad_from_and_bad_order(tmp_path):
    calls = Calls()
    with pytest.raises(ValueError, match="'nope' is not a stage; stages: 01-first, 02-second, 03-third"):
        run(tmp_path, calls, "nope")
    stages = make_stages(calls)
    pipeline = Pipeline(stages, RunConfig())
    # a stage by its directory's name, as `trace run --stages` prints it, is that stage
    assert pipeline.stage_range("02-second", "03-third") == ("second", "third")
    assert pipeline.stage_range(None, "first") == (None, "first")
    with pytest.raises(ValueError, match="--from third comes after --until second"):
        pipeline.stage_range("third", "02-second")
    with pytest.raises(ValueError, match="needs"):
        Pipeline([stages[1], stages[0]], RunConfig())


def test_non_tty_progress_prints_lines():
    stream = io.StringIO()
    reporter = Reporter(stream, tty=False, every_s=0.0)
    with reporter.bar("rollouts", 4) as bar:
        for _ in range(4):
            bar.advance(status="ok")
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("[rollouts] 4/4 (100%)") and lines[-1].endswith("- ok")
    assert "\x1b" not in stream.getvalue()  # no terminal control codes in a log


def test_metrics_of_a_resumed_run_keep_one_record_per_step(tmp_path):
    """A run killed after logging step 4 but checkpointed at step 2 logs steps 3 and 4 again on resume: the
    history keeps the redone records, once each, in order (the report's training curves read it)."""
    import json

    from trace_train.pipeline.stages.common import read_metrics

    path = tmp_path / "metrics.jsonl"
    steps = [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4), (3, 0.35), (4, 0.45), (5, 0.5)]
    path.write_text(
        "".join(json.dumps({"step": s, "reward_mean": r}) + "\n" for s, r in steps) + '{"step": 6, "rew'
    )
    got = [(m["step"], m["reward_mean"]) for m in read_metrics(path)]
    assert got == [(1, 0.1), (2, 0.2), (3, 0.35), (4, 0.45), (5, 0.5)]


@pytest.mark.skipif(not reset_peak_rss(), reason="the OS cannot reset the peak-memory high-water mark")
def test_each_stage_reports_its_own_peak_memory(tmp_path):
    """Stages share one process: a stage after a memory-hungry one must not inherit that stage's peak."""
    import numpy as np

    def hungry(ctx):
        block = np.ones(400 * 2**20 // 8)  # 400 MiB, touched
        return {"sum": float(block[::4096].sum())}

    def light(ctx):
        return {}

    config = config_from_dict({"out": str(tmp_path / "run")})
    stages = [
        Stage("hungry", hungry, sections=("rollouts",)),
        Stage("light", light, sections=("adapters",), needs=("hungry",)),
    ]
    Pipeline(stages, config, Reporter(io.StringIO(), tty=False)).run()
    states = [
        json.loads((tmp_path / "run" / d / "stage.json").read_text()) for d in ("01-hungry", "02-light")
    ]
    assert all(s["peak_rss_scope"] == "stage" for s in states)
    assert states[0]["peak_rss_mb"] - states[1]["peak_rss_mb"] > 300


@pytest.mark.skipif(not reset_peak_rss(), reason="the OS cannot reset the peak-memory high-water mark")
def test_a_stages_freed_heap_is_released_before_the_next_stage(tmp_path):
    """glibc keeps freed heap resident (the demo's warm start left 16.7 GB to the next stage): the runner
    trims it after each stage and records what stayed resident."""
    import torch

    def fragmenting(ctx):
        warm = torch.ones(100_000)
        del warm  # glibc serves blocks this size from the heap from now on
        blocks = [torch.ones(100_000) for _ in range(1500)]  # ~600 MB, freed when the stage returns
        return {"n": len(blocks)}

    config = config_from_dict({"out": str(tmp_path / "run")})
    Pipeline(
        [Stage("frag", fragmenting, sections=("rollouts",))], config, Reporter(io.StringIO(), tty=False)
    ).run()
    state = json.loads((tmp_path / "run" / "01-frag" / "stage.json").read_text())
    assert state["peak_rss_mb"] - state["rss_after_release_mb"] > 400


def as_if_recorded_by_older_code(tmp_path, stage_dir: str, edit) -> None:
    """Rewrite a finished stage's record as an older version of the code would have written it: its config
    edited by ``edit`` and an input hash of its own."""
    directory = tmp_path / "run" / stage_dir
    recorded = json.loads((directory / "config.json").read_text())
    edit(recorded["sections"]["adapters"])
    (directory / "config.json").write_text(json.dumps(recorded))
    state = json.loads((directory / "stage.json").read_text())
    (directory / "stage.json").write_text(json.dumps({**state, "input_hash": "hash-of-older-code"}))


def test_a_code_update_that_adds_settings_at_their_defaults_keeps_finished_stages(tmp_path):
    calls = Calls()
    assert run(tmp_path, calls) == ["ran", "ran", "ran"]
    # the knob `lr` did not exist when the stage ran: today it holds its default, so nothing changed
    as_if_recorded_by_older_code(tmp_path, "02-second", lambda section: section.pop("lr"))
    assert run(tmp_path, calls) == ["skipped", "skipped", "skipped"]
    state = json.loads((tmp_path / "run" / "02-second" / "stage.json").read_text())
    assert state["input_hash"] != "hash-of-older-code"  # recorded under today's inputs from now on
    assert run(tmp_path, calls) == ["skipped", "skipped", "skipped"]
    # ... but set to anything else, the new knob is a new input (the toy stage's output does not read it: the
    # stage after it is kept)
    as_if_recorded_by_older_code(tmp_path, "02-second", lambda section: section.pop("lr"))
    assert run(tmp_path, calls, adapters={"lr": 0.5}) == ["skipped", "ran", "skipped"]


def test_how_often_a_stage_saves_is_not_an_input_but_a_removed_setting_is(tmp_path):
    calls = Calls()
    assert run(tmp_path, calls, adapters={"save_every": 1}) == ["ran", "ran", "ran"]
    assert run(tmp_path, calls, adapters={"save_every": 5}) == ["skipped", "skipped", "skipped"]
    as_if_recorded_by_older_code(tmp_path, "02-second", lambda section: section.update(retired_knob=3))
    assert run(tmp_path, calls, adapters={"save_every": 5}) == ["skipped", "ran", "skipped"]


def test_a_stage_that_runs_a_model_records_its_roofline_account(tmp_path):
    """stage.json holds the account of the model work the stage did (and nothing for a stage that ran none)."""
    from tests.train.test_engine import GREEDY, _policy, _run

    def generate(ctx):
        _run(_policy(), "cached", [1, 2], GREEDY)
        return {}

    stages = [
        Stage("generate", generate, sections=("rollouts",)),
        Stage("files", lambda ctx: {}, sections=("report",)),
    ]
    pipe = Pipeline(
        stages, config_from_dict({"out": str(tmp_path / "run")}), Reporter(io.StringIO(), tty=False)
    )
    pipe.run()
    state = json.loads((tmp_path / "run" / "01-generate" / "stage.json").read_text())
    acc = state["roofline"]
    assert set(acc["phases"]) == {"prefill", "decode", "other"}
    assert acc["phases"]["decode"]["tokens"] > 0 and 0 < acc["share_of_bound"] < 1
    assert acc["wall_s"] == pytest.approx(state["wall_s"], abs=0.01)
    assert json.loads((tmp_path / "run" / "02-files" / "stage.json").read_text())["roofline"] is None


def test_a_stage_resumed_on_another_machine_names_both_and_the_report_says_so(tmp_path, monkeypatch):
    """Runs longer than a working session are resumed on whatever machine the next one gets: each stage records
    the CPUs its parts ran on, and the report's stage table shows them when they differ."""
    import trace_train.pipeline.runner as runner_module
    from trace_train.pipeline.runner import StageContext
    from trace_train.pipeline.stages.report import timing_section

    calls = Calls()
    calls.interrupt_at = "second"
    monkeypatch.setattr(runner_module, "cpu_name", lambda: "CPU A (avx512_bf16)")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, calls)
    monkeypatch.setattr(runner_module, "cpu_name", lambda: "CPU B (avx2)")
    assert run(tmp_path, calls) == ["skipped", "resumed", "ran"]
    states = {
        name: json.loads((tmp_path / "run" / d / "stage.json").read_text())
        for name, d in (("first", "01-first"), ("second", "02-second"), ("third", "03-third"))
    }
    assert states["first"]["machines"] == ["CPU A (avx512_bf16)"]
    assert states["second"]["machines"] == ["CPU A (avx512_bf16)", "CPU B (avx2)"]
    assert states["third"]["machines"] == ["CPU B (avx2)"]

    def section(names):
        ctx = StageContext(
            name="report",
            dir=tmp_path / "r",
            config=config_from_dict({"out": str(tmp_path / "run")}),
            upstream={n: {} for n in names},
            upstream_dirs={n: tmp_path / "run" / d for n, d in names.items()},
            resume=False,
            reporter=Reporter(io.StringIO(), tty=False),
            run_dir=tmp_path / "run",
        )
        return timing_section(ctx)

    mixed = section({"first": "01-first", "second": "02-second"})
    header, rows = mixed.tables[0]
    assert header[5] == "CPU" and rows[1][5] == "CPU A (avx512_bf16), CPU B (avx2)"
    assert "more than one machine" in mixed.after[0]
    one = section({"third": "03-third"})
    assert "CPU" not in one.tables[0][0] and "Every stage ran on CPU B (avx2)." in one.after[0]
