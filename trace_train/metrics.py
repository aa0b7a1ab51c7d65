"""Metrics sinks: JSONL (always), TensorBoard (when available), and a rich progress bar."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import math
import os
import resource
import sys
from pathlib import Path
from typing import Any


class MetricsLogger:
    def __init__(self, out_dir: Path, enabled: bool = True, tensorboard: bool = True, total_steps: int = 0):
        self.enabled = enabled
        self.jsonl = None
        self.tb = None
        self.progress = None
        if not enabled:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = open(out_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
            except ImportError:
                self.tb = None
        if total_steps:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]GRPO"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
                transient=False,
            )
            self.task = self.progress.add_task("train", total=total_steps, status="")
            self.progress.start()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.progress is not None:
            status = f"reward {record.get('reward_mean') or 0:.3f} loss {record.get('loss') or 0:.4f}"
            self.progress.update(self.task, completed=step, status=status)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.jsonl is not None:
            self.jsonl.close()
        if self.tb is not None:
            self.tb.close()


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None  # strict JSON has no NaN (e.g. hint_reward_mean of a run without hints)
    return v


def reset_peak_rss() -> bool:
    """Start a new peak-memory window: after this, :func:`peak_rss_mb` is the peak since the call.

    Linux only (``/proc/self/clear_refs``, "5" resets the high-water mark); returns False where the OS does not
    allow it, and :func:`peak_rss_mb` then stays the peak since the process started.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def current_rss_mb() -> float:
    """Resident memory of this process now, in MiB (Linux ``/proc/self/statm``; the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def release_memory() -> float:
    """Hand freed memory back to the OS and return the resident MiB after it.

    The pipeline's stages share one process: glibc keeps the heap a finished stage freed (the demo's warm start
    left 16.7 GB resident while the next stage ran in 6.6 GB after a restart), so the next stage would start
    that much closer to the machine's limit. ``gc.collect`` drops cycles still holding tensors, ``malloc_trim``
    returns free heap pages (glibc only; a no-op elsewhere)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return current_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (or since :func:`reset_peak_rss`), in MiB (what every
    training/evaluation command reports)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # macOS: bytes; Linux: KiB


def cpu_name() -> str:
    """The CPU's model name and the native low-precision matmul it has (what decides `dtype = auto`)."""
    import platform

    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine(), platform.processor()):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    native = [f for f in ("amx_bf16", "avx512_bf16") if f in flags] or (["avx2"] if "avx2" in flags else [])
    return f"{name} ({', '.join(native) or 'no avx2'})"
