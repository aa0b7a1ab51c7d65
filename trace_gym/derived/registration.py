"""Ids of target-derived capability envs: ``trace/<target-name>-<capability>-v0``.

Nothing is registered built-in: ``trace synthesize`` emits each derived env into a plugin package
(``generated_envs/``), whose sub-package registers the id with the spec's kwargs, so every id has one
registration. :func:`register_derived` registers ids in-process (tests, experiments) without emitting.
"""

from __future__ import annotations

from trace_gym.registration import NAMESPACE, register_env

ENTRY_POINT = "trace_gym.derived.env:DerivedCapabilityEnv"


def derived_id(target_id: str, capability: str, version: int = 0) -> str:
    """``trace/bfcl-multi-turn-v0`` + ``information-retrieval`` -> ``trace/bfcl-multi-turn-information-retrieval-v0``."""
    name = target_id.removeprefix(f"{NAMESPACE}/").rsplit("-v", 1)[0]
    return f"{NAMESPACE}/{name}-{capability}-v{version}"


def register_derived(target_id: str, capabilities: tuple[str, ...] | list[str]) -> list[str]:
    """Register one capability env per capability of ``target_id``; returns the ids."""
    ids = []
    for capability in capabilities:
        env_id = derived_id(target_id, capability)
        register_env(
            env_id, entry_point=ENTRY_POINT, kwargs={"target_id": target_id, "capability": capability}
        )
        ids.append(env_id)
    return ids
