"""Progress that reads well both in a terminal (a rich bar) and in a log file (plain lines).

In a TTY the bar redraws in place. Elsewhere (CI, ``nohup``, ``| tee``) redrawing makes unreadable logs, so the
same calls print one plain line at most every ``every_s`` seconds and at the end, e.g.
``[adapters] 12/40 (30%) 95 s elapsed, ~221 s left - reward 0.312``.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, TextIO


def is_tty(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


class Bar:
    def __init__(self, label: str, total: int, stream: TextIO, tty: bool, every_s: float = 10.0):
        self.label, self.total, self.stream, self.tty, self.every_s = (
            label,
            max(0, total),
            stream,
            tty,
            every_s,
        )
        self.done, self.status = 0, ""
        self.started = time.monotonic()
        self._last_print = 0.0
        self._rich = None
        if tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._rich = Progress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
                console=Console(file=stream),
            )
            self._task = self._rich.add_task(label, total=self.total or None, status="")
            self._rich.start()

    def advance(self, n: int = 1, status: str | None = None) -> None:
        self.update(self.done + n, status)

    def update(self, done: int, status: str | None = None) -> None:
        self.done = done
        if status is not None:
            self.status = status
        if self._rich is not None:
            self._rich.update(self._task, completed=done, status=self.status)
            return
        now = time.monotonic()
        if now - self._last_print >= self.every_s or (self.total and done >= self.total):
            self._last_print = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        text = f"[{self.label}] {self.done}/{self.total}" if self.total else f"[{self.label}] {self.done}"
        if self.total:
            text += f" ({100 * self.done / self.total:.0f}%)"
        text += f" {elapsed:.0f} s elapsed"
        if self.total and 0 < self.done < self.total:
            text += f", ~{elapsed / self.done * (self.total - self.done):.0f} s left"
        return text + (f" - {self.status}" if self.status else "")

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


class Reporter:
    """Stage-level messages and bars; ``tty=None`` detects it from the stream."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None, every_s: float = 10.0):
        self.stream = stream or sys.stdout
        self.tty = is_tty(self.stream) if tty is None else tty
        self.every_s = every_s

    def line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    @contextmanager
    def bar(self, label: str, total: int) -> Any:
        bar = Bar(label, total, self.stream, self.tty, self.every_s)
        try:
            yield bar
        finally:
            bar.close()
