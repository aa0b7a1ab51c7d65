"""Confidence intervals and paired tests for evaluation summaries.

Before/after and model-vs-model comparisons run on the *same* test seeds, so they are paired: the exact
McNemar test for success (only seeds where the two disagree carry information) and a paired bootstrap of the
mean reward difference. Checking whether two unpaired intervals overlap throws that pairing away and is
underpowered; don't.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sane at 0 and n, unlike the normal approx)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_mean_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = 5000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (rewards in [0, 1] are bounded and often bimodal).

    Where the bootstrap degenerates (one value, or all values equal: every resample has the same mean, e.g.
    0/n or n/n solved) and the values lie in [0, 1], the Wilson interval of the mean as a proportion is
    returned instead: a [0, 1] variable has at most a Bernoulli's variance for its mean, so the interval is
    not narrower than it should be (the bootstrap's would have zero width).
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    if len(x) == 1 or np.all(x == x[0]):
        if np.all((x >= 0) & (x <= 1)):
            z = _normal_quantile(1 - (1 - level) / 2)
            return wilson_interval(round(float(x.sum())), len(x), z)
        return (float(x.mean()), float(x.mean()))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def _normal_quantile(q: float) -> float:
    """Standard normal quantile by bisection on erf (no scipy): 0.975 -> 1.959964."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mcnemar_exact(a_success: Sequence[bool], b_success: Sequence[bool]) -> dict[str, float]:
    """Exact (binomial) McNemar test of paired successes: two-sided p-value over the discordant pairs.

    ``only_a``: seeds A solved and B did not; ``only_b`` the reverse. Under H0 each discordant pair is a fair
    coin, so p = P(Binomial(only_a + only_b, 1/2) as extreme as observed), two-sided.
    """
    if len(a_success) != len(b_success):
        raise ValueError(f"paired samples differ in length: {len(a_success)} vs {len(b_success)}")
    only_a = sum(1 for a, b in zip(a_success, b_success, strict=True) if a and not b)
    only_b = sum(1 for a, b in zip(a_success, b_success, strict=True) if b and not a)
    n = only_a + only_b
    # Binomial(n, 1/2) is symmetric: two-sided p = twice the smaller tail, exact in integer arithmetic
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1))
    p = 1.0 if n == 0 else min(1.0, 2 * tail / 2**n)
    return {"only_a": only_a, "only_b": only_b, "discordant": n, "p_value": p}


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> dict[str, float]:
    """Mean of b - a over paired values, its percentile bootstrap interval (resampling pairs), and a
    two-sided bootstrap p-value for a zero difference (twice the smaller tail share, at most 1)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {len(x)} vs {len(y)}")
    if len(x) == 0:
        raise ValueError("no pairs to compare")
    d = y - x
    if np.all(d == d[0]):  # every resample gives the same mean: no spread to estimate
        return {
            "mean_diff": float(d[0]),
            "ci_low": float(d[0]),
            "ci_high": float(d[0]),
            "p_value": 1.0 if d[0] == 0 else 0.0,
        }
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    return {"mean_diff": float(d.mean()), "ci_low": float(lo), "ci_high": float(hi), "p_value": p}


@dataclass(frozen=True)
class PairedComparison:
    """B against A on the same seeds: success (exact McNemar) and mean reward (paired bootstrap)."""

    n: int
    success_a: float
    success_b: float
    only_a: int
    only_b: int
    mcnemar_p: float
    reward_a: float
    reward_b: float
    reward_diff: float
    reward_diff_ci: tuple[float, float]
    reward_p: float
    kept_share: float | None = None  # of A's successes, the share B also solves (None: A solved nothing)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self, alpha: float = 0.05) -> str:
        verdict = "significant" if self.mcnemar_p < alpha else "not significant"
        return (
            f"paired on {self.n} seeds: success {self.success_a:.3f} -> {self.success_b:.3f} "
            f"(solved only before {self.only_a}, only after {self.only_b}; exact McNemar p={self.mcnemar_p:.3g}, "
            f"{verdict} at {alpha}); mean reward {self.reward_diff:+.3f} "
            f"(95% paired bootstrap CI {self.reward_diff_ci[0]:+.3f}..{self.reward_diff_ci[1]:+.3f}, p={self.reward_p:.3g})"
        )


def compare_paired(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> PairedComparison:
    """Pair two evaluations' episode records by ``seed`` (both must cover the same seeds) and test B vs A."""
    by_a = {r["seed"]: r for r in a}
    by_b = {r["seed"]: r for r in b}
    if len(by_a) != len(a) or len(by_b) != len(b):
        raise ValueError("an evaluation repeats a seed: records cannot be paired")
    if set(by_a) != set(by_b):
        missing = sorted(set(by_a) ^ set(by_b))[:5]
        raise ValueError(f"the evaluations cover different seeds (e.g. {missing}): use the same seeds")
    seeds = sorted(by_a)
    ra = [float(by_a[s]["reward"]) for s in seeds]
    rb = [float(by_b[s]["reward"]) for s in seeds]
    sa = [bool(by_a[s].get("success", by_a[s]["reward"] >= 1.0)) for s in seeds]
    sb = [bool(by_b[s].get("success", by_b[s]["reward"] >= 1.0)) for s in seeds]
    mc = mcnemar_exact(sa, sb)
    pb = paired_bootstrap(ra, rb)
    n = len(seeds)
    return PairedComparison(
        n=n,
        success_a=sum(sa) / n,
        success_b=sum(sb) / n,
        only_a=int(mc["only_a"]),
        only_b=int(mc["only_b"]),
        mcnemar_p=mc["p_value"],
        reward_a=sum(ra) / n,
        reward_b=sum(rb) / n,
        reward_diff=pb["mean_diff"],
        reward_diff_ci=(pb["ci_low"], pb["ci_high"]),
        reward_p=pb["p_value"],
        kept_share=(sum(sa) - int(mc["only_a"])) / sum(sa) if any(sa) else None,
    )
