"""Start ``trace`` servers as real subprocesses on a free localhost port, for the interop tests."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


class ServerProcess:
    """``trace <args>`` in a subprocess; the first stdout line names the address (``... on http://h:p``)."""

    def __init__(self, *args: str, startup_timeout: float = 120.0):
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trace_gym.cli", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + startup_timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if " on http://" in line or self.proc.poll() is not None:
                break
        if " on http://" not in line:
            if self.proc.poll() is None:
                self.proc.kill()
            error = self.proc.stderr.read()[-2000:]
            self.stop()
            raise RuntimeError(f"server did not start: {line!r} {error}")
        self.url = line.strip().rsplit(" on ", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
