"""Format conformity (issue 26): a capability env that declares a target meets the agent in the target's format.

An env declares its target with a ``target_id`` attribute (the registered id of the target env) and names,
after each reset, its source target task in ``info["source"]``: ``seed`` (the target's seed), ``split``
(default ``"train"``) and ``prefix_actions`` (how many of the target oracle's actions were replayed before the
agent starts, default 0). ``target_kwargs`` (optional) are passed to ``gym.make`` of the target. On each seed
a fresh target is reset on that source task with the same prefix replayed, and four things must be identical:

* ``system_prompt``: the first (system) message, except for the env's declared ``per_instance_fields``
  (``{name: regex}``; every match is masked in both prompts before comparing; default none);
* ``tools``: the env's ``tools`` and the ``info["tools"]`` offered after reset: same names, same JSON schemas,
  same count, same order;
* ``user_simulator``: the same class and the same configuration (:func:`user_config`);
* ``observation``: the whole observation after reset (the conversation so far, prefix included; the declared
  fields of its system message masked as above).

A difference is reported by what differs first: the line of the prompt, the tool, the user setting, the
message. An env without a declared target is not checked (the check reports it as skipped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from trace_gym.worlds.user import UserSimulator

ASPECTS = ("system_prompt", "tools", "user_simulator", "observation")
MASK = "<{name}>"
SHOWN = 90  # characters of a differing line shown in a reason


class ConformityError(ValueError):
    """The env declares a target but does not say which target task an instance comes from."""


@dataclass
class Comparison:
    """Per aspect: seeds compared, seeds identical, and the first reason a seed differed."""

    seeds: int = 0
    identical: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ASPECTS, 0))
    reasons: dict[str, str] = field(default_factory=dict)
    tool_count: int | None = None
    user_class: str | None = None

    def add(self, seed: int, differences: dict[str, str | None]) -> None:
        self.seeds += 1
        for aspect, reason in differences.items():
            if reason is None:
                self.identical[aspect] += 1
            else:
                self.reasons.setdefault(aspect, f"seed {seed}: {reason}")


# ---- what an env declares --------------------------------------------------------------------------------------
def declared_target(env: Any) -> str | None:
    """The target id the env declares (``target_id``), or None."""
    target = getattr(env, "target_id", None)
    return target if isinstance(target, str) and target else None


def per_instance_fields(env: Any) -> dict[str, str]:
    """``{name: regex}`` of the system-prompt fields the env declares may differ from the target's."""
    return dict(getattr(env, "per_instance_fields", None) or {})


def user_simulator(env: Any) -> UserSimulator | None:
    """The env's user simulator: ``user_simulator`` if declared, else its episode's user, else (an env built on
    its target, like the derived env) the user of the env it holds in ``target``."""
    declared = getattr(env, "user_simulator", None)
    if isinstance(declared, UserSimulator):
        return declared
    episode = getattr(env, "episode", None)
    if isinstance(getattr(episode, "user", None), UserSimulator):
        return episode.user
    inner = getattr(env, "target", None)
    if inner is not None and inner is not env and isinstance(inner, gym.Env):
        return user_simulator(inner)
    return None


def user_class(user: Any) -> str:
    return "none" if user is None else f"{type(user).__module__}.{type(user).__qualname__}"


def user_config(user: Any, depth: int = 0) -> dict[str, Any]:
    """The simulator's settings: its public plain-valued attributes (str, numbers, bool, None, and tuples or
    lists of them), and those of the simulators it holds (an LLM user inside retail's). Clients, callables and
    the env are left out: two instances of one simulator differ there without behaving differently."""
    config: dict[str, Any] = {}
    for name, value in sorted(vars(user).items()) if hasattr(user, "__dict__") else ():
        if name.startswith("_"):
            continue
        if _plain(value):
            config[name] = value
        elif isinstance(value, UserSimulator) and depth < 3:
            config[name] = {"class": user_class(value), **user_config(value, depth + 1)}
    return config


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    return isinstance(value, tuple | list) and all(_plain(v) for v in value)


def source_of(env: Any, info: Mapping[str, Any]) -> dict[str, Any]:
    """The source target task of the instance just reset: ``{seed, split, prefix_actions}``."""
    source = info.get("source")
    if not isinstance(source, Mapping) or not isinstance(source.get("seed"), int):
        raise ConformityError(
            f"{type(env).__name__} declares the target {declared_target(env)!r} but its reset names no source "
            'target task: info["source"] needs the target seed ("seed") and the prefix replayed ("prefix_actions")'
        )
    target = source.get("target", declared_target(env))
    if target != declared_target(env):
        raise ConformityError(
            f"info['source'] names the target {target!r}, the env declares {declared_target(env)!r}"
        )
    return {
        "seed": int(source["seed"]),
        "split": str(source.get("split", "train")),
        "prefix_actions": int(source.get("prefix_actions", 0)),
    }


# ---- the reference: the target on the same source task, the same prefix replayed --------------------------------
def make_target(env: Any) -> Any:
    target = declared_target(env)
    assert target is not None
    kwargs = dict(getattr(env, "target_kwargs", None) or {})
    return gym.make(target, disable_env_checker=True, **kwargs).unwrapped


def replay_source(target: Any, source: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Reset the target on the source task and replay its oracle's first ``prefix_actions`` actions."""
    obs, info = target.reset(seed=source["seed"], options={"split": source["split"]})
    for action in list(target.oracle_actions())[: source["prefix_actions"]]:
        obs, _, terminated, truncated, info = target.step(action)
        if terminated or truncated:
            break
    return obs, info


# ---- differences, each named by what differs first -----------------------------------------------------------------
def system_prompt(obs: list[dict[str, Any]]) -> str | None:
    first = obs[0] if obs else {}
    return str(first.get("content")) if first.get("role") == "system" else None


def mask(text: str, fields: Mapping[str, str]) -> str:
    for name, pattern in fields.items():
        text = re.sub(pattern, MASK.format(name=name), text)
    return text


def prompt_difference(mine: str | None, theirs: str | None, fields: Mapping[str, str]) -> str | None:
    if mine is None or theirs is None:
        return (
            None
            if mine == theirs
            else ("the env has no system message" if mine is None else "the target has none")
        )
    a, b = mask(mine, fields).splitlines(), mask(theirs, fields).splitlines()
    for number, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            column = next(
                (i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y))
            )
            start = max(0, column - SHOWN // 3)  # show the line around its first differing character
            return (
                f"line {number}, column {column + 1} differs: env {x[start : start + SHOWN]!r}, "
                f"target {y[start : start + SHOWN]!r}"
            )
    if len(a) != len(b):
        line = len(min(a, b, key=len)) + 1
        extra = (a if len(a) > len(b) else b)[line - 1]
        who = "env" if len(a) > len(b) else "target"
        return f"line {line} only in the {who}'s prompt: {extra[:SHOWN]!r} ({len(a)} lines vs {len(b)})"
    return None if mask(mine, fields) == mask(theirs, fields) else "whitespace at the end differs"


def _name(tool: Mapping[str, Any]) -> str:
    return str((tool.get("function") or tool).get("name"))


def tools_difference(
    mine: list[dict[str, Any]], theirs: list[dict[str, Any]], where: str = "tools"
) -> str | None:
    """The first difference between two tool lists: a missing or extra tool, the order, or a schema path."""
    names, target_names = [_name(t) for t in mine], [_name(t) for t in theirs]
    missing = [n for n in target_names if n not in names]
    if missing:
        return f"{where}: the env lacks the target's tool {missing[0]!r} ({len(mine)} tools, the target {len(theirs)})"
    extra = [n for n in names if n not in target_names]
    if extra:
        return f"{where}: the env adds the tool {extra[0]!r} ({len(mine)} tools, the target {len(theirs)})"
    if len(names) != len(target_names):
        return f"{where}: {len(mine)} tools, the target {len(theirs)} (a tool listed twice)"
    for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if _name(a) != _name(b):
            return f"{where}: the order differs at position {index}: env {_name(a)!r}, target {_name(b)!r}"
        path = _first_difference(a, b)
        if path is not None:
            return f"{where}: the schema of {_name(a)!r} differs at {path}"
    return None


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}/{key} (only in the {'target' if key not in a else 'env'})"
            found = _first_difference(a[key], b[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{path} ({len(a)} entries vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _first_difference(x, y, f"{path}/{i}")
            if found:
                return found
        return None
    if type(a) is not type(b) or a != b:
        return f"{path or '/'}: env {json.dumps(a, default=str)[:SHOWN]}, target {json.dumps(b, default=str)[:SHOWN]}"
    return None


def user_difference(mine: Any, theirs: Any) -> str | None:
    if user_class(mine) != user_class(theirs):
        return f"the env's user simulator is {user_class(mine)}, the target's {user_class(theirs)}"
    if mine is None:
        return None
    path = _first_difference(user_config(mine), user_config(theirs))
    return None if path is None else f"the user simulator's config differs at {path}"


def observation_difference(mine: list[Any], theirs: list[Any]) -> str | None:
    for index, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        path = _first_difference(a, b)
        if path is not None:
            return f"message {index} ({a.get('role') if isinstance(a, Mapping) else '?'}) differs at {path}"
    if len(mine) != len(theirs):
        return f"{len(mine)} messages after reset, the target {len(theirs)} after the same prefix"
    return None


def masked(obs: list[Any], fields: Mapping[str, str]) -> list[Any]:
    """The observation with the declared per-instance fields of its system message masked."""
    if not fields or system_prompt(obs) is None:
        return list(obs)
    return [{**obs[0], "content": mask(str(obs[0]["content"]), fields)}, *obs[1:]]


def compare(env: Any, info: Mapping[str, Any], obs: list[Any], target: Any) -> dict[str, str | None]:
    """Every aspect's difference (None: identical) between the env just reset and the target on its source."""
    source = source_of(env, info)
    ref_obs, ref_info = replay_source(target, source)
    fields = per_instance_fields(env)
    tools = tools_difference(list(env.tools), list(target.tools))
    if tools is None and ("tools" in info or "tools" in ref_info):
        tools = tools_difference(
            list(info.get("tools") or []), list(ref_info.get("tools") or []), "info['tools']"
        )
    return {
        "system_prompt": prompt_difference(system_prompt(obs), system_prompt(ref_obs), fields),
        "tools": tools,
        "user_simulator": user_difference(user_simulator(env), user_simulator(target)),
        "observation": observation_difference(masked(obs, fields), masked(ref_obs, fields)),
    }


def check_conformity(
    env: Any, seeds: range | list[int], reset: Callable[[Any, int], tuple[list[Any], dict[str, Any]]]
) -> Comparison:
    """Compare the env with its declared target on each seed (``reset(env, seed)`` resets it)."""
    target = make_target(env)
    result = Comparison()
    for seed in seeds:
        obs, info = reset(env, seed)
        result.add(seed, compare(env, info, obs, target))
        result.tool_count = len(env.tools)
        result.user_class = type(user_simulator(env)).__name__
    target.close()
    return result
