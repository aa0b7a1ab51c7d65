"""``trace analyze``: trajectories in, ``selected_capabilities.json`` and a report out.

Stages (each timed; the times go into the report and the selection's summary):

1. load: read the rollout files (``trace rollout`` output dirs or JSONL files); refuse test-split lines and
   duplicated seeds;
2. requirement labels: the env's ``info["requirements"]`` (labeller ``requirements`` or ``both``);
3. LLM discovery and labelling: :mod:`trace_gym.analysis.llm_labeller` (labeller ``llm`` or ``both``);
4. aggregate: per-run Cov, ER-, ER+, Delta and the K-of-N rule (:mod:`trace_gym.analysis.aggregate`),
   Cohen's kappa between the labellers where both ran, example failures per capability;
5. report: ``selected_capabilities.json`` (validated), ``report.md``, ``report.html``, ``labels.json``.

With ``both``, the selection uses ``select_with`` (default: the requirement labels, which are the env's own
checks) and the other labelling is the agreement reference; the LLM is seeded with the requirement
capability names and skips discovery, so both label the same capabilities.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_gym.analysis import aggregate
from trace_gym.analysis.aggregate import LACKING, CapabilityResult, RunStats, cohen_kappa, run_stats, select
from trace_gym.analysis.capabilities import describe
from trace_gym.analysis.labels import LabelTable, diagnosed, outcome_summary, requirement_labels
from trace_gym.analysis.selection import build_selection
from trace_gym.records import read_records, trajectory_file
from trace_gym.seeds import refuse_test_records

LABELLERS = ("requirements", "llm", "both")


@dataclass
class AnalyzeArgs:
    """Arguments of ``trace analyze`` (flags of the same names)."""

    rollouts: list[str]
    out: str
    labeller: str = "requirements"
    select_with: str = "requirements"  # with labeller "both": whose labels select
    rho: float = aggregate.DEFAULT_RHO
    delta: float = aggregate.DEFAULT_DELTA
    runs: int = aggregate.DEFAULT_RUNS  # N, LLM labeller
    min_runs: int | None = None  # K; default ceil(0.8 N)
    examples: int = 2
    # LLM analysis agent
    model: str | None = None
    base_url: str | None = None
    capabilities: list[str] = field(
        default_factory=list
    )  # seed list (names from the target, or name=description)
    discover: bool = True
    temperature: float = 0.7
    max_attempts: int = 3
    max_tokens: int = 2048
    concurrency: int = 8
    max_chars: int = 400


@dataclass
class Analysis:
    results: list[CapabilityResult]
    selection: dict[str, Any]
    records: list[dict[str, Any]]
    timings: dict[str, float]
    paths: dict[str, str]
    failures: list[dict[str, Any]] = field(default_factory=list)
    kappa_available: bool = False
    outcomes: dict[str, Any] | None = None  # outcome_summary, for targets that diagnose


class AnalysisInputError(ValueError):
    """Trajectory files that cannot be analysed together; the message says which and why."""


def load_records(paths: Sequence[str | os.PathLike]) -> tuple[list[dict[str, Any]], list[str]]:
    """Records of every rollout file (a directory means its ``trajectories.jsonl``), each tagged with its
    file; test-split lines and seeds that occur twice for one env are refused."""
    records: list[dict[str, Any]] = []
    files: list[str] = []
    seen: dict[tuple[str, int], str] = {}
    for raw in paths:
        path = trajectory_file(raw)
        if not path.is_file():
            raise FileNotFoundError(
                f"no trajectory file at {path} (give a `trace rollout` --out dir or a JSONL file)"
            )
        files.append(str(path))
        file_records = read_records(path)
        refuse_test_records(str(path), file_records)
        for record in file_records:
            where = f"{path}:{record['_line']}"
            key = (str(record.get("env_id")), int(record["seed"]))
            if key in seen:
                raise AnalysisInputError(f"{where} repeats seed {key[1]} of {key[0]} (first at {seen[key]})")
            seen[key] = where
            record["_file"] = str(path)
            records.append(record)
    if not records:
        raise AnalysisInputError(f"no trajectories in {', '.join(files)}")
    env_ids = sorted({str(r.get("env_id")) for r in records})
    if len(env_ids) > 1:
        raise AnalysisInputError(
            f"trajectories of several targets ({', '.join(env_ids)}): analyse one target at a time"
        )
    return records, files


def stats_of(table: LabelTable, success: Sequence[bool]) -> dict[str, RunStats]:
    """One run's statistics per capability; trajectories the run could not label (``None``) are left out."""
    out = {}
    for name, labels in table.labels.items():
        kept = [(label, ok) for label, ok in zip(labels, success, strict=True) if label is not None]
        out[name] = run_stats([k[0] for k in kept], [k[1] for k in kept])
    return out


def analyze(args: AnalyzeArgs, progress: Callable[[str, int, int], None] | None = None) -> Analysis:
    if args.labeller not in LABELLERS:
        raise ValueError(f"--labeller must be one of {', '.join(LABELLERS)}, got {args.labeller!r}")
    if args.select_with not in ("requirements", "llm"):
        raise ValueError(f"--select-with must be requirements or llm, got {args.select_with!r}")
    if args.labeller != "requirements" and not args.model:
        raise ValueError("the LLM labeller needs --model (and --base-url or $OPENAI_BASE_URL)")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[stage] = round(now - clock, 3)
        clock = now

    records, files = load_records(args.rollouts)
    success = [bool(r.get("success", float(r["reward"]) >= 1.0)) for r in records]
    lap("load")

    requirement: LabelTable | None = None
    if args.labeller in ("requirements", "both"):
        requirement = requirement_labels(records)
        lap("requirement_labels")

    llm_runs: list[LabelTable] = []
    failures: list[dict[str, Any]] = []
    llm_summary: dict[str, Any] | None = None
    descriptions: dict[str, str] = {}
    if args.labeller in ("llm", "both"):
        llm_runs, capabilities, failures, llm_summary = _llm_labels(
            args, records, requirement, timings, progress
        )
        descriptions = {c.name: c.description for c in capabilities}
        clock = time.perf_counter()

    use_llm = args.labeller == "llm" or (args.labeller == "both" and args.select_with == "llm")
    runs = llm_runs if use_llm else [requirement]  # type: ignore[list-item]
    per_run = [stats_of(t, success) for t in runs]
    names = list(runs[0].labels)
    n = len(runs)
    k = (
        args.min_runs
        if args.min_runs is not None
        else -(-aggregate.DEFAULT_MIN_RUNS * n // aggregate.DEFAULT_RUNS)
    )
    results = select({name: [s[name] for s in per_run] for name in names}, args.rho, args.delta, k)
    kappa_available = requirement is not None and bool(llm_runs)
    for result in results:
        result.description = descriptions.get(result.name) or describe(result.name)
        if kappa_available:
            result.kappa = _kappa(result.name, requirement, llm_runs)  # type: ignore[arg-type]
        result.examples = _examples(result.name, records, runs, args.examples)
    lap("aggregate")

    outcomes = outcome_summary(records, success) if diagnosed(records) else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = {
        "env_id": str(records[0].get("env_id")),
        "split": "train",
        "episodes": len(records),
        "passed": sum(success),
        "failed": len(records) - sum(success),
        "rollouts": files,
        "models": sorted({str(r.get("model")) for r in records}),
    }
    selection = build_selection(
        results,
        target=target,
        labeller="llm" if use_llm else "requirements",
        thresholds={"rho": args.rho, "delta": args.delta, "k": k, "n": n},
        llm=llm_summary,
        outcomes=outcomes,
    )
    paths = {
        "selection": str(out / "selected_capabilities.json"),
        "labels": str(out / "labels.json"),
        "report_md": str(out / "report.md"),
        "report_html": str(out / "report.html"),
    }
    Path(paths["selection"]).write_text(json.dumps(selection, indent=2) + "\n")
    Path(paths["labels"]).write_text(
        json.dumps(
            {
                "records": [
                    {"file": r["_file"], "line": r["_line"], "seed": r["seed"], "success": s}
                    for r, s in zip(records, success, strict=True)
                ],
                "requirements": requirement.labels if requirement else None,
                "first_failures": [r.get("first_failure") for r in records],
                "outcomes": [r.get("outcome") for r in records],
                "llm": [
                    {
                        "labels": t.labels,
                        "turns": t.turns,
                        "reasons": t.reasons,
                        "first_failures": t.first_failures,
                    }
                    for t in llm_runs
                ]
                or None,
            }
        )
        + "\n"
    )
    if failures:
        paths["llm_failures"] = str(out / "llm_failures.jsonl")
        with open(paths["llm_failures"], "w", encoding="utf-8") as f:
            for failure in failures:
                f.write(json.dumps(failure) + "\n")
    analysis = Analysis(results, selection, records, timings, paths, failures, kappa_available, outcomes)
    from trace_gym.analysis.report import write_reports

    write_reports(analysis)
    lap("report")
    return analysis


def _llm_labels(args, records, requirement, timings, progress):
    from trace_gym.analysis.llm_labeller import Capability, LLMLabeller
    from trace_gym.llm_agent import LLMAgent
    from trace_gym.openai_client import OpenAIClient

    client = OpenAIClient(base_url=args.base_url)
    agent = LLMAgent(client, args.model, max_attempts=args.max_attempts, max_tokens=args.max_tokens)
    labeller = LLMLabeller(
        agent,
        runs=args.runs,
        temperature=args.temperature,
        concurrency=args.concurrency,
        max_chars=args.max_chars,
        progress=progress,
    )
    seeds = [_capability(spec) for spec in args.capabilities]
    if not seeds:  # the target's declared capabilities, where its trajectories carry requirement labels
        declared = sorted({name for r in records for name in (r.get("requirements") or {})})
        seeds = [Capability(n, describe(n)) for n in declared]
    if requirement is not None:  # both labellers: label the same names so agreement can be measured
        seeds = [Capability(n, describe(n)) for n in requirement.capabilities]
    t0 = time.perf_counter()
    if not args.discover and not seeds:
        raise ValueError("--no-discover needs --capabilities (or trajectories that carry requirement labels)")
    if requirement is not None or not args.discover:
        capabilities = seeds
    else:
        capabilities = labeller.discover(records, seeds)
    timings["llm_discovery"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    labelling = labeller.label(records, capabilities)
    timings["llm_labels"] = round(time.perf_counter() - t0, 3)
    summary = {
        "model": args.model,
        "base_url": client.base_url,
        "runs": args.runs,
        "calls": labelling.calls,
        "retried_calls": labelling.retried_calls,
        "failures": len(labelling.failures),
        "capabilities": [{"name": c.name, "description": c.description} for c in capabilities],
    }
    return labelling.runs, capabilities, [f.to_json() for f in labelling.failures], summary


def _capability(spec: str):
    from trace_gym.analysis.llm_labeller import Capability

    name, _, description = spec.partition("=")
    return Capability(name.strip(), description.strip() or describe(name.strip()))


def _kappa(name: str, requirement: LabelTable, llm_runs: list[LabelTable]) -> float | None:
    """Kappa over every (run, trajectory) pair both labelled: the LLM's label vs the requirement label."""
    if name not in requirement.labels:
        return None
    a: list[str] = []
    b: list[str] = []
    for table in llm_runs:
        for mine, theirs in zip(table.labels.get(name, []), requirement.labels[name], strict=False):
            if mine is not None:
                a.append(mine)
                b.append(theirs)
    return cohen_kappa(a, b)


def _examples(name: str, records, runs: list[LabelTable], limit: int) -> list[dict[str, Any]]:
    """Failed trajectories labelled LACKING for ``name`` by the most runs (ties: fewest messages first)."""
    votes = []
    for i, record in enumerate(records):
        if record.get("success"):
            continue
        lacking = [t for t in runs if t.labels[name][i] == LACKING]
        if lacking:
            votes.append((-len(lacking), len(record.get("messages", [])), i, lacking[0]))
    votes.sort(key=lambda v: v[:3])
    return [
        {
            "seed": int(records[i]["seed"]),
            "file": records[i]["_file"],
            "line": int(records[i]["_line"]),
            "turn": table.turn(name, i),
            "reason": table.reason(name, i) or f"labelled LACKING by {-neg} of {len(runs)} run(s)",
        }
        for neg, _len, i, table in votes[:limit]
    ]
