"""The runtime half of "trust nothing": ``trace check`` of an env module in a separate, limited process.

:func:`check_in_sandbox` runs ``python -m trace_gym.synthesis.sandbox`` on a module file with a CPU-time limit
(``RLIMIT_CPU``), an address-space limit (``RLIMIT_AS``), a wall-clock timeout, no bytecode writes, and an
audit hook (PEP 578) installed before the module is imported that refuses file writes, sockets, subprocesses,
file-system changes, ``ctypes`` and new audit hooks. Any refusal fails the module even if it caught the
error. The child registers the env class under a private id, runs the whole validation suite, and prints one
JSON object on its last line; the parent turns every way of dying (timeout, CPU limit, memory, a refused
operation, a crash) into a :class:`SandboxResult` with a readable ``reason``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DENIED_EVENTS = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.remove",
    "os.unlink",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "os.symlink",
    "os.link",
    "os.putenv",
    "os.unsetenv",
    "shutil.",
    "ctypes.",
    "sys.addaudithook",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "webbrowser.",
    "pty.",
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
RESULT_MARK = "TRACE-SANDBOX-RESULT "


@dataclass
class Limits:
    cpu_seconds: int = 120
    memory_bytes: int = 3 * 1024**3
    wall_seconds: float = 600.0  # generous: a loaded machine slows the wall clock, not the CPU clock


@dataclass
class SandboxResult:
    passed: bool
    reason: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)  # the env's tool names, read in the sandbox

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "checks": self.checks, "refused": self.refused}


def check_in_sandbox(
    module_path: str | os.PathLike,
    class_name: str,
    *,
    seeds: int = 50,
    difficulty: int | None = None,
    limits: Limits | None = None,
) -> SandboxResult:
    """Validate the env class ``class_name`` of the module file in a limited subprocess."""
    limits = limits or Limits()
    command = [
        sys.executable,
        "-B",
        "-m",
        "trace_gym.synthesis.sandbox",
        str(Path(module_path).resolve()),
        class_name,
        str(seeds),
        "" if difficulty is None else str(difficulty),
    ]
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ("PATH", "PYTHONPATH", "HOME", "LANG", "VIRTUAL_ENV", "TRACE_CACHE")
    }
    env.update(
        PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TRACE_POOL_CACHE="read",  # a derived env reads the source pool its parent scanned; writing is refused
    )

    def limit() -> None:  # runs in the child between fork and exec
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=limits.wall_seconds,
            env=env,
            preexec_fn=limit,
            cwd=Path(module_path).resolve().parent,
        )
    except subprocess.TimeoutExpired:
        return SandboxResult(
            False, f"timed out: no result within the wall-clock limit of {limits.wall_seconds:g} s"
        )
    marked = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode < 0 or not marked:
        return SandboxResult(False, _death(done.returncode, done.stderr, limits))
    payload = json.loads(marked[-1][len(RESULT_MARK) :])
    return SandboxResult(
        payload["passed"], payload["reason"], payload["checks"], payload["refused"], payload.get("tools", [])
    )


def _death(code: int, stderr: str, limits: Limits) -> str:
    tail = stderr.strip().splitlines()[-3:]
    if code in (-signal.SIGXCPU, -signal.SIGKILL) and "MemoryError" not in stderr:
        return f"killed at the CPU-time limit of {limits.cpu_seconds} s (an endless loop?)"
    if "MemoryError" in stderr:
        return f"ran out of memory (limit {limits.memory_bytes / 1024**3:.1f} GiB)"
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return "the module could not be loaded or validated: " + (" | ".join(tail) or f"exit status {code}")


# ---- the child ------------------------------------------------------------------------------------------------
def _install_guard(refused: list[str]) -> None:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        denied = any(event == d or (d.endswith(".") and event.startswith(d)) for d in DENIED_EVENTS)
        if event == "open" and len(args) >= 3:
            mode, flags = args[1], args[2]
            writing = (
                any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
            )
            denied = denied or writing
            if writing:
                event = f"open for writing {args[0]!r}"
        if denied:
            refused.append(event)
            raise PermissionError(f"sandbox: {event} is not allowed in a generated env")

    sys.addaudithook(hook)


def _child(module_path: str, class_name: str, seeds: int, difficulty: int | None) -> dict[str, Any]:
    import importlib.util

    import gymnasium as gym

    import trace_gym  # noqa: F401 - registers built-ins before the guard (their imports read files)
    from trace_gym.core.validation import ValidationConfig, validate_env

    refused: list[str] = []
    _install_guard(refused)
    spec = importlib.util.spec_from_file_location("trace_candidate_env", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any failure of untrusted code is a verdict, not a crash
        return {"passed": False, "reason": f"import failed: {err!r}", "checks": [], "refused": refused}
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not issubclass(cls, gym.Env):
        return {
            "passed": False,
            "reason": f"the module defines no gymnasium.Env subclass named {class_name!r}",
            "checks": [],
            "refused": refused,
        }
    try:
        tools = [tool["function"]["name"] for tool in cls().tools]
    except Exception as err:  # noqa: BLE001
        return {
            "passed": False,
            "reason": f"the env cannot be built: {err!r}",
            "checks": [],
            "refused": refused,
        }
    env_id = "trace/sandbox-candidate-v0"
    gym.register(env_id, entry_point=cls, kwargs={} if difficulty is None else {"difficulty": difficulty})
    config = ValidationConfig(seeds=seeds, degenerate_seeds=seeds, degenerate_max_mean=0.02)
    results = validate_env(env_id, config)
    checks = [
        {"name": r.name, "passed": r.passed, "figure": r.figure, "detail": r.detail[:2000]} for r in results
    ]
    failed = [r for r in results if not r.passed]
    if refused:
        reason = f"refused operations: {', '.join(sorted(set(refused)))}"
    elif failed:
        reason = "; ".join(
            f"{r.name}: {r.figure} {r.detail.splitlines()[0] if r.detail else ''}".strip() for r in failed[:5]
        )
    else:
        reason = f"all {len(results)} checks passed"
    return {
        "passed": not failed and not refused,
        "reason": reason,
        "checks": checks,
        "refused": sorted(set(refused)),
        "tools": tools,
    }


if __name__ == "__main__":
    path, name, n_seeds, level = sys.argv[1:5]
    outcome = _child(path, name, int(n_seeds), int(level) if level else None)
    sys.stdout.write(RESULT_MARK + json.dumps(outcome) + "\n")
    sys.stdout.flush()
