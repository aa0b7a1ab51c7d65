"""Start ``trace`` servers as real subprocesses on a free localhost port, for the interop tests."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


# The server commands' own entry points: ``trace <command>`` imports every part of the CLI (some import torch and
# transformers at import time), which costs seconds per server start; test_interop_cli checks the registration.
ENTRY = {"env-serve": "trace_gym.interop.commands", "serve": "trace_train.serve.commands"}


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
            [sys.executable, "-m", ENTRY[args[0]], *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + startup_timeout
        line, output = "", []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            output.append(line)
            if " on http://" in line or (not line and self.proc.poll() is not None):
                break
        if " on http://" not in line:
            if self.proc.poll() is None:
                self.proc.kill()
            error = self.proc.stderr.read()[-2000:]
            self.stop()
            raise RuntimeError(f"server did not start: {''.join(output)!r} {error}")
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
