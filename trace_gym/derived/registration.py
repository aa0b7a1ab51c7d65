"""Ids of target-derived capability envs: ``trace/<target-name>-<capability>-v0``."""

from __future__ import annotations

from trace_gym.registration import NAMESPACE, register_env

ENTRY_POINT = "trace_gym.derived.env:DerivedCapabilityEnv"
# target id -> the capabilities its derived envs isolate (the target's task_capabilities() vocabulary)
TARGETS: dict[str, tuple[str, ...]] = {
    "trace/bfcl-multi-turn-v0": (
        "state-changing-calls",
        "information-retrieval",
        "missing-function-awareness",
        "missing-parameter-awareness",
    ),
}


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


def register_envs() -> list[str]:
    """The built-in derived ids (called by ``import trace_gym``)."""
    return [env_id for target, caps in TARGETS.items() for env_id in register_derived(target, caps)]
