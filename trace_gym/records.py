"""Trajectory records: the one schema, the one JSONL writer and the one reader of finished episodes.

Every command that writes episodes (``trace rollout``, ``trace evaluate``, calibration, gate data) writes this
record, one JSON object per line, and every command that reads them (``trace analyze``, ``trace export``, the
pipeline, evaluation's resume) reads them here, under one validity rule:

* a line is valid when it is a JSON object that matches :data:`RECORD_SCHEMA` (``seed``, ``split``, ``reward``,
  ``success`` and ``messages`` at least);
* a last line without its newline is a write cut by a kill: it is ignored, and cut off the file when the reader
  is asked to ``repair`` it (so appending continues cleanly);
* any other bad line is an error that names the file and line: nothing is dropped silently.

The writer appends whole lines, flushed and fsynced, so a killed run keeps every finished episode; a file is
rewritten (evaluation's resume keeps what it holds) through a temporary file and an atomic rename.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

TRAJECTORIES = "trajectories.jsonl"

RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["seed", "split", "reward", "success", "messages"],
    "properties": {
        "env_id": {"type": "string"},
        "seed": {"type": "integer"},
        "split": {"enum": ["train", "test"]},
        "model": {"type": ["string", "null"]},
        "reward": {"type": "number"},
        "success": {"type": "boolean"},
        "reward_components": {"type": ["object", "null"]},
        "requirements": {"type": ["object", "null"]},
        # step 1's cause of a failure (issue 28), where the env reports it: the earliest decision point where
        # the agent deviated, and how the episode ended (success, failed, out_of_turns, stopped, ...)
        "first_failure": {
            "type": ["object", "null"],
            "required": ["capability", "turn"],
            "properties": {
                "capability": {"type": "string"},
                "turn": {"type": "integer", "minimum": 0},
                "evidence": {"type": "string"},
            },
        },
        "outcome": {"type": ["string", "null"]},
        "turns": {"type": "integer", "minimum": 0},
        "terminated": {"type": "boolean"},
        "truncated": {"type": "boolean"},
        "invalid_actions": {"type": "integer", "minimum": 0},
        "messages": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "group": {"type": "integer"},
        "hint": {"type": "boolean"},
        "difficulty": {"type": ["integer", "null"]},
        "generated_tokens": {"type": "integer", "minimum": 0},
        "actions": {"type": "array"},
        "timing": {"type": "object"},
        "run": {"type": "object"},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(RECORD_SCHEMA)


class RecordError(ValueError):
    """A trajectory file or record that breaks the schema; the message names the file, line and field."""


def trajectory_record(
    *,
    seed: int,
    split: str,
    reward: float,
    messages: list[dict[str, Any]],
    info: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A record in the schema: ``success`` from the reward, the verifier's components and requirement labels
    from the env's final ``info``; ``fields`` adds the rest (env_id, model, turns, tools, ...)."""
    info = info or {}
    record: dict[str, Any] = {
        "seed": int(seed),
        "split": split,
        "reward": float(reward),
        "success": float(reward) >= 1.0,
        "reward_components": info.get("reward_components"),
        "requirements": info.get("requirements"),
        "messages": messages,
    }
    for key in ("first_failure", "outcome"):  # only envs that diagnose report them
        if key in info:
            record[key] = info[key]
    record.update(fields)
    return record


def problem(record: Any) -> str | None:
    """Why ``record`` is not a trajectory record (the first schema error), or None when it is one."""
    error = next(iter(_VALIDATOR.iter_errors(record)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the record"
    return f"{where}: {error.message}"


def milestone_pass(records: Iterable[dict[str, Any]], capability: str) -> tuple[int, int]:
    """A capability's milestone pass rate as ``(passed, reached)``: among the episodes whose requirement label
    for ``capability`` says the episode reached its decision (``PRESENT`` or ``LACKING``; ``NA`` = never got
    there), how many show it ``PRESENT``. Success says whether a task was solved; this says whether the
    capability was exercised right where it was needed, whatever happened elsewhere in the episode."""
    labels = [(r.get("requirements") or {}).get(capability, "NA") for r in records]
    reached = [label for label in labels if label in ("PRESENT", "LACKING")]
    return sum(label == "PRESENT" for label in reached), len(reached)


def trajectory_file(path: str | os.PathLike) -> Path:
    """The JSONL file a path names: a directory means its ``trajectories.jsonl``."""
    path = Path(path)
    return path / TRAJECTORIES if path.is_dir() else path


def read_records(
    path: str | os.PathLike, *, repair: bool = False, missing_ok: bool = True
) -> list[dict[str, Any]]:
    """Every complete record of a trajectory file (see the module doc for the validity rule), each with its
    line number under ``_line``. A missing file is empty unless ``missing_ok`` is False."""
    path = trajectory_file(path)
    if not path.is_file():
        if missing_ok:
            return []
        raise FileNotFoundError(f"no trajectory file at {path}")
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data) and repair:
        with path.open("r+b") as f:
            f.truncate(complete)
    records = []
    for number, line in enumerate(data[:complete].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise RecordError(f"{path}:{number} is not a JSON line ({err})") from None
        why = problem(record)
        if why is not None:
            raise RecordError(f"{path}:{number} is not a trajectory record ({why})")
        record["_line"] = number
        records.append(record)
    return records


def _line(record: dict[str, Any]) -> str:
    why = problem(record)
    if why is not None:
        raise RecordError(f"refusing to write a record that breaks the schema ({why})")
    clean = {k: v for k, v in record.items() if not k.startswith("_")}  # reader annotations stay out
    return json.dumps(clean, ensure_ascii=False, default=str) + "\n"


class RecordWriter:
    """Appends records to a trajectory file, one whole line each, flushed and fsynced."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(_line(record))
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_records(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> None:
    """Replace a trajectory file by ``records`` atomically: a reader sees the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(_line(record))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
