"""The run's report: ``report.md`` (with PNGs beside it) and a self-contained ``report.html`` (PNGs inlined).

Every figure comes from a file a stage wrote in this run: the analysis selection and chart, the synthesis
cards, the calibration table, each adapter's GRPO metrics, the gate metrics, the evaluation table, and each
stage's ``stage.json`` (wall time, peak memory). Nothing is typed in by hand.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (file name, png)
    after: list[str] = field(default_factory=list)  # paragraphs after the tables and images


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def p_value(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def line_plot(series: dict[str, list[float | None]], xlabel: str, ylabel: str, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=110)
    for name, ys in series.items():
        pts = [(i + 1, y) for i, y in enumerate(ys) if y is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def bar_plot(labels: list[str], values: list[float], errors: list[tuple[float, float]], title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=110)
    lows = [v - lo for v, (lo, _hi) in zip(values, errors, strict=True)]
    highs = [hi - v for v, (_lo, hi) in zip(values, errors, strict=True)]
    ax.bar(range(len(values)), values, yerr=[lows, highs], capsize=4, color="#4c72b0")
    ax.set_xticks(range(len(values)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("test success (95% CI)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# ----- rendering --------------------------------------------------------------------------------------------
def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


def to_markdown(title: str, intro: list[str], sections: list[Section]) -> str:
    out = [f"# {title}", "", *[p + "\n" for p in intro]]
    for s in sections:
        out += [f"## {s.title}", ""]
        out += [p + "\n" for p in s.paragraphs]
        for header, rows in s.tables:
            out += [_md_table(header, rows), ""]
        out += [f"![{name}]({name})\n" for name, _png in s.images]
        out += [p + "\n" for p in s.after]
    return "\n".join(out).rstrip() + "\n"


def _inline_md(text: str) -> str:
    """The little Markdown the paragraphs use (code spans, bold) as HTML, everything else escaped."""
    text = html.escape(text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)


def to_html(title: str, intro: list[str], sections: list[Section]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;"
        "line-height:1.45}table{border-collapse:collapse;margin:1em 0;font-size:14px}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f3f3f3}"
        "td:first-child,th:first-child{text-align:left}code{background:#f3f3f3;padding:0 3px}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    parts += [f"<p>{_inline_md(p)}</p>" for p in intro]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts += [f"<p>{_inline_md(p)}</p>" for p in s.paragraphs]
        for header, rows in s.tables:
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
            parts.append("</table>")
        for name, png in s.images:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f"<p><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'></p>")
        parts += [f"<p>{_inline_md(p)}</p>" for p in s.after]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def check_tables(sections: list[Section]) -> None:
    """Every row has as many cells as its header: a missing header cell shifts every column after it."""
    for s in sections:
        for header, rows in s.tables:
            for row in rows:
                if len(row) != len(header):
                    raise ValueError(
                        f"report section {s.title!r}: a row has {len(row)} cells for {len(header)} columns "
                        f"({header}): {row}"
                    )


def write_report(out: Path, title: str, intro: list[str], sections: list[Section]) -> dict[str, str]:
    check_tables(sections)
    out.mkdir(parents=True, exist_ok=True)
    for s in sections:
        for name, png in s.images:
            (out / name).write_bytes(png)
    (out / "report.md").write_text(to_markdown(title, intro, sections), encoding="utf-8")
    (out / "report.html").write_text(to_html(title, intro, sections), encoding="utf-8")
    return {"md": str(out / "report.md"), "html": str(out / "report.html")}


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
