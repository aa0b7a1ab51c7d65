"""Registration of trace envs: built-ins, and plugins advertised through the ``trace_gym.envs`` entry points.

Gymnasium 1.x has no plugin loading of its own, so ``import trace_gym`` does it: ``gym.make("trace_gym:trace/x-v0")``
imports this package first, which registers everything, then looks the id up.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

ENTRY_POINT_GROUP = "trace_gym.envs"
NAMESPACE = "trace"


def register_env(env_id: str, entry_point: str, **kwargs: Any) -> None:
    """Register ``env_id`` unless it already is (importing a plugin twice must not warn)."""
    if not env_id.startswith(f"{NAMESPACE}/"):
        raise ValueError(
            f"trace env ids live in the {NAMESPACE!r} namespace: {NAMESPACE}/<name>-v<N>, got {env_id!r}"
        )
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, **kwargs)


def load_plugins() -> list[str]:
    """Load every ``trace_gym.envs`` entry point; a broken plugin is reported, never fatal to the import."""
    loaded = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = entry.load()
            if callable(target):
                target()
            loaded.append(entry.name)
        except Exception as err:  # noqa: BLE001 - one broken plugin must not hide the others
            warnings.warn(
                f"trace_gym plugin {entry.name!r} ({entry.value}) failed to load: {err!r}", stacklevel=2
            )
    return loaded


@dataclass(frozen=True)
class EnvCard:
    id: str
    capability: str
    description: str


def resolve_env_id(env_id: str) -> str:
    """Import the ``module:`` prefix of an id if any, check the id is registered, return the bare id.

    Raises ``gymnasium.error.Error`` subclasses with Gymnasium's own message (which suggests close ids).
    """
    import importlib

    module, sep, bare = env_id.partition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise gym.error.Error(f"cannot import {module!r} for env id {env_id!r}: {err}") from err
    else:
        bare = env_id
    try:
        gym.spec(bare)
    except gym.error.Error as err:
        known = ", ".join(trace_env_ids()) or "none"
        raise gym.error.Error(f"unknown env id {bare!r} ({err}). Registered trace envs: {known}") from None
    return bare


def set_target_kwargs(env_id: str, target_kwargs: dict[str, Any]) -> bool:
    """Re-register a derived env id (one whose spec has ``target_kwargs``) so that its target is made with
    ``target_kwargs``, for the rest of this process; returns whether the registration changed.

    A derived package registers its target with the kwargs it was written with (a committed package: the
    target's defaults, difficulty 2 for retail-v2), while a run may train on another target difficulty: this is
    how a pipeline run and ``--target-difficulty`` make the id theirs. An id without a target is an error that
    names it."""
    bare = resolve_env_id(env_id)
    spec = gym.spec(bare)
    kwargs = dict(spec.kwargs or {})
    if "target_kwargs" not in kwargs:
        raise gym.error.Error(
            f"{bare} is not derived from a target (its registration has no target_kwargs): a target "
            "difficulty applies to derived envs only; set the env's own difficulty instead"
        )
    if dict(kwargs["target_kwargs"] or {}) == dict(target_kwargs):
        return False
    gym.registry[bare] = dataclasses.replace(spec, kwargs={**kwargs, "target_kwargs": dict(target_kwargs)})
    return True


def use_target_difficulty(env_id: str, difficulty: int | None) -> None:
    """``--target-difficulty``: a derived env's target at ``difficulty`` (None: as registered)."""
    if difficulty is None:
        return
    bare = resolve_env_id(env_id)
    current = dict(gym.spec(bare).kwargs.get("target_kwargs") or {})
    set_target_kwargs(env_id, {**current, "difficulty": difficulty})


def trace_env_ids() -> list[str]:
    return sorted(env_id for env_id in gym.registry if env_id.startswith(f"{NAMESPACE}/"))


def env_card(env_id: str) -> EnvCard:
    """Id, capability and one-line description of a registered env, read from its class."""
    spec = gym.spec(env_id)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    if hasattr(creator, "card"):  # one class behind many ids (adapters) describes each id from its kwargs
        capability, description = creator.card(dict(spec.kwargs))
        return EnvCard(env_id, capability, description)
    description = (getattr(creator, "description", "") or (creator.__doc__ or "")).strip().splitlines()
    return EnvCard(env_id, getattr(creator, "capability", ""), description[0] if description else "")


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for ``ns/name-vN`` and ``module:ns/name-vN``, trace's own envs registered first, without
    Gymnasium's env checker (its passive checks reject text actions; ``trace check`` runs the real one).
    Importing this module imported ``trace_gym`` first, which registered the built-in envs and plugins."""
    return gym.make(env_id, disable_env_checker=True, **kwargs)


def tools_of(env: gym.Env, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The OpenAI function schemas of an env: ``info["tools"]``, else ``env.unwrapped.tools``, else none."""
    tools = info.get("tools")
    if tools is None:
        tools = getattr(env.unwrapped, "tools", None)
    return list(tools or [])
