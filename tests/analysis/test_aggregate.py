"""TRACE's statistics on hand-computed cases, empty denominators, the K-of-N rule and Cohen's kappa."""

from __future__ import annotations

import pytest

from trace_gym.analysis.aggregate import RunStats, cohen_kappa, run_stats, select

L, P, N = "LACKING", "PRESENT", "NA"


def test_hand_computed_run() -> None:
    # 6 failed: L L L P N N ; 4 passed: L P P P
    labels = [L, L, L, P, N, N, L, P, P, P]
    success = [False] * 6 + [True] * 4
    s = run_stats(labels, success)
    assert (s.failed, s.passed) == (6, 4)
    assert (s.lacking_failed, s.present_failed, s.lacking_passed, s.present_passed) == (3, 1, 1, 3)
    assert s.cov == pytest.approx(3 / 6)  # NA failures still count in Cov's denominator
    assert s.er_minus == pytest.approx(3 / 4)
    assert s.er_plus == pytest.approx(1 / 4)
    assert s.delta == pytest.approx(0.5)
    assert s.passes(0.10, 0.20) and not s.passes(0.6, 0.2) and not s.passes(0.1, 0.6)


def test_empty_denominators() -> None:
    only_passed = run_stats([L, P], [True, True])  # no failures: nothing to explain
    assert (only_passed.cov, only_passed.er_minus, only_passed.er_plus) == (0.0, 0.0, 0.5)
    assert only_passed.delta == pytest.approx(-0.5)
    never_needed_in_failures = run_stats([N, N, P], [False, False, True])
    assert (never_needed_in_failures.cov, never_needed_in_failures.er_minus) == (0.0, 0.0)
    no_contrast = run_stats([L, L, P, N], [False, False, False, True])  # no passed episode needed it
    assert no_contrast.n_plus == 0 and no_contrast.er_plus == 0.0
    assert no_contrast.delta == pytest.approx(2 / 3) == no_contrast.er_minus
    assert run_stats([], []).cov == 0.0
    with pytest.raises(ValueError, match="unknown labels"):
        run_stats(["MISSING"], [False])
    with pytest.raises(ValueError, match="2 labels for 1"):
        run_stats([L, L], [False])


def test_threshold_boundaries_are_inclusive() -> None:
    # Cov exactly 0.1 and Delta exactly 0.2 (which is 0.19999999999999998 in floats) pass
    s = RunStats(
        failed=10, passed=10, lacking_failed=1, present_failed=2, lacking_passed=2, present_passed=13
    )
    assert s.cov == pytest.approx(0.1)
    assert s.delta == pytest.approx(1 / 3 - 2 / 15)
    exact = RunStats(
        failed=10, passed=10, lacking_failed=3, present_failed=7, lacking_passed=1, present_passed=9
    )
    assert exact.delta != 0.2 and exact.delta == pytest.approx(0.2)
    assert exact.passes(0.3, 0.2)


def _run(cov_lf: int, failed: int, pf: int, lp: int, pp: int, passed: int = 10) -> RunStats:
    return RunStats(failed, passed, cov_lf, pf, lp, pp)


def test_k_of_n_and_ranking() -> None:
    good = _run(5, 10, 0, 0, 10)  # Cov 0.5, Delta 1.0
    weak = _run(5, 10, 5, 2, 8)  # Cov 0.5, Delta 0.5 - 0.2 = 0.3
    bad = _run(0, 10, 10, 0, 10)  # Cov 0
    runs = {
        "always": [good] * 10,
        "eight": [weak] * 8 + [bad] * 2,
        "seven": [good] * 7 + [bad] * 3,
        "never": [bad] * 10,
    }
    results = select(runs)
    by_name = {r.name: r for r in results}
    assert [r.name for r in results if r.selected] == ["always", "eight"]  # ranked by mean Delta
    assert by_name["always"].rank == 1 and by_name["eight"].rank == 2 and by_name["seven"].rank is None
    assert by_name["eight"].runs_passing == 8 and by_name["seven"].runs_passing == 7
    assert by_name["seven"].mean_delta == pytest.approx(0.7)  # higher mean Delta, but only 7 of 10 runs
    assert [r.name for r in select(runs, min_runs=7) if r.selected] == ["always", "seven", "eight"]
    assert [r.name for r in select({"a": [good]}) if r.selected] == ["a"]  # one deterministic run: K = 1
    with pytest.raises(ValueError, match="between 1 and"):
        select(runs, min_runs=11)
    with pytest.raises(ValueError, match="different numbers of runs"):
        select({"a": [good], "b": [good, good]})


def test_cohen_kappa_hand_computed() -> None:
    a = [L, L, P, P, N, N, L, P]
    b = [L, P, P, P, N, L, L, P]
    # observed 6/8; expected: L 3/8*3/8 + P 3/8*4/8 + N 2/8*1/8 = (9 + 12 + 2) / 64
    expected = 23 / 64
    assert cohen_kappa(a, b) == pytest.approx((6 / 8 - expected) / (1 - expected))
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert cohen_kappa([L, L], [L, L]) == 1.0  # one label only: defined as perfect agreement
    assert cohen_kappa([], []) is None
    assert cohen_kappa([L, P], [P, L]) == pytest.approx(-1.0)
