"""Env ids the interop tests use: the newest registered retail target (versions move as the target evolves)."""

import gymnasium as gym

import trace_gym  # noqa: F401 - registers the envs


def newest(name: str) -> str:
    versions = [int(e.rsplit("-v", 1)[1]) for e in gym.registry if e.startswith(f"trace/{name}-v")]
    if not versions:
        raise LookupError(f"no trace/{name}-vN is registered")
    return f"trace/{name}-v{max(versions)}"


RETAIL = newest("retail")
CAPABILITY = newest(
    "retail-precondition-checking"
)  # a step-2 capability env derived from retail (generated_envs)
