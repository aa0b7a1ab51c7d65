from __future__ import annotations

import pytest

from trace_train.stats import (
    bootstrap_mean_interval,
    compare_paired,
    mcnemar_exact,
    paired_bootstrap,
    wilson_interval,
)


def test_wilson_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_bootstrap_interval_contains_mean_and_is_deterministic():
    values = [0.0] * 30 + [1.0] * 10 + [0.5] * 10
    lo, hi = bootstrap_mean_interval(values)
    mean = sum(values) / len(values)
    assert lo < mean < hi and hi - lo < 0.3
    assert bootstrap_mean_interval(values) == (lo, hi)


def test_degenerate_bootstrap_falls_back_to_wilson():
    """Defect 9: the bootstrap interval had zero width at 0/n and n/n."""
    assert bootstrap_mean_interval([0.0] * 20) == pytest.approx(wilson_interval(0, 20))
    lo, hi = bootstrap_mean_interval([1.0] * 20)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.1611, abs=1e-4)
    assert bootstrap_mean_interval([2.0, 2.0]) == (2.0, 2.0)  # outside [0, 1]: no proportion to fall back on


def test_mcnemar_exact_known_values():
    # 2 discordant pairs for A, 5 for B: p = 2 * (1 + 7 + 21) / 2**7
    a = [True] * 10 + [False] * 5
    b = [False] * 2 + [True] * 8 + [True] * 5
    result = mcnemar_exact(a, b)
    assert (result["only_a"], result["only_b"]) == (2, 5)
    assert result["p_value"] == pytest.approx(2 * 29 / 128)
    assert mcnemar_exact([True, False], [True, False])["p_value"] == 1.0
    assert mcnemar_exact([False] * 12, [True] * 12)["p_value"] == pytest.approx(2 / 2**12)
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_exact([True], [True, False])


def test_paired_test_sees_what_overlapping_intervals_miss():
    """Defect 9: the demo compared unpaired intervals. 200 seeds, 0.30 -> 0.37 success where the change is
    consistent (14 seeds gained, none lost): the Wilson intervals overlap, the paired test is significant."""
    before = [{"seed": i, "reward": float(i < 60)} for i in range(200)]
    after = [{"seed": i, "reward": float(i < 74)} for i in range(200)]
    assert wilson_interval(74, 200)[0] < wilson_interval(60, 200)[1]  # the intervals overlap
    cmp = compare_paired(before, after)
    assert (cmp.only_a, cmp.only_b) == (0, 14) and cmp.mcnemar_p < 0.001
    assert cmp.reward_diff == pytest.approx(0.07) and cmp.reward_diff_ci[0] > 0 and cmp.reward_p < 0.01
    assert "exact McNemar" in cmp.line()
    with pytest.raises(ValueError, match="different seeds"):
        compare_paired(before, after[:-1])


def test_paired_bootstrap_no_difference():
    values = [0.0, 0.5, 1.0] * 30
    result = paired_bootstrap(values, values)
    assert result == {"mean_diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}
    noisy = paired_bootstrap(values, values[1:] + values[:1])
    assert noisy["ci_low"] < 0 < noisy["ci_high"] and noisy["p_value"] > 0.5


def test_kept_share_counts_the_base_successes_the_other_also_solves():
    """Issue 30's "do no harm": of the base's 4 successes, the other solves 1 (and gains 2 of its own)."""
    base = [{"seed": i, "reward": float(i in (0, 1, 2, 3))} for i in range(10)]
    other = [{"seed": i, "reward": float(i in (3, 7, 8))} for i in range(10)]
    cmp = compare_paired(base, other)
    assert cmp.kept_share == pytest.approx(1 / 4)
    assert cmp.to_json()["kept_share"] == pytest.approx(0.25)
    assert compare_paired(other, other).kept_share == 1.0
    nothing = [{"seed": i, "reward": 0.0} for i in range(10)]
    assert compare_paired(nothing, other).kept_share is None  # nothing to keep: not 0, not 1
