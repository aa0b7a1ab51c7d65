"""BFCL's own verdict on a decoded trajectory, for parity tests and for anyone who wants BFCL's word on a run.

A decoded trajectory is BFCL's ``multi_turn_model_result_list_decoded``: per user turn, per step, the call
texts of that step (``"cd(folder='document')"``). :func:`bfcl_verdict` applies what BFCL's evaluation runner
does (``_evaluate_single_multi_turn_entry``: an entry whose turn count differs from the ground truth's is
force-terminated; steps without calls are dropped) and then calls ``multi_turn_checker`` itself, which
executes the calls with ``eval`` on BFCL's instances.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from trace_gym.targets.bfcl.data import BfclTask

_runs = itertools.count()


def bfcl_verdict(task: BfclTask, decoded: list[list[list[str]]]) -> dict[str, Any]:
    """``{"valid": bool, "error_type": ...}`` as BFCL's checker returns it for this trajectory."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(decoded) != len(task.ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated"}
    turns = [
        [step for step in turn if not multi_turn_utils.is_empty_execute_response(step)] for turn in decoded
    ]
    # BFCL keeps each run's instances in its module's globals, keyed by model name and task id: a fresh name
    # per run keeps runs apart, and the instances are dropped afterwards.
    model_name = f"trace_parity_{next(_runs)}"
    try:
        return multi_turn_checker(
            turns,
            [list(calls) for calls in task.ground_truth],
            copy.deepcopy(task.entry),
            task.category,
            model_name,
        )
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model_name + "_")]:
            delattr(multi_turn_utils, key)
