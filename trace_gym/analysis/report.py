"""The analysis report: report.md and a self-contained report.html (chart embedded as a PNG data URI).

Both hold the table (capability, Cov, ER-, ER+, Delta, runs passing, selected, and kappa where both labellers
ran), for targets that diagnose the outcome shares of the failed episodes beside it (outcomes are not
capabilities) and per capability the LACKING / PRESENT / NA counts in failures and successes, the chart of Cov against Delta per capability with the thresholds drawn, the per-run values, two
example failures per selected capability with the message where it went wrong highlighted, the stage times
and every LLM labelling failure.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trace_gym.analysis.analyze import Analysis

COLUMNS = ("capability", "Cov", "ER-", "ER+", "Delta", "runs passing", "selected")


def table_rows(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    """The summary table (means over runs) as strings; a ``kappa`` column where both labellers ran."""
    n = analysis.selection["thresholds"]["n"]
    columns = list(COLUMNS) + (["kappa"] if analysis.kappa_available else [])
    rows = []
    for r in analysis.results:
        no_contrast = all(run.n_plus == 0 for run in r.runs)
        row = [
            r.name,
            f"{r.mean_cov:.3f}",
            f"{r.mean_er_minus:.3f}",
            f"{r.mean_er_plus:.3f}" + (" *" if no_contrast else ""),
            f"{r.mean_delta:+.3f}",
            f"{r.runs_passing}/{n}",
            f"yes (#{r.rank})" if r.selected else "no",
        ]
        if analysis.kappa_available:
            row.append("-" if r.kappa is None else f"{r.kappa:.3f}")
        rows.append(row)
    return columns, rows


def chart_png(analysis: Analysis) -> bytes:
    """Cov (x) against Delta (y), one point per capability and run (faint) and its mean (labelled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thresholds = analysis.selection["thresholds"]
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    groups: dict[tuple[float, float], list[str]] = {}
    for i, r in enumerate(analysis.results):
        color = f"C{i % 10}"
        if len(r.runs) > 1:
            ax.scatter([s.cov for s in r.runs], [s.delta for s in r.runs], s=12, alpha=0.25, color=color)
        ax.scatter(
            [r.mean_cov],
            [r.mean_delta],
            s=70,
            color=color,
            marker="*" if r.selected else "o",
            edgecolor="black",
            linewidth=0.6,
            zorder=3,
        )
        groups.setdefault((round(r.mean_cov, 2), round(r.mean_delta, 2)), []).append(r.name)
    for (x, y), names in groups.items():  # one label per spot, so coinciding capabilities stay readable
        right = x > 0.7
        ax.annotate(
            "\n".join(names),
            (x, y),
            textcoords="offset points",
            xytext=(-8 if right else 8, -4 if y > 0.9 else 4),
            fontsize=8,
            ha="right" if right else "left",
            va="top" if y > 0.9 else "bottom",
        )
    ax.axvline(thresholds["rho"], color="grey", linestyle="--", linewidth=1)
    ax.axhline(thresholds["delta"], color="grey", linestyle="--", linewidth=1)
    ax.fill_between([thresholds["rho"], 1.05], thresholds["delta"], 1.05, color="green", alpha=0.06)
    ax.text(1.04, thresholds["delta"] + 0.01, "selected region", fontsize=8, color="green", ha="right")
    ax.set_xlim(-0.03, 1.05)
    ax.set_ylim(min(-0.05, min((r.mean_delta for r in analysis.results), default=0) - 0.05), 1.05)
    ax.set_xlabel(f"Cov (coverage of failures); threshold rho = {thresholds['rho']}")
    ax.set_ylabel(f"Delta = ER- - ER+; threshold delta = {thresholds['delta']}")
    target = analysis.selection["target"]
    ax.set_title(
        f"{target['env_id']}: {target['failed']} failed / {target['episodes']} episodes", fontsize=10
    )
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _example_messages(analysis: Analysis, example: dict[str, Any]) -> list[dict[str, Any]]:
    for record in analysis.records:
        if record["_file"] == example["file"] and record["_line"] == example["line"]:
            return record.get("messages", [])
    return []


def _message_text(message: dict[str, Any], limit: int = 600) -> str:
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(f"CALL {fn.get('name')}({fn.get('arguments')})")
    text = " | ".join(p for p in parts if p) or "(empty)"
    return text if len(text) <= limit else text[:limit] + " ..."


def _header(analysis: Analysis) -> dict[str, Any]:
    s = analysis.selection
    return {
        "target": s["target"],
        "labeller": s["labeller"],
        "thresholds": s["thresholds"],
        "llm": s.get("llm"),
    }


def markdown(analysis: Analysis, chart_file: str) -> str:
    h = _header(analysis)
    t, th = h["target"], h["thresholds"]
    columns, rows = table_rows(analysis)
    out = [
        f"# Capability analysis of {t['env_id']}",
        "",
        f"{t['episodes']} train-split episodes of {', '.join(t['models'])}: {t['passed']} passed, {t['failed']} "
        f"failed. Labels: **{h['labeller']}**. Kept when Cov >= {th['rho']} and Delta >= {th['delta']} in at "
        f"least {th['k']} of {th['n']} run(s).",
        "",
        f"**Selected:** {', '.join(analysis.selection['selected']) or 'none'}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        "Means over runs. `*`: no passed trajectory needed the capability, so ER+ is 0 by definition and "
        "Delta = ER- (docs/analysis.md).",
        "",
        *_outcomes_md(analysis),
        f"![Cov against Delta]({chart_file})",
        "",
        "## Per-run values",
        "",
        "NA: the task did not need the capability, or the trajectory never reached its decision point.",
        "",
        "| capability | run | Cov | ER- | ER+ | Delta | lacking/present/NA in failed | lacking/present/NA in passed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in analysis.results:
        for i, s in enumerate(r.runs):
            out.append(
                f"| {r.name} | {i} | {s.cov:.3f} | {s.er_minus:.3f} | {s.er_plus:.3f} | {s.delta:+.3f} | "
                f"{s.lacking_failed}/{s.present_failed}/{s.na_failed} of {s.failed} | "
                f"{s.lacking_passed}/{s.present_passed}/{s.na_passed} of {s.passed} |"
            )
    out += ["", "## Example failures of the selected capabilities", "", _where_note(analysis), ""]
    for r in analysis.results:
        if not r.selected:
            continue
        out += [f"### {r.name}", "", r.description, ""]
        for example in r.examples:
            out += [f"Seed {example['seed']} ({example['file']}:{example['line']}): {example['reason']}", ""]
            for i, message in enumerate(_example_messages(analysis, example)):
                if message.get("role") == "system":
                    continue
                mark = "**>> " if i == example.get("turn") else ""
                end = "**" if mark else ""
                text = _message_text(message).replace("|", "\\|")
                out.append(f"- {mark}[{i}] {message.get('role')}: {text}{end}")
            out.append("")
    out += _tail_md(analysis)
    return "\n".join(out) + "\n"


def outcome_rows(analysis: Analysis) -> list[tuple[str, str, int, float]]:
    """(kind, name, count, share of failed) for the failed episodes: how they ended, their first failures, and
    the ones with no first failure (explained by their outcome alone)."""
    summary = analysis.outcomes
    if not summary or not summary["failed"]:
        return []
    rows = []
    for kind, key in (
        ("outcome", "outcomes"),
        ("first failure", "first_failures"),
        ("no first failure", "unexplained"),
    ):
        for name, count in summary[key].items():
            rows.append((kind, name, count, count / summary["failed"]))
    return rows


def _outcomes_md(analysis: Analysis) -> list[str]:
    rows = outcome_rows(analysis)
    if not rows:
        return []
    return [
        "## How the failed episodes ended",
        "",
        "Outcomes are not capabilities: a failure with no first failure (the agent stopped, ran out of turns, hit "
        "the invalid-action limit) is explained by its outcome and counts as LACKING for no capability.",
        "",
        "| | | failed episodes | share |",
        "|---|---|---|---|",
        *(f"| {kind} | {name} | {count} | {share:.1%} |" for kind, name, count, share in rows),
        "",
    ]


def _where_note(analysis: Analysis) -> str:
    if analysis.selection["labeller"] == "llm":
        return "The highlighted message is where the analysis agent says the capability was first lacking."
    if analysis.outcomes is not None:
        return "The highlighted message is the trajectory's first failure as the target diagnosed it (exact)."
    return (
        "Requirement labels say whether a capability was shown, not where: the highlighted message is a "
        "heuristic (the first agent message whose tool call failed, else the agent's last message)."
    )


def _tail_md(analysis: Analysis) -> list[str]:
    out = ["## Stage times", "", "| stage | seconds |", "|---|---|"]
    out += [f"| {stage} | {seconds:.2f} |" for stage, seconds in analysis.timings.items()]
    llm = analysis.selection.get("llm")
    if llm:
        out += [
            "",
            "## LLM analysis agent",
            "",
            f"Model `{llm['model']}` at {llm['base_url']}: {llm['runs']} runs, {llm['calls']} labelling calls, "
            f"{llm['retried_calls']} needed a retry, **{llm['failures']} failed** (left out of their run; "
            "listed in llm_failures.jsonl).",
        ]
        for failure in analysis.failures[:20]:
            out.append(f"- run {failure['run']}, seed {failure['seed']}: {failure['error']}")
    return out


def html_report(analysis: Analysis, png: bytes) -> str:
    h = _header(analysis)
    t, th = h["target"], h["thresholds"]
    columns, rows = table_rows(analysis)
    esc = html.escape
    table = "<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in columns) + "</tr>"
    for r, row in zip(analysis.results, rows, strict=True):
        cls = ' class="sel"' if r.selected else ""
        table += f"<tr{cls}>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>"
    table += "</table>"
    runs = "<table><tr><th>capability</th><th>run</th><th>Cov</th><th>ER-</th><th>ER+</th><th>Delta</th>"
    runs += "<th>lacking/present/NA failed</th><th>lacking/present/NA passed</th></tr>"
    for r in analysis.results:
        for i, s in enumerate(r.runs):
            runs += (
                f"<tr><td>{esc(r.name)}</td><td>{i}</td><td>{s.cov:.3f}</td><td>{s.er_minus:.3f}</td>"
                f"<td>{s.er_plus:.3f}</td><td>{s.delta:+.3f}</td><td>{s.lacking_failed}/{s.present_failed}/"
                f"{s.na_failed} of {s.failed}</td><td>{s.lacking_passed}/{s.present_passed}/{s.na_passed} of "
                f"{s.passed}</td></tr>"
            )
    runs += "</table>"
    examples = ""
    for r in analysis.results:
        if not r.selected:
            continue
        examples += f"<h3>{esc(r.name)}</h3><p>{esc(r.description)}</p>"
        for example in r.examples:
            examples += (
                f"<h4>Seed {example['seed']} <small>({esc(example['file'])}:{example['line']})</small></h4>"
                f"<p>{esc(example['reason'])}</p><ol class=conv>"
            )
            for i, message in enumerate(_example_messages(analysis, example)):
                if message.get("role") == "system":
                    continue
                cls = "wrong" if i == example.get("turn") else str(message.get("role"))
                flag = " &larr; went wrong here" if cls == "wrong" else ""
                examples += (
                    f'<li value="{i}" class="{esc(cls)}"><b>{esc(str(message.get("role")))}</b>: '
                    f"{esc(_message_text(message))}{flag}</li>"
                )
            examples += "</ol>"
    times = "".join(f"<tr><td>{esc(k)}</td><td>{v:.2f}</td></tr>" for k, v in analysis.timings.items())
    llm = analysis.selection.get("llm")
    llm_html = ""
    if llm:
        items = "".join(
            f"<li>run {f['run']}, seed {f['seed']}: {esc(f['error'])}</li>" for f in analysis.failures[:50]
        )
        llm_html = (
            f"<h2>LLM analysis agent</h2><p>Model <code>{esc(llm['model'])}</code> at {esc(llm['base_url'])}: "
            f"{llm['runs']} runs, {llm['calls']} labelling calls, {llm['retried_calls']} needed a retry, "
            f"<b>{llm['failures']} failed</b> (left out of their run).</p><ul>{items}</ul>"
        )
    outcomes = ""
    if outcome_rows(analysis):
        outcomes = (
            "<h2>How the failed episodes ended</h2><p><small>Outcomes are not capabilities: a failure with no "
            "first failure is explained by its outcome.</small></p><table><tr><th></th><th></th>"
            "<th>failed episodes</th><th>share</th></tr>"
            + "".join(
                f"<tr><td>{esc(k)}</td><td>{esc(n)}</td><td>{c}</td><td>{sh:.1%}</td></tr>"
                for k, n, c, sh in outcome_rows(analysis)
            )
            + "</table>"
        )
    data = base64.b64encode(png).decode()
    selected = ", ".join(analysis.selection["selected"]) or "none"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Capability analysis of {esc(t["env_id"])}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
tr.sel td {{ background: #e8f5e9; font-weight: 600; }}
ol.conv li {{ margin: 0.2em 0; font-size: 0.85em; }}
li.user {{ color: #1a4d8f; }} li.tool {{ color: #666; }}
li.wrong {{ background: #ffebee; border-left: 4px solid #c62828; padding-left: 0.4em; font-weight: 600; }}
</style></head><body>
<h1>Capability analysis of {esc(t["env_id"])}</h1>
<p>{t["episodes"]} train-split episodes of {esc(", ".join(t["models"]))}: {t["passed"]} passed, {t["failed"]} failed.
Labels: <b>{esc(h["labeller"])}</b>. Kept when Cov &ge; {th["rho"]} and Delta &ge; {th["delta"]} in at least
{th["k"]} of {th["n"]} run(s).</p>
<p><b>Selected:</b> {esc(selected)}</p>
{table}
<p><small>Means over runs. *: no passed trajectory needed the capability, so ER+ is 0 by definition.</small></p>
{outcomes}
<img alt="Cov against Delta per capability" src="data:image/png;base64,{data}">
<h2>Per-run values</h2>{runs}
<h2>Example failures of the selected capabilities</h2><p><small>{esc(_where_note(analysis))}</small></p>
{examples or "<p>none selected</p>"}
<h2>Stage times (s)</h2><table>{times}</table>
{llm_html}
<script type="application/json" id="selection">{esc(json.dumps(analysis.selection["selected"]))}</script>
</body></html>
"""


def write_reports(analysis: Analysis) -> None:
    png = chart_png(analysis)
    out = Path(analysis.paths["report_md"]).parent
    (out / "chart.png").write_bytes(png)
    analysis.paths["chart"] = str(out / "chart.png")
    Path(analysis.paths["report_md"]).write_text(markdown(analysis, "chart.png"), encoding="utf-8")
    Path(analysis.paths["report_html"]).write_text(html_report(analysis, png), encoding="utf-8")
