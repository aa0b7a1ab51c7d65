"""CLI subcommand of step 1 that needs no model, ``trace analyze`` (registered by the ``trace`` command).

trace analyze DIR [DIR ...] --out DIR [--labeller requirements|llm|both]   selection + report

The trajectories come from ``trace rollout`` (it runs the base agent, so it lives in the training package).

See docs/analysis.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from rich.console import Console
from rich.table import Table

from trace_gym.console import make_console

console = make_console()


def cmd_analyze(ns: argparse.Namespace) -> int:
    from trace_gym.analysis.analyze import AnalyzeArgs, analyze
    from trace_gym.analysis.report import outcome_rows, table_rows
    from trace_gym.llm_agent import LLMAgentError
    from trace_gym.openai_client import OpenAIError

    args = AnalyzeArgs(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(AnalyzeArgs)})
    try:
        with console.status("analysing") as status:
            result = analyze(args, lambda stage, done, total: status.update(f"{stage}: {done}/{total}"))
    except (
        ValueError,
        OpenAIError,
        LLMAgentError,
        FileNotFoundError,
    ) as err:  # AnalysisInputError, LabellingError, ...
        print(f"error: {err}", file=sys.stderr)
        return 2
    t = result.selection["target"]
    th = result.selection["thresholds"]
    table = Table(
        title=f"trace analyze {t['env_id']} ({t['episodes']} train episodes, {t['failed']} failed; "
        f"{result.selection['labeller']} labels, K={th['k']} of N={th['n']})"
    )
    columns, rows = table_rows(result)
    for column in columns:
        table.add_column(column, justify="left" if column == "capability" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    Console(width=max(130, console.width)).print(table)  # wide enough for every column, also in a pipe
    shares = outcome_rows(result)
    if shares:  # outcomes are not capabilities: reported beside the table
        console.print(
            "failed episodes: "
            + "; ".join(f"{kind} {name} {count} ({share:.0%})" for kind, name, count, share in shares),
            markup=False,
        )
    console.print(
        "stage times: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.timings.items()), markup=False
    )
    llm = result.selection.get("llm")
    if llm and llm["failures"]:
        console.print(
            f"[yellow]{llm['failures']} of {llm['calls']} LLM labelling calls failed (left out of their run; "
            f"see {result.paths.get('llm_failures')})[/yellow]"
        )
    console.print(f"selected: {', '.join(result.selection['selected']) or 'none'}", markup=False)
    for key in ("selection", "report_md", "report_html"):
        console.print(f"  {result.paths[key]}", markup=False)
    if ns.json:
        print(json.dumps(result.selection["selected"]))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from trace_gym.analysis import aggregate

    an = subparsers.add_parser(
        "analyze", help="step 1: contrastive capability analysis -> selected_capabilities.json + report"
    )
    an.add_argument("rollouts", nargs="+", help="`trace rollout` output dirs or trajectory JSONL files")
    an.add_argument("--out", required=True, help="output dir")
    an.add_argument("--labeller", default="requirements", choices=["requirements", "llm", "both"])
    an.add_argument(
        "--select-with", default="requirements", choices=["requirements", "llm"], help="with --labeller both"
    )
    an.add_argument("--rho", type=float, default=aggregate.DEFAULT_RHO, help="min Cov")
    an.add_argument("--delta", type=float, default=aggregate.DEFAULT_DELTA, help="min Delta")
    an.add_argument("--runs", type=int, default=aggregate.DEFAULT_RUNS, help="N, LLM labelling runs")
    an.add_argument("--min-runs", type=int, default=None, help="K of N runs (default ceil(0.8 N))")
    an.add_argument("--examples", type=int, default=2, help="example failures kept per capability")
    an.add_argument("--model", default=None, help="the analysis agent's model (LLM labeller)")
    an.add_argument("--base-url", default=None, help="its OpenAI-compatible server (key: $OPENAI_API_KEY)")
    an.add_argument(
        "--capabilities",
        nargs="*",
        default=[],
        help="seed capability list (name or name=description); with --no-discover, label exactly these",
    )
    an.add_argument("--no-discover", dest="discover", action="store_false")
    an.add_argument("--temperature", type=float, default=0.7, help="labelling temperature")
    an.add_argument("--max-attempts", type=int, default=3, help="tries per LLM call before it is reported")
    an.add_argument("--max-tokens", type=int, default=2048)
    an.add_argument("--concurrency", type=int, default=8, help="LLM requests in flight")
    an.add_argument("--max-chars", type=int, default=400, help="chars kept per message in LLM prompts")
    an.add_argument("--json", action="store_true", help="also print the selected names as JSON")
    an.set_defaults(func=cmd_analyze)
