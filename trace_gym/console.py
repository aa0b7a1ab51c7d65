"""The CLI's rich console: a terminal's width on a terminal; piped or redirected, wide enough that a table never
cuts an env id or a description (grep and scripts read every character)."""

from __future__ import annotations

import sys

from rich.console import Console

PIPED_WIDTH = 10_000


def make_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)
