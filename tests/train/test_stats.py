from __future__ import annotations

import pytest

from trace_train.stats import bootstrap_mean_interval, wilson_interval


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
    assert bootstrap_mean_interval([1.0, 1.0]) == (1.0, 1.0)
