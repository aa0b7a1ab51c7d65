"""TRACE's contrastive statistics, per labelling run, and the K-of-N selection rule.

For one run and one capability, over the analysed trajectories split into failed (reward < 1) and passed:

* ``Cov  = lacking_failed / failed``: how many failures the capability's absence could explain;
* ``ER-  = lacking_failed / (lacking_failed + present_failed)``: how often it is lacking where it mattered
  in failures;
* ``ER+  = lacking_passed / (lacking_passed + present_passed)``: the same in successes;
* ``Delta = ER- - ER+``.

NA pairs (the capability did not apply) enter no denominator except ``failed``. A capability is kept when
``Cov >= rho`` and ``Delta >= delta`` in at least ``K`` of the ``N`` runs, and ranked by mean Delta.

Empty denominators (documented in docs/analysis.md, tested in tests/analysis/test_aggregate.py):

* no failed trajectory: ``Cov = 0`` and ``ER- = 0`` (there is no failure to explain, nothing is kept);
* failures but the capability applied to none of them: ``ER- = 0`` (then ``Cov = 0`` too);
* no passed trajectory to which the capability applied: ``ER+ = 0``, so ``Delta = ER-``. Without a contrast
  the failure-side error rate is the only evidence; ``Cov`` still has to pass. The count ``n_plus`` in the
  run's values shows when this happened, and the report flags it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import fmean

NA, PRESENT, LACKING = "NA", "PRESENT", "LACKING"
LABELS = (NA, PRESENT, LACKING)

DEFAULT_RHO = 0.10
DEFAULT_DELTA = 0.20
DEFAULT_RUNS = 10
DEFAULT_MIN_RUNS = 8


@dataclass(frozen=True)
class RunStats:
    """One capability in one labelling run: counts and the four statistics."""

    failed: int
    passed: int
    lacking_failed: int
    present_failed: int
    lacking_passed: int
    present_passed: int

    @property
    def cov(self) -> float:
        return self.lacking_failed / self.failed if self.failed else 0.0

    @property
    def n_minus(self) -> int:
        return self.lacking_failed + self.present_failed

    @property
    def n_plus(self) -> int:
        return self.lacking_passed + self.present_passed

    @property
    def na_failed(self) -> int:
        """Failed trajectories where the capability was not needed or not reached."""
        return self.failed - self.lacking_failed - self.present_failed

    @property
    def na_passed(self) -> int:
        return self.passed - self.lacking_passed - self.present_passed

    @property
    def er_minus(self) -> float:
        return self.lacking_failed / self.n_minus if self.n_minus else 0.0

    @property
    def er_plus(self) -> float:
        return self.lacking_passed / self.n_plus if self.n_plus else 0.0

    @property
    def delta(self) -> float:
        return self.er_minus - self.er_plus

    def passes(self, rho: float, delta: float) -> bool:
        # a tiny tolerance: 0.3 - 0.1 is 0.19999999999999998 in floats, and must pass delta=0.2
        return self.cov >= rho - 1e-12 and self.delta >= delta - 1e-12

    def to_json(self) -> dict[str, float | int]:
        out: dict[str, float | int] = asdict(self)
        out.update(cov=self.cov, er_minus=self.er_minus, er_plus=self.er_plus, delta=self.delta)
        out.update(
            n_minus=self.n_minus, n_plus=self.n_plus, na_failed=self.na_failed, na_passed=self.na_passed
        )
        return out


def run_stats(labels: Sequence[str], success: Sequence[bool]) -> RunStats:
    """Counts of one capability's labels (one per trajectory) split by the trajectories' outcome."""
    if len(labels) != len(success):
        raise ValueError(f"{len(labels)} labels for {len(success)} trajectories")
    bad = sorted({label for label in labels if label not in LABELS})
    if bad:
        raise ValueError(f"unknown labels {bad}; expected one of {list(LABELS)}")
    count = {(label, ok): 0 for label in LABELS for ok in (False, True)}
    for label, ok in zip(labels, success, strict=True):
        count[(label, bool(ok))] += 1
    failed = sum(1 for ok in success if not ok)
    return RunStats(
        failed=failed,
        passed=len(success) - failed,
        lacking_failed=count[(LACKING, False)],
        present_failed=count[(PRESENT, False)],
        lacking_passed=count[(LACKING, True)],
        present_passed=count[(PRESENT, True)],
    )


@dataclass
class CapabilityResult:
    """A capability over all runs: per-run statistics, the selection verdict and its rank."""

    name: str
    runs: list[RunStats]
    runs_passing: int
    selected: bool
    rank: int | None = None
    kappa: float | None = None  # Cohen's kappa LLM vs requirement labels, where both labellers ran
    description: str = ""
    examples: list[dict] = field(default_factory=list)

    @property
    def mean_cov(self) -> float:
        return fmean(r.cov for r in self.runs)

    @property
    def mean_er_minus(self) -> float:
        return fmean(r.er_minus for r in self.runs)

    @property
    def mean_er_plus(self) -> float:
        return fmean(r.er_plus for r in self.runs)

    @property
    def mean_delta(self) -> float:
        return fmean(r.delta for r in self.runs)


def select(
    runs: Mapping[str, Sequence[RunStats]],
    rho: float = DEFAULT_RHO,
    delta: float = DEFAULT_DELTA,
    min_runs: int | None = None,
) -> list[CapabilityResult]:
    """Apply the K-of-N rule to every capability; results ranked (selected first) by mean Delta, ties by mean Cov.

    ``runs[name]`` holds one :class:`RunStats` per labelling run (all capabilities have the same N).
    ``min_runs`` (K) defaults to 8 of 10 scaled to N (``ceil(0.8 N)``), so one deterministic run needs 1.
    """
    counts = {len(r) for r in runs.values()}
    if len(counts) > 1:
        raise ValueError(f"capabilities have different numbers of runs: {sorted(counts)}")
    n = counts.pop() if counts else 0
    if n == 0:
        return []
    k = math.ceil(DEFAULT_MIN_RUNS / DEFAULT_RUNS * n) if min_runs is None else min_runs
    if not 1 <= k <= n:
        raise ValueError(f"K (min runs) must be between 1 and the number of runs N={n}, got {k}")
    results = []
    for name, stats in runs.items():
        passing = sum(1 for s in stats if s.passes(rho, delta))
        results.append(CapabilityResult(name, list(stats), passing, passing >= k))
    results.sort(
        key=lambda r: (not r.selected, -r.mean_delta, -r.mean_cov, r.name)
    )  # ties: more failures explained first
    for rank, result in enumerate((r for r in results if r.selected), start=1):
        result.rank = rank
    return results


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa between two labellings of the same items (None when there are no items).

    When both labellers agree on a single label for every item, chance agreement is 1 and kappa is
    undefined; we return 1.0 (perfect agreement) then, and 0.0 if they used one label each but different.
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} vs {len(b)} labels")
    n = len(a)
    if n == 0:
        return None
    observed = sum(1 for x, y in zip(a, b, strict=True) if x == y) / n
    categories = set(a) | set(b)
    expected = sum((a.count(c) / n) * (b.count(c) / n) for c in categories)
    if expected >= 1.0 - 1e-12:
        return 1.0 if observed >= 1.0 - 1e-12 else 0.0
    return (observed - expected) / (1.0 - expected)
