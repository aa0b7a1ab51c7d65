"""The stage runner: skip what is finished, redo what changed, resume what was interrupted.

Each stage owns ``<out>/<NN>-<name>/`` holding ``config.json`` (the config sections it read and the output
hashes of the stages it reads from), ``stage.json`` (status, input hash, output hash, wall time, peak memory,
result) and its outputs. The *input hash* is the SHA-256 of that config; the *output hash* covers the stage's
files and result. A stage's input hash includes its upstream output hashes, so a changed stage invalidates
exactly the stages that read from it, transitively.

On ``run``, per stage in order:
* ``done`` with the same input hash: skipped;
* ``running`` (interrupted, or stopped by a generation server's failure) with the same input hash: run again
  with ``resume=True`` in the same folder (rollouts keep finished episodes, GRPO continues from its last
  checkpoint);
* otherwise (new, changed inputs, failed, or forced with ``--from``): the folder is emptied and the stage runs.

A different input hash over the same inputs counts as the same (:func:`same_inputs_as_recorded`): a recorded
config that lacks settings a code update added at their defaults, or differs only in how often it saves.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_train.metrics import cpu_name, peak_rss_mb, release_memory, reset_peak_rss
from trace_train.pipeline.config import RunConfig
from trace_train.pipeline.progress import Reporter
from trace_train.roofline import LEDGER, account

STATE_FILE, CONFIG_FILE = "stage.json", "config.json"
# Settings that change how often a stage saves or how it reports, never its result: changing one alone keeps a
# stage's inputs the same.
OPERATIONAL_KEYS = frozenset({"save_every", "progress", "tensorboard"})
# Outputs that do not identify a stage's result: checkpoints and logs written on the way.
UNHASHED_DIRS = {"checkpoints", "tensorboard", "__pycache__"}


class StageError(RuntimeError):
    """A stage failed; the message says which and why (the stage's folder keeps what it wrote)."""


@dataclass
class StageContext:
    """What a stage function gets: its folder, the config, upstream results, and resume/progress helpers."""

    name: str
    dir: Path
    config: RunConfig
    upstream: dict[str, dict[str, Any]]  # stage name -> its result
    upstream_dirs: dict[str, Path]
    resume: bool
    reporter: Reporter
    run_dir: Path

    def log(self, text: str) -> None:
        self.reporter.line(f"[{self.name}] {text}")

    def bar(self, label: str, total: int) -> contextlib.AbstractContextManager[Any]:
        return self.reporter.bar(f"{self.name}: {label}" if label else self.name, total)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[StageContext], dict[str, Any]]
    sections: tuple[str, ...]  # config sections (top-level keys) the stage reads
    needs: tuple[str, ...] = ()  # stages whose results or files it reads
    # bump when the stage's code changes what it produces (a new knob whose default does not reproduce the old
    # behaviour included: a record without the knob is otherwise taken as made at its default)
    version: int = 1
    doc: str = ""


@dataclass
class StageRecord:
    name: str
    action: str  # ran, resumed, skipped, failed
    wall_s: float
    peak_rss_mb: float
    result: dict[str, Any] = field(default_factory=dict)


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def same_inputs_as_recorded(recorded: Any, now: Any, defaults: Any) -> bool:
    """Whether a stage's recorded config (its ``config.json``) and today's describe the same inputs although
    their hashes differ: equal once :data:`OPERATIONAL_KEYS` are left out, and every setting the record lacks
    holds its default today (a knob a code update added, which the finished work did not see as anything but
    that default). ``defaults`` is today's config of the stage with every setting at its default; a setting
    the record has and today's config lacks (a removed knob) makes them differ."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        defaults = defaults if isinstance(defaults, dict) else {}
        for key in recorded.keys() | now.keys():
            if key in OPERATIONAL_KEYS:
                continue
            if key not in recorded:
                if key not in defaults or now[key] != defaults[key]:
                    return False
            elif key not in now or not same_inputs_as_recorded(recorded[key], now[key], defaults.get(key)):
                return False
        return True
    return recorded == now


def hash_outputs(directory: Path, result: dict[str, Any]) -> str:
    """SHA-256 over every output file (path + bytes) and the result, skipping state and scratch."""
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory)
        if rel.parts[0] in (STATE_FILE, CONFIG_FILE) or UNHASHED_DIRS & set(rel.parts):
            continue
        h.update(str(rel).encode())
        with path.open("rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(chunk)
    h.update(canonical(result).encode())
    return h.hexdigest()


class Pipeline:
    def __init__(self, stages: Sequence[Stage], config: RunConfig, reporter: Reporter | None = None):
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate stage names in {names}")
        for i, s in enumerate(stages):
            missing = [n for n in s.needs if n not in names[:i]]
            if missing:
                raise ValueError(f"stage {s.name} needs {missing}, which do not run before it")
        self.stages = list(stages)
        self.config = config
        self.out = Path(config.out)
        self.reporter = reporter or Reporter()

    def stage_dir(self, stage: Stage) -> Path:
        return self.out / f"{self.stages.index(stage) + 1:02d}-{stage.name}"

    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def read_state(self, stage: Stage) -> dict[str, Any] | None:
        path = self.stage_dir(stage) / STATE_FILE
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None  # a state file cut by a crash: treat the stage as never run

    def stage_config(
        self, stage: Stage, upstream_hashes: dict[str, str], config: RunConfig | None = None
    ) -> dict[str, Any]:
        config = config or self.config
        cfg = {"stage": stage.name, "version": stage.version, "seed": config.seed}
        cfg["sections"] = {s: config.section(s) for s in stage.sections}
        cfg["upstream"] = upstream_hashes
        return cfg

    def matches_record(self, stage: Stage, cfg: dict[str, Any]) -> bool:
        """Whether the stage's recorded config describes the same inputs as ``cfg`` (see
        :func:`same_inputs_as_recorded`)."""
        try:
            recorded = json.loads((self.stage_dir(stage) / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return False
        defaults = self.stage_config(stage, cfg["upstream"], RunConfig())
        return same_inputs_as_recorded(recorded, json.loads(canonical(cfg)), json.loads(canonical(defaults)))

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / ".lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StageError(f"another trace run is using {self.out}") from None
            yield

    def stage_range(self, from_stage: str | None, until: str | None) -> tuple[str | None, str | None]:
        """``--from`` and ``--until`` as stage names: each a stage's name or its directory's (``03-analysis``, as
        ``trace run --stages`` prints it); a ValueError names a stage that does not exist, or a range whose
        ``--from`` comes after its ``--until`` (it would redo nothing it names)."""
        names = self.stage_names()
        numbered = {f"{i + 1:02d}-{n}": n for i, n in enumerate(names)}
        found = []
        for flag, value in (("--from", from_stage), ("--until", until)):
            if value is not None and value not in names and value not in numbered:
                raise ValueError(f"{flag} {value!r} is not a stage; stages: {', '.join(numbered)}")
            found.append(numbered.get(value, value) if value is not None else None)
        first, last = found
        if first is not None and last is not None and names.index(first) > names.index(last):
            raise ValueError(
                f"--from {first} comes after --until {last}: the run would stop before the stage it redoes"
            )
        return first, last

    def run(self, from_stage: str | None = None, until: str | None = None) -> list[StageRecord]:
        names = self.stage_names()
        from_stage, until = self.stage_range(from_stage, until)
        force_from = names.index(from_stage) if from_stage else len(names)
        stop_after = names.index(until) if until else len(names) - 1
        records: list[StageRecord] = []
        results: dict[str, dict[str, Any]] = {}
        hashes: dict[str, str] = {}
        with self._lock():
            (self.out / "run_config.json").write_text(json.dumps(_asdict(self.config), indent=2) + "\n")
            for stage in self.stages[force_from:]:  # --from sticks even if this run stops early
                (self.stage_dir(stage) / STATE_FILE).unlink(missing_ok=True)
            for i, stage in enumerate(self.stages[: stop_after + 1]):
                record = self._run_one(stage, i >= force_from, results, hashes)
                records.append(record)
                results[stage.name] = record.result
        return records

    def _run_one(
        self, stage: Stage, forced: bool, results: dict[str, dict[str, Any]], hashes: dict[str, str]
    ) -> StageRecord:
        directory = self.stage_dir(stage)
        cfg = self.stage_config(stage, {n: hashes[n] for n in stage.needs})
        input_hash = sha256_text(canonical(cfg))
        state = self.read_state(stage)
        same_inputs = state is not None and state.get("input_hash") == input_hash
        if state is not None and not same_inputs and not forced and self.matches_record(stage, cfg):
            # finished (or interrupted) work is kept across a code update that only added settings at their
            # defaults, or a change of how often it saves: it is recorded under today's inputs from now on
            same_inputs = True
            state["input_hash"] = input_hash
            (directory / CONFIG_FILE).write_text(json.dumps(cfg, indent=2, default=str) + "\n")
            self._write_state(directory, state)
            self.reporter.line(
                f"== {stage.name}: inputs unchanged but for new defaults or how often it saves"
            )
        if not forced and same_inputs and state["status"] == "done":
            hashes[stage.name] = state["output_hash"]
            self.reporter.line(f"== {stage.name}: finished earlier, inputs unchanged: skipped")
            return StageRecord(stage.name, "skipped", state["wall_s"], state["peak_rss_mb"], state["result"])
        resume = not forced and same_inputs and state["status"] == "running"
        if resume:
            self.reporter.line(f"== {stage.name}: interrupted earlier: resuming in {directory}")
        else:
            why = "forced (--from)" if forced else ("inputs changed" if state else "new")
            if state is not None and state.get("status") == "failed" and same_inputs and not forced:
                why = "failed earlier"
            self.reporter.line(f"== {stage.name}: running ({why}) in {directory}")
            if directory.exists():
                shutil.rmtree(directory)
        previous_wall = _interrupted_wall(state, directory) if resume and state else 0.0
        # the CPUs its parts ran on: a run resumed on another machine says so in its stage table
        machines = list(dict.fromkeys([*((state or {}).get("machines") or [] if resume else []), cpu_name()]))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_text(json.dumps(cfg, indent=2, default=str) + "\n")
        started = time.time()
        self._write_state(
            directory,
            {
                "status": "running",
                "input_hash": input_hash,
                "started": started,
                "wall_s_before": previous_wall,
                "machines": machines,
            },
        )
        ctx = StageContext(
            name=stage.name,
            dir=directory,
            config=self.config,
            upstream={n: results[n] for n in stage.needs},
            upstream_dirs={n: self.stage_dir(self._by_name(n)) for n in stage.needs},
            resume=resume,
            reporter=self.reporter,
            run_dir=self.out,
        )
        # stages share one process: without a reset, a stage's peak would be the largest of all before it
        own_peak = reset_peak_rss()
        work_before = LEDGER.snapshot()
        try:
            result = stage.run(ctx)
        except KeyboardInterrupt:
            self._write_state(
                directory,
                {
                    "status": "running",
                    "input_hash": input_hash,
                    "wall_s": previous_wall + time.time() - started,
                    "machines": machines,
                },
            )
            self.reporter.line(f"== {stage.name}: interrupted; `trace run` again resumes it")
            raise
        except Exception as err:
            # a generation server that went down or failed is an interruption, not a bug: the stage keeps what
            # it finished (episodes on disk, checkpoints) and `trace run` resumes it, as after Ctrl-C
            outside = _server_fault(err)
            self._write_state(
                directory,
                {
                    "status": "running" if outside else "failed",
                    "input_hash": input_hash,
                    "error": f"{type(err).__name__}: {err}",
                    "traceback": traceback.format_exc(),
                    "wall_s": previous_wall + time.time() - started,
                },
            )
            if outside:
                self.reporter.line(
                    f"== {stage.name}: the generation server failed; its finished work is kept and "
                    "`trace run` again (the server back up) resumes it"
                )
            raise StageError(f"stage {stage.name} failed: {type(err).__name__}: {err}") from err
        this_part = time.time() - started  # a resumed stage's earlier part ran in another process
        wall = previous_wall + this_part
        work = LEDGER.since(work_before)
        roofline = account(work, this_part) if any(w.calls for w in work.values()) else None
        peak = peak_rss_mb()
        rss_after = release_memory()  # the next stage starts without this one's freed heap
        output_hash = hash_outputs(directory, result)
        hashes[stage.name] = output_hash
        state = {
            "status": "done",
            "input_hash": input_hash,
            "output_hash": output_hash,
            "wall_s": round(wall, 2),
            "peak_rss_mb": round(peak, 1),
            "peak_rss_scope": "stage" if own_peak else "process so far",
            "rss_after_release_mb": round(rss_after, 1),
            "roofline": roofline,
            "machines": machines,
            "finished": time.time(),
            "result": result,
        }
        self._write_state(directory, state)
        self.reporter.line(f"== {stage.name}: done in {wall:.1f} s")
        return StageRecord(
            stage.name, "resumed" if resume else "ran", state["wall_s"], state["peak_rss_mb"], result
        )

    def _by_name(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    @staticmethod
    def _write_state(directory: Path, state: dict[str, Any]) -> None:
        tmp = directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(directory / STATE_FILE)  # atomic: a crash never leaves half a state file


def _interrupted_wall(state: dict[str, Any], directory: Path) -> float:
    """Wall time an interrupted stage has spent so far: saved on Ctrl-C; after a kill (no chance to save), the
    earlier attempts' time plus the last attempt's up to the newest file it wrote (a lower bound)."""
    if "wall_s" in state:
        return float(state["wall_s"])
    before = float(state.get("wall_s_before", 0.0))
    if state.get("started") is None:
        return before
    started = float(state["started"])
    skip = {STATE_FILE, STATE_FILE + ".tmp", CONFIG_FILE}
    newest = max(
        (p.stat().st_mtime for p in directory.rglob("*") if p.is_file() and p.name not in skip),
        default=started,
    )
    return before + max(0.0, newest - started)


def _asdict(config: RunConfig) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config)


def summary_lines(records: Sequence[StageRecord]) -> list[str]:
    width = max((len(r.name) for r in records), default=5)
    lines = [f"{'stage':<{width}}  {'action':<8} {'wall s':>8} {'peak RSS MB':>12}  result"]
    for r in records:
        brief = r.result.get("summary", "") if isinstance(r.result, dict) else ""
        lines.append(f"{r.name:<{width}}  {r.action:<8} {r.wall_s:>8.1f} {r.peak_rss_mb:>12.0f}  {brief}")
    total = sum(r.wall_s for r in records if r.action != "skipped")
    lines.append(f"{'total':<{width}}  {'':<8} {total:>8.1f}")
    return lines


def _server_fault(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) is a generation server's failure ([generation], docs/pipeline.md)."""
    from trace_train.policies.remote_generation import RemoteGenerationError

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, RemoteGenerationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def print_exception(err: BaseException) -> None:
    print(f"error: {err}", file=sys.stderr)
