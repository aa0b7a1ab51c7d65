"""Step 1 on scripted weak agents (issue 28): labels name the cause, not the outcome.

Fast versions on 30 train tasks each; the 200-task versions are marked slow (figures in docs/analysis.md,
reproduced by ``benchmarks/bench_weak_agents.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis import weak_agents as w

FAST = 30


def _exactly(row: w.Row, capability: str) -> None:
    assert row.selected == [capability], row.stats
    chosen = row.stats[capability]
    assert chosen["cov"] == 1.0 and chosen["delta"] == 1.0
    assert row.outcomes is not None and row.outcomes["first_failures"] == {
        capability: row.episodes - row.passed
    }


@pytest.mark.parametrize("capability", w.ABLATED)
def test_oracle_minus_x_selects_exactly_x(capability: str, tmp_path: Path) -> None:
    _exactly(w.ablated(capability, FAST, tmp_path), capability)


@pytest.mark.parametrize("k", w.STOPS)
def test_an_agent_that_stops_selects_nothing_and_the_report_says_it_stopped(k: int, tmp_path: Path) -> None:
    row = w.stopped(k, FAST, tmp_path)
    assert set(row.selected) <= {"multi-step-completion"} and not row.selected
    failed = row.episodes - row.passed
    assert failed > 0 and row.outcomes == {
        "failed": failed,
        "outcomes": {"stopped": failed},
        "first_failures": {},
        "unexplained": {"stopped": failed},
    }
    assert all(s["failed"].startswith("0/") for s in row.stats.values())  # LACKING nowhere
    report = (tmp_path / f"stop-{k}-analysis" / "report.md").read_text()
    assert (
        "How the failed episodes ended" in report
        and f"| no first failure | stopped | {failed} | 100.0% |" in report
    )


def test_a_wrong_id_at_the_first_write_selects_precise_arguments_only(tmp_path: Path) -> None:
    row = w.wrong_id(FAST, tmp_path)
    _exactly(row, "precise-arguments")
    report = (tmp_path / "wrong-id-analysis" / "report.md").read_text()
    assert "first failure as the target diagnosed it" in report and "**>> [" in report
    assert "#W0000000" in next(line for line in report.splitlines() if line.startswith("- **>> ["))


@pytest.mark.parametrize("parts", w.MIXTURES, ids=lambda p: "+".join(c for c, _ in p))
def test_a_mixture_of_two_ablations_selects_both_ranked_by_share(parts, tmp_path: Path) -> None:
    row = w.mixture(parts, 40, tmp_path)
    assert row.selected == [c for c, _ in parts], row.stats


@pytest.mark.slow
def test_weak_agents_on_200_tasks(tmp_path: Path) -> None:
    n = 200
    for capability in w.ABLATED:
        _exactly(w.ablated(capability, n, tmp_path), capability)
    for k in w.STOPS:
        row = w.stopped(k, n, tmp_path)
        assert not row.selected and row.outcomes and not row.outcomes["first_failures"]
    _exactly(w.wrong_id(n, tmp_path), "precise-arguments")
    for parts in w.MIXTURES:
        assert w.mixture(parts, n, tmp_path).selected == [c for c, _ in parts]
