"""Where the gain stops: the chain from step 1's choice to the final success, per selected capability.

TRACE improves the target only if every link holds: the capability causes some of the base's failures (step 1),
its adapter learns it (step 3), what it learned carries over to the target (transfer), the composition uses it
where the target needs it (step 4), and passing that decision then turns into solved tasks. Each link is
measured on the run's own test episodes, against the base on the same tasks, with the env's labels:

* a task's **first failure** (``first_failure.capability``): the earliest decision the agent got wrong;
* a capability's **milestone** (``requirements[c]``): ``PRESENT``/``LACKING`` where the episode reached the
  capability's decision, ``NA`` where it never got there. A method is better at the capability when, on the tasks
  where both it and the base reached the decision, it passes more of them. Not fewer first failures there (a
  method that breaks an earlier step has fewer, for the wrong reason) and not a pass rate over each one's own
  reached episodes (a method that reaches only the easy tasks has a higher one): ``broke_earlier`` counts the
  tasks where the base reached the decision and the method did not.

The verdict names the first link that does not hold. Counts, not tests: at these sizes a difference of a task or
two is noise, and the report prints every count the verdict is read from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trace_gym.records import milestone_pass

Record = dict[str, Any]

# the links in pipeline order; a verdict is the first that does not hold
VERDICTS = {
    "analysis": "step 1's choice",
    "training": "step 3's training",
    "transfer": "transfer to the target",
    "transfer or gates": "transfer or the gates (the adapter alone was not evaluated)",
    "gates": "step 4's gates",
    "later steps": "later steps of the task",
    "not measured": "not measured",
    "none": "none: the gain carries through",
}


def _label(record: Record, capability: str) -> str:
    return (record.get("requirements") or {}).get(capability, "NA")


def first_cause(record: Record) -> str:
    """A failed episode's first cause: the capability of its first failure, else how it ended."""
    failure = record.get("first_failure")
    if failure:
        return failure["capability"]
    return f"no deviation ({record.get('outcome') or 'unlabelled'})"


@dataclass
class Link:
    """A method against the base on the same tasks, at one capability."""

    tasks: int
    base_reached: int
    base_passed: int
    reached: int
    passed: int
    base_first_failures: int  # tasks whose first failure is at this capability
    first_failures: int
    base_successes: int
    successes: int
    broke_earlier: int  # the base reached the decision, the method did not
    both_reached: int  # tasks where both reached the decision
    both_base_passed: int  # of those, passed by the base
    both_passed: int  # and by the method

    @staticmethod
    def measure(base: Sequence[Record], method: Sequence[Record], capability: str) -> Link:
        by_seed = {r["seed"]: r for r in base}
        pairs = [(by_seed[r["seed"]], r) for r in method if r["seed"] in by_seed]

        def reached(r: Record) -> bool:
            return _label(r, capability) in ("PRESENT", "LACKING")

        def first_at(r: Record) -> bool:
            return (r.get("first_failure") or {}).get("capability") == capability

        both = [(b, m) for b, m in pairs if reached(b) and reached(m)]
        base_passed, base_reached = milestone_pass((b for b, _ in pairs), capability)
        passed, reached_n = milestone_pass((m for _, m in pairs), capability)
        both_base_passed, both_reached = milestone_pass((b for b, _ in both), capability)
        both_passed, _ = milestone_pass((m for _, m in both), capability)
        return Link(
            tasks=len(pairs),
            base_reached=base_reached,
            base_passed=base_passed,
            reached=reached_n,
            passed=passed,
            base_first_failures=sum(first_at(b) for b, _ in pairs),
            first_failures=sum(first_at(m) for _, m in pairs),
            base_successes=sum(bool(b.get("success")) for b, _ in pairs),
            successes=sum(bool(m.get("success")) for _, m in pairs),
            broke_earlier=sum(reached(b) and not reached(m) for b, m in pairs),
            both_reached=both_reached,
            both_base_passed=both_base_passed,
            both_passed=both_passed,
        )

    def better_at_capability(self) -> bool:
        """Passes the decision on more of the tasks where both it and the base reached it."""
        return self.both_passed > self.both_base_passed

    def describe(self) -> str:
        return (
            f"passed {self.both_passed} vs the base's {self.both_base_passed} of the {self.both_reached} tasks both "
            f"reached the decision (passed/reached {self.passed}/{self.reached} vs {self.base_passed}/{self.base_reached}), "
            f"first failures here {self.first_failures} vs {self.base_first_failures}, solved "
            f"{self.successes} vs {self.base_successes} of {self.tasks} tasks"
            + (f", broke an earlier step on {self.broke_earlier}" if self.broke_earlier else "")
        )


@dataclass
class Chain:
    capability: str
    base_failures: int
    caused: int  # of the base's failed tasks, those whose first failure is at this capability
    training_rewards: list[float | None]
    alone: Link | None  # the adapter alone, on the tasks it played
    composed: Link | None  # the composition (MoE, else router), on every test task
    verdict: str
    why: str


def chain(
    capability: str,
    base: Sequence[Record],
    alone: Sequence[Record] | None,
    composed: Sequence[Record] | None,
    training_rewards: Sequence[float | None] = (),
) -> Chain:
    """The links for one capability and the first that does not hold."""
    failed = [r for r in base if not r.get("success")]
    caused = sum(first_cause(r) == capability for r in failed)
    rewards = list(training_rewards)
    alone_link = Link.measure(base, alone, capability) if alone is not None else None
    composed_link = Link.measure(base, composed, capability) if composed is not None else None

    def result(verdict: str, why: str) -> Chain:
        return Chain(capability, len(failed), caused, rewards, alone_link, composed_link, verdict, why)

    if caused == 0:
        return result(
            "analysis", f"none of the base's {len(failed)} failed test tasks first fails at {capability}"
        )
    if alone_link is not None and not alone_link.better_at_capability():
        if not any(r for r in rewards if r):
            shown = ", ".join("-" if r is None else f"{r:.2f}" for r in rewards) or "none recorded"
            return result(
                "training",
                f"its adapter never scored on its own env during GRPO (mean reward per step: {shown}); alone on "
                f"the target: {alone_link.describe()}",
            )
        return result(
            "transfer", f"the adapter alone is not better at it on the target: {alone_link.describe()}"
        )
    if composed_link is None:
        return result("not measured", "the composition was not evaluated")
    if not composed_link.better_at_capability():
        if alone_link is None:
            return result(
                "transfer or gates", f"the composition is not better at it: {composed_link.describe()}"
            )
        return result(
            "gates",
            f"the adapter alone is better at it ({alone_link.describe()}), the composition is not: "
            f"{composed_link.describe()}",
        )
    if composed_link.successes <= composed_link.base_successes:
        return result(
            "later steps",
            f"the composition is better at it ({composed_link.describe()}) yet solves no more tasks; where its "
            f"failures that passed this decision now first fail: {later_causes(composed, capability)}",
        )
    return result("none", composed_link.describe())


def later_causes(records: Sequence[Record] | None, capability: str) -> str:
    """The first causes of the failed episodes that passed ``capability``'s decision, most common first."""
    counts = Counter(
        first_cause(r) for r in records or () if not r.get("success") and _label(r, capability) == "PRESENT"
    )
    return ", ".join(f"{cause} {n}" for cause, n in counts.most_common()) or "none"


def failure_causes(records: Sequence[Record]) -> Counter[str]:
    """The base's failed episodes by first cause."""
    return Counter(first_cause(r) for r in records if not r.get("success"))
