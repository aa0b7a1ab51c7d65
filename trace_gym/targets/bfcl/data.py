"""BFCL's multi-turn tasks, read from the installed ``bfcl-eval`` package, and their content split.

Only data files are read here (the task files, the ground truth, the function docs); nothing of bfcl-eval is
imported but its package location, so this module works whatever bfcl-eval's own dependencies are.

Content split: the four categories are variants of one set of 200 base tasks (``multi_turn_miss_param_7`` is
``multi_turn_base_7`` with a parameter withheld, ``..._long_context_7`` the same questions over a larger
state), so a split by task id would put a variant of a test task into train. Tasks are grouped: same number
after the category, or any user message in common (normalised), joins two tasks; whole groups are assigned
to the test split in the order of a salted hash of the group until 20% of all tasks are test.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from trace_gym.core.splits import SALT, TEST_SHARE

BFCL_VERSION = "2026.3.23"  # the bfcl-eval release these ids were built and measured on (tox and CI pin it)
DATA_VERSION = "BFCL_v4"  # file prefix of that release's data
CATEGORIES: tuple[str, ...] = ("base", "miss_func", "miss_param", "long_context")
# The only classes the multi-turn categories use, and their function-doc files.
CLASS_DOCS: dict[str, str] = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
# What BFCL's inference loop says at a turn that brings back held-out functions (its user message is empty);
# bfcl_eval.constants.default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC.
HOLDOUT_PROMPT = "I have updated some more functions you can choose from. What about now?"
MAX_STEPS_PER_TURN = 20  # bfcl_eval.constants.default_prompts.MAXIMUM_STEP_LIMIT: a 21st step force-quits


class BfclNotInstalledError(ImportError):
    """bfcl-eval is missing; it is installed without its dependencies (see docs/bfcl.md)."""


@dataclass(frozen=True)
class BfclTask:
    """One multi-turn entry: its turns of user messages, the ground-truth calls per turn, and its state."""

    id: str
    category: str
    number: int  # the base task it is a variant of
    turns: tuple[tuple[dict[str, str], ...], ...]
    ground_truth: tuple[tuple[str, ...], ...]
    initial_config: dict[str, Any] = field(repr=False)
    involved_classes: tuple[str, ...]
    missed_function: dict[int, tuple[str, ...]]  # turn -> functions held out until that turn
    entry: dict[str, Any] = field(repr=False)  # the raw entry, as BFCL's checker takes it

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category  # as BFCL decides it (from the id's category)

    def abstain_turns(self) -> tuple[int, ...]:
        """Turns whose ground truth is empty: the request cannot be done yet (a function or a parameter is
        missing) and the agent should say so instead of calling."""
        return tuple(i for i, calls in enumerate(self.ground_truth) if not calls)


def package_dir() -> Path:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or spec.origin is None:
        raise BfclNotInstalledError(
            "the BFCL envs need the PyPI package bfcl-eval, installed without its (heavy) dependencies: "
            f"pip install --no-deps bfcl-eval=={BFCL_VERSION}"
        )
    return Path(spec.origin).parent


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@cache
def load_tasks() -> tuple[BfclTask, ...]:
    """All 800 multi-turn tasks, in BFCL's order (category, then number)."""
    data = package_dir() / "data"
    tasks = []
    for category in CATEGORIES:
        name = f"{DATA_VERSION}_multi_turn_{category}.json"
        entries = _read_jsonl(data / name)
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(data / "possible_answer" / name)}
        for entry in entries:
            tasks.append(
                BfclTask(
                    id=entry["id"],
                    category=category,
                    number=int(entry["id"].rsplit("_", 1)[1]),
                    turns=tuple(tuple(dict(m) for m in turn) for turn in entry["question"]),
                    ground_truth=tuple(tuple(turn) for turn in answers[entry["id"]]),
                    initial_config=entry["initial_config"],
                    involved_classes=tuple(entry["involved_classes"]),
                    missed_function={int(k): tuple(v) for k, v in entry.get("missed_function", {}).items()},
                    entry=entry,
                )
            )
    return tuple(tasks)


@cache
def function_docs() -> dict[str, list[dict[str, Any]]]:
    """BFCL's function docs per class (name, description, parameters in BFCL's type names, response)."""
    docs = package_dir() / "data" / "multi_turn_func_doc"
    return {cls: _read_jsonl(docs / file) for cls, file in CLASS_DOCS.items()}


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


@cache
def task_groups() -> dict[str, str]:
    """Task id -> group key (``bfcl-group-<smallest number>``); tasks of one group share content."""
    tasks = load_tasks()
    parent = list(range(len(tasks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        links = [f"number:{task.number}"] + [
            f"text:{normalise(m['content'])}" for turn in task.turns for m in turn if m["content"].strip()
        ]
        for link in links:
            j = first_seen.setdefault(link, i)
            parent[find(i)] = find(j)
    members: dict[int, list[int]] = {}
    for i in range(len(tasks)):
        members.setdefault(find(i), []).append(i)
    groups = {}
    for indexes in members.values():
        key = f"bfcl-group-{min(tasks[i].number for i in indexes)}"
        groups.update({tasks[i].id: key for i in indexes})
    return groups


@cache
def split_ids(test_share: float = TEST_SHARE) -> dict[str, tuple[str, ...]]:
    """Task ids of each split (in a fixed shuffled order): whole groups, by a salted hash, until the test
    split holds ``test_share`` of all tasks."""
    tasks = load_tasks()
    groups = task_groups()
    by_group: dict[str, list[str]] = {}
    for task in tasks:
        by_group.setdefault(groups[task.id], []).append(task.id)
    order = sorted(by_group, key=lambda g: _digest(g))
    test: list[str] = []
    train: list[str] = []
    for group in order:
        (test if len(test) < test_share * len(tasks) else train).extend(by_group[group])
    # A fixed shuffle inside each split, so consecutive seeds visit different categories and classes.
    return {"train": tuple(sorted(train, key=_digest)), "test": tuple(sorted(test, key=_digest))}


def _digest(text: str) -> str:
    return hashlib.sha256(f"{SALT}\x00bfcl\x00{text}".encode()).hexdigest()


@cache
def tasks_by_id() -> dict[str, BfclTask]:
    return {task.id: task for task in load_tasks()}
