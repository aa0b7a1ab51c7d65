"""Parity with BFCL: on every task, trace's reward equals BFCL's own checker's verdict on the ground truth and
on three perturbations of it (a call dropped, an argument changed, a turn skipped)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.bfcl.conftest import play
from tests.bfcl.parity import KINDS, actions, decoded, ground_truth, perturbed
from trace_gym.targets.bfcl.checker import bfcl_verdict
from trace_gym.targets.bfcl.data import CATEGORIES, load_tasks
from trace_gym.targets.bfcl.env import BfclMultiTurnEnv


def parity_table(env: BfclMultiTurnEnv, category: str) -> tuple[Counter, list[str]]:
    """Per trajectory kind: tasks, agreements, BFCL-valid; and the disagreements."""
    table: Counter = Counter()
    disagreements = []
    for split in ("train", "test"):
        for seed, task_id in enumerate(env.split_tasks(split)):
            if not task_id.startswith(f"multi_turn_{category}_"):
                continue
            env.reset(seed=seed, options={"split": split})
            truth = ground_truth(env)
            for kind in KINDS:
                turns = perturbed(truth, kind)
                env.reset(seed=seed, options={"split": split})
                reward, _info, terminated, _ = play(env, actions(turns))
                verdict = bfcl_verdict(env.task, decoded(turns))
                agree = terminated and reward == float(verdict["valid"])
                recorded = env.bfcl_trajectory() == decoded(turns)  # the env records what BFCL would decode
                table[kind, "tasks"] += 1
                table[kind, "agree"] += agree and recorded
                table[kind, "bfcl_valid"] += bool(verdict["valid"])
                if not (agree and recorded):
                    disagreements.append(
                        f"{task_id} {kind}: trace {reward}, bfcl {verdict}, recorded {recorded}"
                    )
    return table, disagreements


@pytest.mark.parametrize("category", CATEGORIES)
def test_reward_equals_bfcl_checker(env, category):
    table, disagreements = parity_table(env, category)
    assert not disagreements, disagreements[:5]
    assert table["ground_truth", "tasks"] == 200
    assert table["ground_truth", "bfcl_valid"] == 200  # BFCL accepts all of its own ground truth
    for kind in KINDS[1:]:  # the perturbations are real: BFCL rejects most of them
        assert table[kind, "bfcl_valid"] < table[kind, "tasks"] / 2, (kind, table)


def test_bfcl_accepts_every_raw_ground_truth():
    """BFCL's checker on its ground-truth texts as they are (positional arguments and all)."""
    rejected = [
        task.id
        for task in load_tasks()
        if not bfcl_verdict(task, [[list(calls)] for calls in task.ground_truth])["valid"]
    ]
    assert rejected == []


def test_a_wrong_trajectory_fails_both(env):
    """The harness is not vacuous: the ground truth with one argument of its last turn changed (cd into a
    folder that does not exist) fails in trace and in BFCL, after the earlier turns passed."""
    from tests.bfcl.conftest import reset_to

    reset_to(env, "multi_turn_base_0")
    turns = perturbed(ground_truth(env), "argument_changed")
    assert turns[-1][0][0] == ("cd", {"folder": ".._changed"})
    reward, info, terminated, _ = play(env, actions(turns))
    assert terminated and reward == 0.0
    assert not bfcl_verdict(env.task, decoded(turns))["valid"]
    components = info["reward_components"]
    assert components["all_turns_finished"] == 1.0 and components["turn_0"] == 1.0
    assert components[f"turn_{len(turns) - 1}"] == 0.0
