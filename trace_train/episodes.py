"""The one episode runner: any policy on any env id, finished episodes as trajectory records.

``trace rollout``, ``trace evaluate``, the pipeline's rollouts and evaluation all run episodes here:

* a local transformers policy (:class:`~trace_train.policies.hf.HFPolicy`) goes through the trainer's batched
  engine (:func:`trace_train.rollout.stream_collect`): one generate call per turn for every running episode,
  token ids kept end to end, a finished episode's slot starting the next task;
* any other policy (an OpenAI-compatible server, ``py:`` policies) and the scripted agents go through a
  text-level loop with the same continuous batching: one ``act`` call per turn for the running episodes.

Each episode becomes one record of :mod:`trace_gym.records`, handed to ``on_record`` the moment it ends (so a
writer can persist it at once); the records are also returned in task order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from trace_gym.records import trajectory_record
from trace_gym.registration import make_env, tools_of
from trace_train.policies.base import SamplingConfig, as_conversation
from trace_train.policies.scripted import ScriptedAgent
from trace_train.rollout import ResetSpec, stream_collect

RecordSink = Callable[[dict[str, Any]], None]


def make_envs(
    env_id: str, n: int, max_turns: int | None = None, stop_when_decided: bool = False
) -> list[gym.Env]:
    """``n`` envs of ``env_id``; with ``max_turns`` each gets its own turn limit set to it where it takes one, so
    an episode cut by the limit is still scored and labelled by the env (trace's chat envs report requirements
    on truncation). ``stop_when_decided``: each env ends an episode once its reward can no longer change
    (``ChatToolEnv.decided``); an env that cannot tell is refused."""
    extra = {"stop_when_decided": True} if stop_when_decided else {}
    if extra:
        try:
            make_env(env_id, **extra).close()
        except TypeError:
            raise ValueError(
                f"{env_id} cannot tell when an episode's outcome is decided (its constructor takes no "
                "stop_when_decided argument): leave --stop-when-decided off for it"
            ) from None
    envs = []
    for _ in range(n):
        env = None
        if max_turns is not None:
            try:
                env = make_env(env_id, max_turns=max_turns, **extra)
            except TypeError:  # an env without a max_turns argument: the runner's own limit applies
                env = None
        envs.append(env if env is not None else make_env(env_id, **extra))
    return envs


def run_episodes(
    policy: Any,
    env_id: str,
    specs: Sequence[ResetSpec],
    sampling: SamplingConfig,
    *,
    max_turns: int,
    batch_size: int,
    max_total_tokens: int = 32768,
    env_turn_limit: bool = False,
    on_record: RecordSink | None = None,
    fields: dict[str, Any] | None = None,
    stop_when_decided: bool = False,
) -> list[dict[str, Any]]:
    """One episode per spec, at most ``batch_size`` at once; returns their records in ``specs`` order.

    ``env_turn_limit`` makes each env with ``max_turns`` as its own limit, ``stop_when_decided`` ends each episode
    once its outcome is decided (see :func:`make_envs`); ``fields``
    are added to every record (e.g. the run's settings); ``on_record`` receives each record as its episode ends.
    """
    if not specs:
        return []
    fields = {"env_id": env_id, "model": getattr(policy, "name", None), **(fields or {})}
    envs = make_envs(
        env_id, max(1, min(batch_size, len(specs))), max_turns if env_turn_limit else None, stop_when_decided
    )
    records: dict[int, dict[str, Any]] = {}

    def finished(i: int, record: dict[str, Any]) -> None:
        records[i] = record
        if on_record is not None:
            on_record(record)

    try:
        from trace_train.policies.hf import HFPolicy

        if isinstance(policy, HFPolicy):
            _engine_episodes(policy, envs, specs, sampling, max_turns, max_total_tokens, fields, finished)
        else:
            _text_episodes(policy, envs, specs, sampling, max_turns, fields, finished)
    finally:
        for env in envs:
            env.close()
    return [records[i] for i in range(len(specs))]


def _engine_episodes(policy, envs, specs, sampling, max_turns, max_total_tokens, fields, finished) -> None:
    def on_finish(i: int, traj: Any, env: gym.Env) -> None:
        # read from the env before it is reused: its tools and, when the engine cut the episode (token budget)
        # before the env ended it, its score as it stands (as the env scores a turn-limit cut)
        cut = None
        if "requirements" not in traj.info and callable(getattr(env.unwrapped, "_evaluate", None)):
            scored = env.unwrapped._evaluate()
            traj.info = {
                **traj.info,
                "reward_components": dict(scored.components),
                "requirements": dict(scored.requirements),
            }
            if callable(getattr(env.unwrapped, "first_failure", None)):  # step 1's diagnosis (issue 28)
                traj.info["first_failure"] = env.unwrapped.first_failure()
                traj.info["outcome"] = env.unwrapped.outcome(float(scored.reward), None)
            # which of the engine's caps ended it: the turn cap, or the conversation's token budget
            traj.reward = float(scored.reward)
            cut = "max_total_tokens" if len(traj.token_ids) >= max_total_tokens else "max_turns"
        record = traj.to_json()
        record.update(fields, tools=list(getattr(env.unwrapped, "tools", None) or []), cut=cut)
        finished(i, record)

    stream_collect(policy, envs, specs, sampling, max_turns, max_total_tokens, on_finish=on_finish)


def _text_episodes(policy, envs, specs, sampling, max_turns, fields, finished) -> None:
    """Up to ``len(envs)`` episodes in flight; a finished episode is recorded at once and its slot refilled."""
    queue = list(enumerate(specs))
    slots: dict[int, dict[str, Any]] = {}
    scripted = isinstance(policy, ScriptedAgent)

    def start(slot: int) -> None:
        index, spec = queue.pop(0)
        env = envs[slot]
        obs, info = env.reset(seed=spec.seed, options=spec.options())
        if scripted:
            policy.begin(slot, env)
        slots[slot] = {
            "index": index,
            "spec": spec,
            "messages": as_conversation(obs),
            "tools": tools_of(env, info),
            "turns": 0,
            "invalid": 0,
            "t0": time.perf_counter(),
        }

    for slot in range(len(envs)):
        if queue:
            start(slot)
    while slots:
        active = sorted(slots)
        if scripted:
            actions = policy.act_slots(active)
        else:
            actions = policy.act(
                [slots[s]["messages"] for s in active], [slots[s]["tools"] for s in active], sampling
            )
        for slot, action in zip(active, actions, strict=True):
            state = slots[slot]
            obs, reward, terminated, truncated, info = envs[slot].step(action)
            state["turns"] += 1
            state["invalid"] += int(bool(info.get("invalid_action")))
            if isinstance(obs, str):
                text = action if isinstance(action, str) else json.dumps(action)
                state["messages"] += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": obs},
                ]
            else:
                state["messages"] = as_conversation(obs)
            out_of_turns = state["turns"] >= max_turns
            if not (terminated or truncated or out_of_turns):
                continue
            spec = state["spec"]
            record = trajectory_record(
                seed=spec.seed,
                split=spec.split,
                reward=float(reward),
                messages=state["messages"],
                info=info,
                group=spec.group,
                hint=spec.hint,
                turns=state["turns"],
                terminated=bool(terminated),
                truncated=bool(truncated) or (out_of_turns and not terminated),
                invalid_actions=state["invalid"],
                tools=state["tools"],
                timing={"seconds": round(time.perf_counter() - state["t0"], 4), "finished_at": time.time()},
                **fields,
            )
            del slots[slot]
            finished(state["index"], record)
            if queue:
                start(slot)
