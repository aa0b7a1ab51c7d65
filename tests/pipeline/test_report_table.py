"""The final table of the report: every column under its header, the do-no-harm and direct-GRPO columns."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trace_train.pipeline.report import Section, check_tables, write_report
from trace_train.pipeline.stages.evaluation import _paired
from trace_train.pipeline.stages.report import evaluation_section


def _episodes(solved: set[int], n: int = 8) -> list[dict]:
    return [{"seed": i, "reward": float(i in solved)} for i in range(n)]


def _row(method: str, episodes: list[dict]) -> dict:
    rate = sum(e["reward"] for e in episodes) / len(episodes)
    row = {"method": method, "episodes": len(episodes), "success_rate": rate, "success_ci": [0.0, 1.0]}
    return row | {"reward_mean": rate, "reward_ci": [0.0, 1.0], "train_rollouts": 0, "eval_wall_s": 1.0}


def _ctx(with_direct: bool) -> SimpleNamespace:
    base, moe, direct = _episodes({0, 1, 2, 3}), _episodes({3, 5}), _episodes({1, 5, 6})
    rows = [_row("base", base), _row("moe", moe)]
    rows[1]["vs_base"] = _paired(base, moe)
    if with_direct:  # both fair baselines: equal rollouts and equal compute
        compute = _episodes({3, 4})
        rows.append(_row("direct_grpo", direct))
        rows.append(_row("direct_grpo_compute", compute) | {"train_flops": 2.5e12})
        rows[2]["vs_base"] = _paired(base, direct)
        rows[3]["vs_base"] = _paired(base, compute)
        rows[1]["vs_direct_grpo"] = _paired(direct, moe)
        rows[1]["vs_direct_grpo_compute"] = _paired(compute, moe)
    return SimpleNamespace(
        config=SimpleNamespace(target=SimpleNamespace(env_id="trace/x-v0")),
        upstream={"evaluation": {"rows": rows, "not_run": {}}, "adapters": {"adapters": {}}},
    )


@pytest.mark.parametrize("with_direct", [False, True])
def test_every_cell_sits_under_its_header(with_direct):
    section = evaluation_section(_ctx(with_direct))
    check_tables([section])
    ((header, rows),) = section.tables
    moe = dict(zip(header, rows[1], strict=True))
    assert moe["base successes kept"] == "0.250"  # of the base's 4 successes the MoE keeps task 3
    assert moe["gained/lost"] == "+1/-3"
    assert moe["reward diff (95% CI)"].startswith("-0.250")
    if with_direct:  # against direct GRPO: gains 1 (task 3), loses 2 (tasks 1, 6)
        assert moe["gained/lost vs direct GRPO"] == "+1/-2"
        # against the equal-compute row (tasks 3 and 4): gains task 5, loses task 4
        assert moe["gained/lost vs direct GRPO (equal compute)"] == "+1/-1"
        assert dict(zip(header, rows[0], strict=True))["p vs direct GRPO"] == "-"
        assert dict(zip(header, rows[3], strict=True))["train TFLOP"] == "2.5"
        assert moe["train TFLOP"] == "-"  # not recorded for this row
    else:
        assert "p vs direct GRPO" not in header


def test_a_row_short_of_its_header_is_refused_with_the_section_named(tmp_path):
    bad = Section(
        "Final table", tables=[(["method", "success", "p"], [["base", "0.1", "-"], ["moe", "0.2"]])]
    )
    with pytest.raises(ValueError, match="'Final table': a row has 2 cells for 3 columns"):
        write_report(tmp_path / "report", "t", [], [bad])
    assert not (tmp_path / "report" / "report.md").exists()  # refused before anything is written


def test_a_shorter_adapter_row_is_paired_with_the_base_on_the_tasks_it_played():
    """``evaluation.adapter_episodes``: an adapter plays the first 4 of the base's 8 tasks; its paired test
    counts only those (the base's successes on tasks 5-7 are neither gained nor lost)."""
    from trace_train.pipeline.stages.evaluation import _same_tasks

    base, adapter = _episodes({0, 5, 6, 7}), _episodes({0, 1}, n=4)
    vs = _paired(_same_tasks(base, adapter), adapter)
    assert (vs["n"], vs["only_a"], vs["only_b"], vs["kept_share"]) == (4, 0, 1, 1.0)


def test_the_capability_picture_shows_each_methods_milestone_pass_rate():
    from trace_gym.records import milestone_pass

    labels = ["PRESENT", "LACKING", "NA", "PRESENT"]
    records = [
        {"seed": i, "reward": 0.0, "requirements": {"policy-adherence": x}} for i, x in enumerate(labels)
    ]
    assert milestone_pass(records, "policy-adherence") == (2, 3)  # NA: never reached the decision
    assert milestone_pass(records, "precise-arguments") == (0, 0)
    ctx = _ctx(with_direct=False)
    rows = ctx.upstream["evaluation"]["rows"]
    rows[0]["milestones"], rows[1]["milestones"] = {"policy-adherence": [2, 3]}, {"policy-adherence": [0, 0]}
    section = evaluation_section(ctx)
    check_tables([section])
    assert section.tables[1] == (["capability", "base", "moe"], [["policy-adherence", "2/3 (0.67)", "0/0"]])


def _answer(base_solved: set[int], moe_solved: set[int], direct_solved: set[int] | None, n: int = 40) -> str:
    from trace_train.pipeline.stages.report import answer_section

    base, moe = _episodes(base_solved, n), _episodes(moe_solved, n)
    rows = [_row("base", base), _row("moe", moe)]
    rows[1]["vs_base"] = _paired(base, moe)
    if direct_solved is not None:
        direct = _episodes(direct_solved, n)
        rows.append(_row("direct_grpo", direct))
        rows[1]["vs_direct_grpo"] = _paired(direct, moe)
    ctx = SimpleNamespace(upstream={"evaluation": {"rows": rows, "not_run": {}}})
    return " ".join(answer_section(ctx).paragraphs)


def test_the_answer_says_yes_only_when_both_paired_tests_say_better():
    many, few = set(range(20)), {0, 1}
    assert _answer(few, many, few).startswith("**Yes.**")
    # better than the base but not than direct GRPO (the same tasks solved)
    text = _answer(few, many, many)
    assert text.startswith("**No: not significantly better than direct GRPO.**")
    assert "against the base +18/-0 tasks" in text and "against direct GRPO +0/-0 tasks" in text
    # worse than the base (it loses what the base could do)
    assert _answer(many, few, few).startswith(
        "**No: worse than the base; not significantly better than direct GRPO.**"
    )
    # a small difference is not called a gain
    assert _answer({0}, {0, 1, 2}, {0}).startswith(
        "**No: not significantly better than the base or direct GRPO.**"
    )
    assert _answer(few, many, None).startswith(
        "**Not answered: direct GRPO, the fair baseline, was not measured"
    )
    assert "solves 20/40 (50.0%)" in _answer(few, many, few)
    assert "keeps 100% of the base's test successes" in _answer(few, many, few)
    assert "Training cost: MoE 0 training rollouts, 0 s; direct GRPO 0 training rollouts" in _answer(
        few, many, few
    )


def test_the_routing_section_shows_where_the_moe_parts_from_the_base(tmp_path):
    """``explain.json`` from the evaluation stage becomes a table in the routing section, one row per task."""
    import json

    from trace_train.pipeline.stages.report import gates_section

    (tmp_path / "evaluation").mkdir()
    (tmp_path / "gates").mkdir()
    entries = [
        {
            "seed": 16,
            "change": "lost",
            "turn": 4,
            "token": 16,
            "before": " #W6770198 (reason:",
            "recorded": " ordered",
            "argmax": {"gated": " no", "base": " ordered", "pa": " no", "pr": " ordered"},
            "layer_slots": {"base": 13, "pa": 17, "pr": 0},
        },
        {"seed": 20, "change": "won", "turn": 2},
    ]
    (tmp_path / "evaluation" / "explain.json").write_text(json.dumps(entries))
    ctx = SimpleNamespace(
        upstream={
            "gates": {"artefact": str(tmp_path / "gates"), "names": ["pa", "pr"], "final": {}, "data": {}}
        },
        upstream_dirs={"evaluation": tmp_path / "evaluation"},
    )
    section = gates_section(ctx)
    check_tables([section])
    ((header, rows),) = section.tables
    first = dict(zip(header, rows[0], strict=True))
    assert first["gated writes"] == "' no'" and first["recorded"] == "' ordered'"
    assert first["layers"] == "base 13, pa 17" and first["pr alone"] == "' ordered'"
    assert rows[1][3] == "(no token departs)"
    # its caption is the last paragraph: rendered, it sits right above the table (not after the section's images)
    assert "`trace explain`" in section.paragraphs[-1] and not any(
        "trace explain" in p for p in section.after
    )


def test_the_routing_section_names_where_the_router_sent_the_tasks(tmp_path):
    from trace_train.pipeline.stages.report import gates_section

    (tmp_path / "evaluation").mkdir()
    (tmp_path / "gates").mkdir()
    router = {"method": "router", "episodes": 128, "routes": {"base": 70, "precise-arguments": 58}}
    ctx = SimpleNamespace(
        upstream={
            "gates": {"artefact": str(tmp_path / "gates"), "names": ["pa", "pr"], "final": {}, "data": {}},
            "evaluation": {"rows": [{"method": "base", "episodes": 128}, router]},
        },
        upstream_dirs={"evaluation": tmp_path / "evaluation"},
    )
    (said,) = [p for p in gates_section(ctx).paragraphs if "task-level router" in p]
    assert "128 test tasks to: base 70, precise-arguments 58" in said
    assert "base's own" not in said  # a run from before the router reused the base's episodes
    router["reused_base_episodes"] = 70
    (said,) = [p for p in gates_section(ctx).paragraphs if "task-level router" in p]
    assert "Its 70 episodes on the tasks it gave the base are the base's own" in said
    router.pop("routes")  # a run from before routes were recorded says nothing about them
    assert not [p for p in gates_section(ctx).paragraphs if "task-level router" in p]


def test_direct_grpo_trains_at_the_evaluated_difficulty_on_the_targets_own_reward():
    """The adapters' adaptive curriculum climbs start depths; on the target the levels are task difficulties, so
    direct GRPO stays at the evaluated one, and retail declares no shaped reward, so it trains on success."""
    from trace_train.pipeline.config import config_from_dict
    from trace_train.pipeline.stages.evaluation import _direct_overrides

    cfg = config_from_dict(
        {"target": {"env_id": "trace/retail-v2"}, "adapters": {"curriculum": "adaptive", "reward": "shaped"}}
    )
    assert _direct_overrides(cfg) == {"curriculum": "fixed", "reward": "success"}
    cfg = config_from_dict({"target": {"env_id": "trace/retail-v2"}, "adapters": {"reward": "success"}})
    assert _direct_overrides(cfg) == {"curriculum": "fixed"}


def test_the_curves_section_shows_every_adapter_and_both_direct_rows(tmp_path):
    """Reward, informative share and level per GRPO step, for each adapter and for direct GRPO at equal rollouts
    and at equal compute (read from the runs' own metrics, a resumed run's redone step once)."""
    import json

    from trace_train.pipeline.stages.report import curves_section

    def metrics(path, steps):
        path.mkdir(parents=True)
        lines = [
            {
                "step": i + 1,
                "reward_mean": r,
                "informative_group_share": inf,
                "level_mean": lvl,
                "rollouts_total": 16 * (i + 1),
            }
            for i, (r, inf, lvl) in enumerate(steps)
        ]
        (path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")

    metrics(tmp_path / "06-adapters" / "policy-adherence", [(0.25, 0.5, 1.0), (0.5, 1.0, 1.5)])
    metrics(tmp_path / "08-evaluation" / "direct_grpo", [(0.375, 1.0, None)])
    metrics(tmp_path / "08-evaluation" / "direct_grpo_compute", [(0.125, 0.5, None), (0.25, 0.5, None)])
    adapter = str(tmp_path / "06-adapters" / "policy-adherence" / "adapter")
    ctx = SimpleNamespace(
        upstream={"adapters": {"adapters": {"policy-adherence": {"adapter": adapter}}}},
        upstream_dirs={"evaluation": tmp_path / "08-evaluation"},
    )
    section = curves_section(ctx)
    check_tables([section])
    ((header, rows),) = section.tables
    assert [(r[0], r[1]) for r in rows] == [
        ("adapter:policy-adherence", "1"),
        ("adapter:policy-adherence", "2"),
        ("direct_grpo", "1"),
        ("direct_grpo_compute", "1"),
        ("direct_grpo_compute", "2"),
    ]
    assert rows[1][2:5] == ["0.500", "1.000", "1.500"] and rows[2][4] == "-"
    assert [name for name, _ in section.images] == [
        "curve_reward_mean.png",
        "curve_informative_group_share.png",
        "curve_level_mean.png",
    ]


def test_other_seeds_tables_sit_beside_this_runs(tmp_path):
    """``report.other_runs``: a finished run of another seed contributes a column; a folder that is not a
    finished run is refused with its name."""
    import json

    from trace_train.pipeline.stages.report import seeds_section

    ctx = _ctx(with_direct=True)
    ctx.config.seed, ctx.config.out, ctx.config.report = 0, "runs/demo", SimpleNamespace(other_runs=[])
    assert seeds_section(ctx) is None  # one seed: no section
    other = tmp_path / "demo-seed1"
    (other / "08-evaluation").mkdir(parents=True)
    (other / "run_config.json").write_text(json.dumps({"seed": 1}))
    base, moe = _episodes({0, 1}), _episodes({0, 1, 2, 3, 4, 5})
    rows = [_row("base", base), _row("moe", moe) | {"vs_base": _paired(base, moe)}]
    (other / "08-evaluation" / "table.json").write_text(json.dumps({"rows": rows}))
    ctx.config.report.other_runs = [str(other)]
    section = seeds_section(ctx)
    check_tables([section])
    ((header, lines),) = section.tables
    assert header == ["method", "seed 0", "seed 1", "spread (points)"]
    table = {line[0]: dict(zip(header, line, strict=True)) for line in lines}
    assert table["moe"]["seed 0"].startswith("2/8 (25.0%) [0.00-1.00]; base p ")
    assert "direct_grpo p" in table["moe"]["seed 0"]
    assert table["moe"]["seed 1"].startswith("6/8 (75.0%)") and table["moe"]["spread (points)"] == "50.0"
    assert table["direct_grpo"]["seed 1"] == "-" and table["direct_grpo"]["spread (points)"] == "-"
    ctx.config.report.other_runs = [str(tmp_path / "not-a-run")]
    with pytest.raises(ValueError, match="not-a-run has no run_config.json"):
        seeds_section(ctx)
