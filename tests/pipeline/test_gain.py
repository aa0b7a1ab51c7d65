"""Where the gain stops: each link's verdict on scripted episodes whose cause is known."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from trace_train.pipeline import gain
from trace_train.pipeline.report import check_tables
from trace_train.pipeline.stages.report import gain_section

CAP, EARLIER, LATER = "precise-arguments", "information-gathering", "policy-adherence"


def _episode(seed: int, *, solved: bool = False, at_cap: str = "NA", first: str | None = None) -> dict:
    """One test episode: ``at_cap`` is the capability's milestone label; ``first`` the first failure's capability."""
    return {
        "seed": seed,
        "success": solved,
        "reward": float(solved),
        "requirements": {CAP: at_cap, EARLIER: "PRESENT" if at_cap != "NA" else "LACKING"},
        "first_failure": {"capability": first, "turn": 1} if first else None,
        "outcome": "success" if solved else "failed",
    }


def _base() -> list[dict]:
    """8 tasks: 2 solved, 4 fail at the capability's decision, 2 fail earlier."""
    return (
        [_episode(i, solved=True, at_cap="PRESENT") for i in range(2)]
        + [_episode(i, at_cap="LACKING", first=CAP) for i in range(2, 6)]
        + [_episode(i, first=EARLIER) for i in range(6, 8)]
    )


def _fixes(seeds: set[int], later: str | None = None, solved: bool = False) -> list[dict]:
    """The base, except that on ``seeds`` the capability is present at its decision (then the task is solved,
    or fails later at ``later``)."""
    out = []
    for e in _base():
        if e["seed"] in seeds:
            e = _episode(e["seed"], solved=solved, at_cap="PRESENT", first=None if solved else later)
        out.append(e)
    return out


def test_a_capability_that_causes_no_base_failure_stops_at_step_1():
    base = [
        _episode(i, solved=i < 2, at_cap="PRESENT" if i < 2 else "NA", first=None if i < 2 else EARLIER)
        for i in range(8)
    ]
    c = gain.chain(CAP, base, alone=_fixes({2}), composed=_fixes({2}), training_rewards=[0.5])
    assert (c.verdict, c.caused, c.base_failures) == ("analysis", 0, 6)


@pytest.mark.parametrize(
    ("rewards", "verdict"), [([0.0, 0.0], "training"), ([None, 0.0], "training"), ([0.0, 0.5], "transfer")]
)
def test_an_adapter_no_better_at_its_decision_stops_at_training_or_transfer(rewards, verdict):
    c = gain.chain(
        CAP, _base(), alone=_base(), composed=_fixes({2, 3}, solved=True), training_rewards=rewards
    )
    assert c.caused == 4
    assert c.verdict == verdict


def test_failing_earlier_is_not_credited_as_passing_the_capability():
    """An adapter that breaks the step before never reaches the decision: it has fewer first failures at the
    capability than the base, and a higher pass rate over the episodes it reached (only the easy ones), and
    must not count as better at it."""
    broken = [
        e if e["seed"] < 2 else _episode(e["seed"], first=EARLIER) for e in _base()
    ]  # tasks 2-5 now fail earlier
    link = gain.Link.measure(_base(), broken, CAP)
    assert (link.first_failures, link.base_first_failures) == (0, 4)
    assert (link.reached, link.base_reached, link.broke_earlier) == (2, 6, 4)
    assert link.passed / link.reached > link.base_passed / link.base_reached  # 2/2 against 2/6
    assert not link.better_at_capability()
    c = gain.chain(CAP, _base(), alone=broken, composed=broken, training_rewards=[0.5])
    assert c.verdict == "transfer"
    assert "broke an earlier step on 4" in c.why


def test_an_adapter_better_alone_but_not_in_the_composition_stops_at_the_gates():
    c = gain.chain(CAP, _base(), alone=_fixes({2, 3}), composed=_base(), training_rewards=[0.5])
    assert c.verdict == "gates"
    assert c.alone.better_at_capability() and not c.composed.better_at_capability()


def test_without_the_adapter_alone_transfer_and_gates_cannot_be_told_apart():
    c = gain.chain(CAP, _base(), alone=None, composed=_base(), training_rewards=[0.5])
    assert c.verdict == "transfer or gates"


def test_passing_the_decision_without_solving_more_tasks_stops_at_later_steps():
    composed = _fixes({2, 3, 4}, later=LATER)
    c = gain.chain(CAP, _base(), alone=composed, composed=composed, training_rewards=[0.5])
    assert c.verdict == "later steps"
    assert (c.composed.passed, c.composed.reached) == (5, 6)
    assert f"{LATER} 3" in c.why  # where the three tasks that passed the decision now fail


def test_a_gain_that_carries_through():
    composed = _fixes({2, 3}, solved=True)
    c = gain.chain(CAP, _base(), alone=composed, composed=composed, training_rewards=[0.5])
    assert c.verdict == "none"
    assert (c.composed.successes, c.composed.base_successes) == (4, 2)


def test_the_adapter_alone_is_compared_on_the_tasks_it_played():
    alone = [e for e in _fixes({2}) if e["seed"] < 4]  # a shorter per-adapter row: tasks 0-3
    link = gain.Link.measure(_base(), alone, CAP)
    assert link.tasks == 4
    assert (link.passed, link.reached, link.base_passed, link.base_reached) == (3, 4, 2, 4)


def test_the_report_section_reads_the_runs_episodes(tmp_path):
    methods = {"base": _base(), f"adapter:{CAP}": _fixes({2, 3}), "moe": _base()}
    rows = []
    for method, episodes in methods.items():
        name = method.replace(":", "-") + ".jsonl"
        (tmp_path / name).write_text(
            "".join(json.dumps(e | {"split": "test", "messages": []}) + "\n" for e in episodes)
        )
        rows.append({"method": method, "trajectories": name})
    ctx = SimpleNamespace(
        upstream={
            "evaluation": {"rows": rows},
            "adapters": {
                "adapters": {
                    CAP: {"adapter": str(tmp_path / "none" / "adapter"), "reward_curve": [0.0, 0.25]}
                }
            },
        },
        upstream_dirs={"evaluation": tmp_path},
    )
    section = gain_section(ctx)
    check_tables([section])
    ((header, (row,)),) = section.tables
    cells = dict(zip(header, row, strict=True))
    assert cells["the gain stops at"] == "step 4's gates"
    assert cells["adapter alone: passed/reached"] == "4/6 (base 2/6)"
    assert cells["base failures first failing here"] == "4/6"
    assert cells["adapter's training reward per step"] == "0.00, 0.25"
    assert any(f"{CAP} 4, {EARLIER} 2" in line for line in section.after)


def test_passing_a_decision_the_base_never_reached_is_credited_to_the_earlier_step():
    """Task 6 failed earlier for the base; the method gets past that step and passes this decision. That is a
    gain at the earlier step: on the tasks both reached, the method is no better at this capability."""
    further = [_episode(6, at_cap="PRESENT", first=LATER) if e["seed"] == 6 else e for e in _base()]
    link = gain.Link.measure(_base(), further, CAP)
    assert (link.passed, link.base_passed, link.both_reached) == (3, 2, 6)
    assert not link.better_at_capability()
