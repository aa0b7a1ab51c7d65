"""Which capabilities the pipeline trains: the selected ones, then (smoke tests only) forced ones."""

from __future__ import annotations

from trace_train.pipeline.stages.analysis import choose


def cap(name: str, selected: bool = False, delta: float = 0.0, cov: float = 0.0) -> dict:
    return {"name": name, "selected": selected, "mean_delta": delta, "mean_cov": cov}


def test_selected_capabilities_come_first_best_delta_first():
    selection = {
        "capabilities": [cap("a", True, 0.3, 0.5), cap("b", True, 0.9, 0.2), cap("c", False, 1.0, 0.9)]
    }
    assert [c["name"] for c in choose(selection, max_capabilities=2, force_top_k=0)] == ["b", "a"]


def test_forcing_takes_capabilities_with_coverage_and_never_invents_evidence():
    selection = {"capabilities": [cap("a", cov=0.0, delta=0.5), cap("b", cov=0.4, delta=0.1)]}
    chosen = choose(selection, max_capabilities=2, force_top_k=2)
    assert [(c["name"], c["forced"]) for c in chosen] == [("b", True)]  # "a" has no coverage


def test_force_order_names_what_a_smoke_test_trains_when_nothing_has_coverage():
    """A random model reaches no decision point: every label is NA and no capability has coverage."""
    selection = {"capabilities": [cap("error-recovery"), cap("precondition-checking")]}
    assert choose(selection, max_capabilities=1, force_top_k=1) == []
    chosen = choose(selection, max_capabilities=1, force_top_k=1, force_order=["precondition-checking"])
    assert [(c["name"], c["forced"]) for c in chosen] == [("precondition-checking", True)]
