"""selected_capabilities.json: the published schema, clear errors on bad files, and the report files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trace_gym.analysis.analyze import AnalyzeArgs, analyze
from trace_gym.analysis.selection import SelectionError, load_selection, schema
from trace_train.base_rollouts import RolloutArgs, SplitRefusedError, rollout

ENV = "trace/retail-v2"


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sel")
    rollout(RolloutArgs(env_id=ENV, model="oracle", out=str(root / "full"), episodes=4))
    rollout(
        RolloutArgs(env_id=ENV, model="oracle", out=str(root / "cut"), episodes=8, seed_offset=4, max_turns=3)
    )
    analyze(AnalyzeArgs(rollouts=[str(root / "full"), str(root / "cut")], out=str(root / "an")))
    return root


def test_the_output_validates_and_bad_files_are_named(analysed: Path, tmp_path: Path) -> None:
    document = load_selection(analysed / "an" / "selected_capabilities.json")
    assert schema()["properties"]["schema_version"] == {"const": 1}
    assert document["target"] == {
        **document["target"],
        "episodes": 12,
        "passed": 4,
        "failed": 8,
        "split": "train",
    }
    assert document["thresholds"] == {"rho": 0.1, "delta": 0.2, "k": 1, "n": 1}
    assert [c["rank"] for c in document["capabilities"] if c["selected"]] == list(
        range(1, len(document["selected"]) + 1)
    )
    assert all(c["description"] for c in document["capabilities"])
    broken = dict(document, selected=["no-such-capability"])
    (tmp_path / "a.json").write_text(json.dumps(broken))
    with pytest.raises(SelectionError, match="not among the analysed capabilities"):
        load_selection(tmp_path / "a.json")
    bad_rank = json.loads(json.dumps(document))
    bad_rank["capabilities"][0]["mean_cov"] = 1.5
    (tmp_path / "b.json").write_text(json.dumps(bad_rank))
    with pytest.raises(
        SelectionError, match=r"at capabilities/0/mean_cov: 1.5 is greater than the maximum of 1"
    ):
        load_selection(tmp_path / "b.json")
    (tmp_path / "c.json").write_text("{")
    with pytest.raises(SelectionError, match="is not JSON"):
        load_selection(tmp_path / "c.json")


def test_report_is_self_contained_and_shows_examples(analysed: Path) -> None:
    html = (analysed / "an" / "report.html").read_text()
    assert 'src="data:image/png;base64,' in html
    assert not re.search(r'(src|href)="(?!data:)', html)  # nothing to fetch: one file is the whole report
    md = (analysed / "an" / "report.md").read_text()
    document = load_selection(analysed / "an" / "selected_capabilities.json")
    for name in document["selected"]:
        assert f"### {name}" in md
        assert html.count('class="wrong"') >= 1
    assert "| capability | Cov | ER- | ER+ | Delta | runs passing | selected |" in md


def test_analyze_refuses_test_split_lines_and_repeated_seeds(analysed: Path, tmp_path: Path) -> None:
    lines = (analysed / "full" / "trajectories.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["split"] = "test"
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(SplitRefusedError, match="never looks at test-split tasks"):
        analyze(AnalyzeArgs(rollouts=[str(tmp_path / "t.jsonl")], out=str(tmp_path / "o")))
    with pytest.raises(ValueError, match=r"repeats seed \d+ of trace/retail-v2"):
        analyze(
            AnalyzeArgs(rollouts=[str(analysed / "full"), str(analysed / "full")], out=str(tmp_path / "o"))
        )
