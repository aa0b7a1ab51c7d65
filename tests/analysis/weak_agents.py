"""Scripted weak agents on trace/retail-v2, rolled out and analysed by the real `trace rollout` / `trace analyze`
code (issue 28): what each must select, and a summary row per agent for the tests and
``benchmarks/bench_weak_agents.py`` (the 200-task figures).

Agents: ``oracle-without:X`` for each ablatable capability X (must select exactly X); ``oracle-stop:K`` for
K = 2, 4, 6 (must select nothing, or only multi-step-completion, with the failures attributed to the outcome:
stopped); ``oracle-wrong-id`` (must select precise-arguments only); mixtures of two ablated agents on disjoint
seed ranges (must select both, ranked by their share of the tasks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_gym.analysis.analyze import AnalyzeArgs, analyze
from trace_train.base_rollouts import RolloutArgs, rollout

TARGET = "trace/retail-v2"
ABLATED = ("precondition-checking", "policy-adherence", "information-gathering", "multi-step-completion")
STOPS = (2, 4, 6)
MIXTURES = (
    (("precondition-checking", 0.7), ("information-gathering", 0.3)),
    (("policy-adherence", 0.7), ("precondition-checking", 0.3)),
)


@dataclass
class Row:
    agent: str
    episodes: int
    passed: int
    selected: list[str]
    stats: dict[str, dict[str, Any]]  # capability -> cov, delta, lacking/present/na in failed and passed
    outcomes: dict[str, Any] | None


def run(models: list[tuple[str, int, int]], out: Path, name: str) -> Row:
    """Roll out each (model, seed offset, episodes) into its own dir and analyse them together."""
    dirs = []
    for model, offset, episodes in models:
        d = out / f"{name}-{model.replace(':', '_')}-{offset}"
        rollout(
            RolloutArgs(
                env_id=TARGET, model=model, out=str(d), episodes=episodes, seed_offset=offset, max_turns=50
            )
        )
        dirs.append(str(d))
    result = analyze(AnalyzeArgs(rollouts=dirs, out=str(out / f"{name}-analysis")))
    stats = {
        r.name: {
            "cov": r.mean_cov,
            "er_minus": r.mean_er_minus,
            "er_plus": r.mean_er_plus,
            "delta": r.mean_delta,
            "failed": f"{r.runs[0].lacking_failed}/{r.runs[0].present_failed}/{r.runs[0].na_failed}",
            "passed": f"{r.runs[0].lacking_passed}/{r.runs[0].present_passed}/{r.runs[0].na_passed}",
            "examples": len(r.examples),
        }
        for r in result.results
    }
    t = result.selection["target"]
    return Row(name, t["episodes"], t["passed"], list(result.selection["selected"]), stats, result.outcomes)


def ablated(capability: str, episodes: int, out: Path) -> Row:
    return run([(f"oracle-without:{capability}", 0, episodes)], out, f"without-{capability}")


def stopped(k: int, episodes: int, out: Path) -> Row:
    return run([(f"oracle-stop:{k}", 0, episodes)], out, f"stop-{k}")


def wrong_id(episodes: int, out: Path) -> Row:
    return run([("oracle-wrong-id", 0, episodes)], out, "wrong-id")


def mixture(parts: tuple[tuple[str, float], ...], episodes: int, out: Path) -> Row:
    models, offset = [], 0
    for i, (capability, share) in enumerate(parts):
        n = episodes - offset if i == len(parts) - 1 else round(share * episodes)
        models.append((f"oracle-without:{capability}", offset, n))
        offset += n
    return run(models, out, "mix-" + "+".join(c for c, _ in parts))


def table(rows: list[Row]) -> str:
    """The closing note's table: per agent, what was selected with Cov/Delta, and the outcome shares."""
    lines = [
        "| agent | passed / episodes | selected (Cov, Delta) | first failures | outcomes of failed |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        chosen = (
            ", ".join(f"{n} ({row.stats[n]['cov']:.2f}, {row.stats[n]['delta']:+.2f})" for n in row.selected)
            or "none"
        )
        o = row.outcomes or {"failed": 0, "first_failures": {}, "outcomes": {}}
        failed = max(o["failed"], 1)
        ff = ", ".join(f"{k} {v / failed:.0%}" for k, v in o["first_failures"].items()) or "none"
        oc = ", ".join(f"{k} {v / failed:.0%}" for k, v in o["outcomes"].items()) or "-"
        lines.append(f"| {row.agent} | {row.passed} / {row.episodes} | {chosen} | {ff} | {oc} |")
    return "\n".join(lines)
