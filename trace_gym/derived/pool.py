"""The source tasks of a capability env: train-split target tasks that exercise the capability.

The target's train seeds ``0 .. window - 1`` are scanned once per process (cached): each distinct task (by
the target's ``render_instance()``) that exercises the capability gives one source per decision point of the
capability. Sources are split again, by content, into the capability env's own train and test splits (a
salted hash of the target's ``group_key()`` where it has one, else its ``task_key()``), so that both of the
capability env's splits come from the target's *train* split and the target's test tasks are never seen.

Why a scanned pool and not a redraw from ``np_random`` per reset: a target with a finite task set (BFCL: 640
train tasks, 128 of them ``miss_func``) would repeat tasks within a few dozen random seeds; the pool's fixed
shuffled order gives consecutive seeds distinct sources, as BFCL's own seeds do.

A decision point where the target's verdict passes an agent that only talks from there on is no source
(:func:`passes_without_acting`): nothing the agent does there can fail. Nor is one where another task's
oracle continuation of the same shape passes (:func:`foreign_passes`): what passes there is not the task's.

A level's instances (:func:`level_sources`) are one per distinct start, not one per source: an episode is the
source task with the oracle's first ``prefix_length(d, level)`` actions replayed, so two decision points of one
task whose prefixes coincide at a level (every one at level 4, the whole task) are the same episode, which an
evaluation or a training step would count twice (issue 52: BFCL state-changing-calls' test split at level 4
cycled through 237 instances of 104 tasks).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from trace_gym.core.splits import split_of_key
from trace_gym.derived.levels import DEFAULT_LADDER, prefix_length
from trace_gym.worlds.world import canonical_json

SOURCE_SPLIT = "train"  # the only target split a capability env reads
SUBSPLIT_SALT = "trace-derived-capability-v0"
DEFAULT_WINDOW = 1000


class NoSourceTaskError(RuntimeError):
    """No train task of the target exercises the capability within the scanned window."""


@dataclass(frozen=True)
class Source:
    """One capability-env instance's origin: a target train seed and the decision point to start before."""

    target_seed: int  # split-relative: reset(seed=target_seed, options={"split": "train"})
    decision_point: int  # index into the target's oracle_actions()
    task_key: str
    task_id: str


def subsplit(key: str) -> str:
    """The capability env's split of a target train task (by content; 20% test)."""
    return split_of_key(f"{SUBSPLIT_SALT}\x00{key}")


IDLE_REPLY = "I cannot help with that."
MAX_IDLE_STEPS = 200


def passes_with(target: Any, seed: int, point: int, actions: list[Any], fresh: bool = False) -> bool:
    """Whether the target's verdict passes an agent that, from the decision point on, plays ``actions`` and
    then only replies in words. ``fresh``: the target was just reset with ``seed`` and has not stepped."""
    if not fresh:
        target.reset(seed=seed, options={"split": SOURCE_SPLIT})
    for action in target.oracle_actions()[:point]:
        target.step(action)
    for action in [*actions, *[IDLE_REPLY] * MAX_IDLE_STEPS]:
        _, reward, terminated, truncated, _ = target.step(action)
        if terminated or truncated:
            return reward == 1.0
    return False


def passes_without_acting(target: Any, seed: int, point: int, fresh: bool = False) -> bool:
    """Whether the target's verdict passes an agent that, from the decision point on, only replies in words
    (no call). Such a start tells nothing: BFCL does not check a turn with empty ground truth, so a
    ``miss_param`` task whose empty turn is its last scores 1.0 whatever the agent does there."""
    return passes_with(target, seed, point, [], fresh)


def shape(actions: list[Any]) -> tuple[Any, ...]:
    """What a continuation does, without its content: per action the tools it calls, or that it talks."""
    out = []
    for action in actions:
        calls = action.get("tool_calls") if isinstance(action, dict) else None
        out.append(tuple(sorted(c["function"]["name"] for c in calls)) if calls else "say")
    return tuple(out)


def foreign_passes(target: Any, candidates: list[tuple[Source, list[Any], str]]) -> set[int]:
    """Indexes of the candidates another task's oracle continuation passes: each candidate (source,
    continuation from its decision point, group) is played with the continuation of the next candidate of the
    same shape from another group (BFCL's variants of one base task share their calls) whose continuation is
    not the same actions (two tasks may need exactly the same calls: that is a right answer, not a
    shortcut). Such a
    start tells nothing either: what passes there is not the task's (a lone ``transfer_to_human_agents`` as a
    task's last request passes on every task ending with a transfer, the summary being free text)."""
    by_shape: dict[tuple[Any, ...], list[int]] = {}
    for index, (_, continuation, _) in enumerate(candidates):
        by_shape.setdefault(shape(continuation), []).append(index)
    dropped = set()
    for members in by_shape.values():
        for position, index in enumerate(members):
            source = candidates[index][0]
            others = members[position + 1 :] + members[:position]
            own = canonical_json(candidates[index][1])
            other = next(
                (
                    j
                    for j in others
                    if candidates[j][2] != candidates[index][2] and canonical_json(candidates[j][1]) != own
                ),
                None,
            )
            if other is not None and passes_with(
                target, source.target_seed, source.decision_point, candidates[other][1]
            ):
                dropped.add(index)
    return dropped


def scan(target: Any, capability: str, window: int) -> dict[str, tuple[Source, ...]]:
    """Scan the target's train seeds ``0..window-1``; returns the sources of each capability-env split."""
    candidates: list[tuple[Source, list[Any], str]] = []  # (source, continuation, group)
    seen: set[str] = set()
    for seed in range(window):
        _, info = target.reset(seed=seed, options={"split": SOURCE_SPLIT})
        key = target.task_key()
        instance = hashlib.sha256(target.render_instance().encode()).hexdigest()
        if instance in seen:  # a target with a finite task set repeats it (BFCL: every 640 seeds)
            continue
        seen.add(instance)
        if capability not in target.task_capabilities():
            continue
        group = target.group_key() if hasattr(target, "group_key") else key
        task_id = str(info.get("task_id", key))
        oracle = list(target.oracle_actions())
        for index, point in enumerate(target.decision_points().get(capability, [])):
            # the first replay starts from this reset (a retail reset draws a whole database: most of a scan)
            if passes_without_acting(target, seed, int(point), fresh=index == 0):
                continue
            candidates.append((Source(seed, int(point), key, task_id), oracle[int(point) :], group))
    dropped = foreign_passes(target, candidates)
    found: dict[str, list[Source]] = {"train": [], "test": []}
    for index, (source, _, group) in enumerate(candidates):
        if index not in dropped:
            found[subsplit(group)].append(source)
    out = {}
    for split, sources in found.items():  # a fixed shuffled order: consecutive seeds are distinct sources
        order = np.random.default_rng(sum(map(ord, f"{SUBSPLIT_SALT}/{capability}/{split}"))).permutation(
            len(sources)
        )
        out[split] = tuple(sources[i] for i in order)
    return out


# on: read and write the disk cache; read: only read it (synthesis's sandbox, which may not write files, reads
# the pool its parent scanned); off: always scan
CACHE_MODE_VAR = "TRACE_POOL_CACHE"
CACHE_MODES = ("on", "read", "off")


def cache_dir() -> Path:
    """Where scanned pools are kept between processes: ``$TRACE_CACHE/derived-pools`` (default ``~/.cache/trace``)."""
    return Path(os.environ.get("TRACE_CACHE", Path.home() / ".cache" / "trace")) / "derived-pools"


@cache
def code_version(target_id: str) -> str:
    """A hash of trace_gym's own source and of the package that defines the target (a plugin or test target
    lives outside trace_gym): a pool scanned by other code (a changed target, user or verifier) is never
    reused."""
    import importlib.util

    import gymnasium as gym

    roots = {Path(__file__).resolve().parents[1]}
    entry_point = gym.spec(target_id).entry_point
    if isinstance(entry_point, str):
        spec = importlib.util.find_spec(entry_point.split(":")[0].split(".")[0])
        if spec is not None and spec.origin:
            origin = Path(spec.origin).resolve()
            roots.add(origin.parent if origin.name == "__init__.py" else origin)
    digest = hashlib.sha256()
    for root in sorted(roots):
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            digest.update(str(path).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _pool_file(target_id: str, kwargs: tuple[tuple[str, Any], ...], capability: str, window: int) -> Path:
    key = json.dumps(
        [target_id, [list(kv) for kv in kwargs], capability, window, code_version(target_id)], default=str
    )
    return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _load(path: Path) -> dict[str, tuple[Source, ...]] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {split: tuple(Source(**s) for s in data[split]) for split in ("train", "test")}
    except (OSError, ValueError, TypeError, KeyError):  # absent, torn or foreign: scan again
        return None


def _store(path: Path, pool: dict[str, tuple[Source, ...]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({split: [asdict(s) for s in items] for split, items in pool.items()}))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:  # a read-only cache only costs the next process a scan
        pass


_scan_lock = threading.Lock()
# draws a scan target keeps (RetailEnv.task_memo_size): every draw of a 1,000-seed window, redraws included
SCAN_MEMO_SIZE = 4096


@cache
def scan_target(target_id: str, kwargs: tuple[tuple[str, Any], ...]) -> Any:
    """One target env per process for every capability's scan: a target that keeps the tasks it drew (retail)
    draws each of the window's tasks once for all its capabilities (the scans of the second and later
    capabilities of retail-v2 took 10-12 s of draws each)."""
    import gymnasium as gym

    target = gym.make(target_id, disable_env_checker=True, **dict(kwargs)).unwrapped
    if hasattr(target, "task_memo_size"):
        target.task_memo_size = max(target.task_memo_size, SCAN_MEMO_SIZE)
    return target


@cache
def _cached(target_id: str, kwargs: tuple[tuple[str, Any], ...], capability: str, window: int):
    """The scan, once per process and, on disk, once per code version. The first reset of a retail-derived env
    scans 1,000 target tasks: 28-35 s of CPU on a 2-core AVX2 AMD EPYC (43-46 s before the retail env kept the
    tasks it drew, ``RetailEnv._generate_task``); about 10 s for a BFCL one."""
    mode = os.environ.get(CACHE_MODE_VAR, "on")
    if mode not in CACHE_MODES:
        raise ValueError(f"{CACHE_MODE_VAR} must be one of {list(CACHE_MODES)}, got {mode!r}")
    path = _pool_file(target_id, kwargs, capability, window)
    pool = _load(path) if mode != "off" else None
    if pool is None:
        with _scan_lock:  # the scan target is shared: one scan at a time in a process
            pool = scan(scan_target(target_id, kwargs), capability, window)
        if mode == "on":
            _store(path, pool)
    return pool


def sources(
    target_id: str, target_kwargs: dict[str, Any], capability: str, window: int = DEFAULT_WINDOW
) -> dict[str, tuple[Source, ...]]:
    """The pool: per capability-env split, one source per (task, decision point), in the fixed shuffled
    order (a level's instances are :func:`level_sources`)."""
    pool = _cached(target_id, tuple(sorted(target_kwargs.items())), capability, window)
    for split, items in pool.items():
        if not items:
            raise NoSourceTaskError(
                f"no {split} source for {capability!r}: no train task of {target_id} within seeds "
                f"0..{window - 1} exercises it"
            )
    return pool


def one_per_start(items: tuple[Source, ...], level: int, ladder: str = DEFAULT_LADDER) -> tuple[Source, ...]:
    """``items`` with one source per distinct start (task, prefix length at ``level``), in their order. The one
    kept names the earliest decision point of its start (the first the agent meets), so that ``info["source"]``
    is the same whichever decision point came first in the shuffled order."""
    kept: list[Source] = []
    where: dict[tuple[int, int], int] = {}
    for source in items:
        start = (source.target_seed, prefix_length(source.decision_point, level, ladder))
        if start not in where:
            where[start] = len(kept)
            kept.append(source)
        elif source.decision_point < kept[where[start]].decision_point:
            kept[where[start]] = replace(kept[where[start]], decision_point=source.decision_point)
    return tuple(kept)


# (target, kwargs, capability, window, level, ladder) -> (the pool it was made from, its instances per split);
# holding the pool keeps this coherent with _cached: a rescanned pool is another object
_BY_LEVEL: dict[tuple[Any, ...], tuple[dict[str, tuple[Source, ...]], dict[str, tuple[Source, ...]]]] = {}


def level_sources(
    target_id: str,
    target_kwargs: dict[str, Any],
    capability: str,
    window: int = DEFAULT_WINDOW,
    level: int = 1,
    ladder: str = DEFAULT_LADDER,
) -> dict[str, tuple[Source, ...]]:
    """The instances of each capability-env split at ``level``: the pool with one source per distinct start
    (:func:`one_per_start`); seed ``i`` of a split is instance ``i mod n``."""
    pool = sources(target_id, target_kwargs, capability, window)
    key = (target_id, tuple(sorted(target_kwargs.items())), capability, window, level, ladder)
    hit = _BY_LEVEL.get(key)
    if hit is None or hit[0] is not pool:
        hit = (pool, {split: one_per_start(items, level, ladder) for split, items in pool.items()})
        _BY_LEVEL[key] = hit
    return hit[1]
