"""Batched multi-turn rollouts with token ids kept end to end.

Every turn, all unfinished conversations go through one batched generation call of an engine:

- ``cached`` (default, :mod:`trace_train.engine`): one KV cache per conversation kept across turns and a shared
  system/tools prefix prefilled once, so a turn prefills only the env's new tokens;
- ``simple``: one left-padded ``generate`` call per turn that re-prefills every whole conversation;
- or any ``generator`` callable (a vLLM server, SFT's teacher).

The trajectory's ids are the initial prompt, then for each turn the generated ids exactly as sampled (mask 1),
then the env's reply tokenised as a delta (mask 0). Nothing the policy generated is ever re-tokenised.
``sampler_logprobs`` holds the sampler's log-prob of each generated token (0.0 on env tokens, NaN where the
generator did not report one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from trace_gym.records import trajectory_record
from trace_gym.registration import tools_of
from trace_train.policies.base import Conversation, SamplingConfig, as_conversation
from trace_train.policies.hf import HFPolicy


@dataclass(frozen=True)
class ResetSpec:
    seed: int
    group: int = 0
    hint: bool = False
    split: str = "train"
    difficulty: int | None = None

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"split": self.split}
        if self.hint:
            opts["hint"] = True
        if self.difficulty is not None:
            opts["difficulty"] = self.difficulty
        return opts


@dataclass
class Trajectory:
    spec: ResetSpec
    token_ids: list[int] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)  # 1 where the policy generated the token
    # the sampler's log-prob of each policy token at the sampling temperature (after top-k/top-p), aligned with
    # token_ids; 0.0 where policy_mask is 0, NaN where the generator reported none (SFT teacher, some servers)
    sampler_logprobs: list[float] = field(default_factory=list)
    system_len: int = 0  # tokens of the system segment at the start of token_ids
    base_system_ids: list[int] | None = None  # the un-hinted system segment (hint rollouts only)
    messages: Conversation = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    turns: int = 0
    invalid_actions: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def generated_tokens(self) -> int:
        return sum(self.policy_mask)

    def training_ids(self) -> tuple[list[int], list[int]]:
        """Ids and mask to train on: hint rollouts get their system segment swapped for the base one."""
        if self.base_system_ids is None:
            return self.token_ids, self.policy_mask
        ids = self.base_system_ids + self.token_ids[self.system_len :]
        mask = [0] * len(self.base_system_ids) + self.policy_mask[self.system_len :]
        return ids, mask

    def training_sampler_logprobs(self) -> list[float]:
        """``sampler_logprobs`` aligned with :meth:`training_ids` (the swapped system segment gets 0.0)."""
        if self.base_system_ids is None:
            return self.sampler_logprobs
        return [0.0] * len(self.base_system_ids) + self.sampler_logprobs[self.system_len :]

    def to_json(self) -> dict[str, Any]:
        """The trajectory as a record of :mod:`trace_gym.records` (token ids stay out)."""
        return trajectory_record(
            seed=self.spec.seed,
            split=self.spec.split,
            reward=self.reward,
            messages=self.messages,
            info=self.info,
            group=self.spec.group,
            hint=self.spec.hint,
            turns=self.turns,
            terminated=self.terminated,
            truncated=self.truncated,
            invalid_actions=self.invalid_actions,
            generated_tokens=self.generated_tokens,
            actions=self.actions,
        )


# generate(prompts, active trajectory indices, turn) -> new ids per prompt, or (new ids, their log-probs)
GeneratorOutput = list[list[int]] | tuple[list[list[int]], list[list[float]]]
Generator = Callable[[list[list[int]], list[int], int], GeneratorOutput]
ENGINES = ("cached", "simple")


def _split_output(out: GeneratorOutput, n: int) -> tuple[list[list[int]], list[list[float]] | None]:
    if isinstance(out, tuple):
        ids, logprobs = out
        return ids, (logprobs if logprobs else None)
    return out, None


@dataclass
class RolloutStats:
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    generate_calls: int = 0


def collect(
    policy: HFPolicy,
    envs: Sequence[gym.Env],
    specs: Sequence[ResetSpec],
    sampling: SamplingConfig,
    max_turns: int = 8,
    max_total_tokens: int = 4096,
    generator: Generator | None = None,
    stats: RolloutStats | None = None,
    engine: str | None = None,
) -> list[Trajectory]:
    """Run one episode per (env, spec) pair, batching generation across all unfinished episodes.

    ``engine``: ``cached`` or ``simple`` (default: the policy's ``engine`` attribute, else ``cached``); ignored
    when a ``generator`` is given.
    """
    if len(envs) != len(specs):
        raise ValueError("one env per reset spec")
    stats = stats if stats is not None else RolloutStats()
    gen = generator or _engine_generator(policy, sampling, engine or getattr(policy, "engine", "cached"))
    episodes = [_Episode.begin(policy, env, spec) for env, spec in zip(envs, specs, strict=True)]
    active = list(range(len(episodes)))
    turn = 0
    while active and turn < max_turns:
        outputs, logprobs = _generate(gen, [episodes[i].traj.token_ids for i in active], active, turn, stats)
        t0 = time.perf_counter()
        still = [
            i
            for k, i in enumerate(active)
            if episodes[i].advance(
                policy, outputs[k], logprobs[k] if logprobs else None, max_turns, max_total_tokens, stats
            )
        ]
        stats.env_seconds += time.perf_counter() - t0
        active = still
        turn += 1
    return [e.traj for e in episodes]


def stream_collect(
    policy: HFPolicy,
    envs: Sequence[gym.Env],
    specs: Sequence[ResetSpec],
    sampling: SamplingConfig,
    max_turns: int = 8,
    max_total_tokens: int = 4096,
    stats: RolloutStats | None = None,
    engine: str | None = None,
    on_finish: Callable[[int, Trajectory, gym.Env], None] | None = None,
) -> list[Trajectory]:
    """Run one episode per spec with at most ``len(envs)`` at once (continuous batching): when an episode ends,
    its env starts the next spec and that conversation joins the running batch at the next turn (on the
    cached engine when its prompt starts with the batch's kept shared prefix; otherwise it waits for the batch
    to drain and a new session starts). Each episode runs exactly as in :func:`collect`; ``on_finish(i,
    trajectory, env)`` is called as episode ``i`` ends, before its env is reused. Returns the trajectories in
    ``specs`` order."""
    if not envs:
        raise ValueError("stream_collect needs at least one env")
    stats = stats if stats is not None else RolloutStats()
    engine = engine or getattr(policy, "engine", "cached")
    pending = list(range(len(specs)))[::-1]  # popped from the end: specs in order
    free = list(range(len(envs)))[::-1]
    episodes: dict[int, _Episode] = {}
    env_of: dict[int, int] = {}
    waiting: list[int] = []  # begun (env reset), not yet generating
    active: list[int] = []
    done: dict[int, Trajectory] = {}
    gen, used, step = None, False, 0
    while pending or waiting or active:
        while free and pending:
            i, e = pending.pop(), free.pop()
            episodes[i], env_of[i] = _Episode.begin(policy, envs[e], specs[i]), e
            waiting.append(i)
        if not active:  # a fresh session for whoever waits
            if gen is None or used:
                # the kept shared prefix stops at the system/tools segment, so later conversations can join
                cap = min(episodes[i].traj.system_len for i in waiting) or None
                gen, used = _engine_generator(policy, sampling, engine, prefix_cap=cap), False
            active, waiting = waiting, []
        else:
            can_join = getattr(gen, "can_join", None)
            joining = [i for i in waiting if can_join is not None and can_join(episodes[i].traj.token_ids)]
            active += joining
            waiting = [i for i in waiting if i not in joining]
        outputs, logprobs = _generate(gen, [episodes[i].traj.token_ids for i in active], active, step, stats)
        used, step = True, step + 1
        t0 = time.perf_counter()
        still = []
        for k, i in enumerate(active):
            ep = episodes[i]
            if ep.advance(
                policy, outputs[k], logprobs[k] if logprobs else None, max_turns, max_total_tokens, stats
            ):
                still.append(i)
                continue
            done[i] = ep.traj
            if on_finish is not None:
                on_finish(i, done[i], ep.env)
            free.append(env_of.pop(i))
            del episodes[i]
        stats.env_seconds += time.perf_counter() - t0
        active = still
    return [done[i] for i in range(len(specs))]


def _generate(
    gen: Generator, prompts: list[list[int]], active: list[int], turn: int, stats: RolloutStats
) -> tuple[list[list[int]], list[list[float]] | None]:
    t0 = time.perf_counter()
    outputs, logprobs = _split_output(gen(prompts, active, turn), len(active))
    stats.generate_seconds += time.perf_counter() - t0
    stats.generate_calls += 1
    if len(outputs) != len(active) or (logprobs is not None and len(logprobs) != len(active)):
        raise ValueError(f"the generator answered {len(outputs)} prompts of {len(active)}")
    return outputs, logprobs


@dataclass
class _Episode:
    """One conversation of a rollout: its env, trajectory and tool list."""

    env: gym.Env
    traj: Trajectory
    tools: list[dict[str, Any]]

    @classmethod
    def begin(cls, policy: HFPolicy, env: gym.Env, spec: ResetSpec) -> _Episode:
        renderer = policy.renderer
        obs, info = env.reset(seed=spec.seed, options=spec.options())
        conv = as_conversation(obs)
        env_tools = tools_of(env, info)
        head, rest = renderer.prompt_segments(conv, env_tools)
        n_prompt = len(head) + len(rest)
        traj = Trajectory(
            spec=spec, token_ids=head + rest, policy_mask=[0] * n_prompt, sampler_logprobs=[0.0] * n_prompt
        )
        traj.system_len, traj.messages = len(head), conv
        base = info.get("base_system_prompt")
        is_hinted = conv and conv[0].get("role") == "system" and conv[0].get("content") != base
        if spec.hint and base is not None and head and is_hinted:
            traj.base_system_ids = renderer.system_segment(base, conv[1:], env_tools)
        return cls(env, traj, env_tools)

    def advance(
        self,
        policy: HFPolicy,
        new_ids: list[int],
        lps: list[float] | None,
        max_turns: int,
        max_total_tokens: int,
        stats: RolloutStats,
    ) -> bool:
        """Apply one generated turn and the env's answer; returns whether the conversation goes on."""
        traj = self.traj
        traj.token_ids += new_ids
        traj.policy_mask += [1] * len(new_ids)
        lps = lps if lps is not None else [math.nan] * len(new_ids)
        if len(lps) != len(new_ids):
            raise ValueError(f"{len(lps)} log-probs for {len(new_ids)} generated tokens")
        traj.sampler_logprobs += [float(x) for x in lps]
        stats.generated_tokens += len(new_ids)
        text = policy.decode(new_ids)
        traj.actions.append(text)
        traj.turns += 1
        obs, reward, terminated, truncated, info = self.env.step(text)
        traj.reward = float(reward)
        traj.invalid_actions += int(bool(info.get("invalid_action")))
        n_before = len(traj.messages)
        if isinstance(obs, str):  # text env: we keep the conversation ourselves
            conv = [
                *traj.messages,
                {"role": "assistant", "content": text},
                {"role": "user", "content": obs},
            ]
        else:
            conv = as_conversation(obs)
            if len(conv) <= n_before:  # env returned no history (e.g. a terminal empty obs): keep ours
                conv = [*traj.messages, {"role": "assistant", "content": text}]
        traj.messages = conv
        if terminated or truncated:
            traj.terminated, traj.truncated, traj.info = bool(terminated), bool(truncated), _plain(info)
            return False
        ended = bool(new_ids) and new_ids[-1] in policy.eos_ids
        delta = policy.renderer.continuation(conv, n_before, self.tools, ended_with_eos=ended)
        traj.token_ids += delta
        traj.policy_mask += [0] * len(delta)
        traj.sampler_logprobs += [0.0] * len(delta)
        if len(traj.token_ids) >= max_total_tokens or traj.turns >= max_turns:
            traj.truncated, traj.info = True, _plain(info)
            return False
        return True


def _engine_generator(
    policy: HFPolicy, sampling: SamplingConfig, engine: str, prefix_cap: int | None = None
) -> Generator:
    """The policy's own ``generate_with_logprobs`` for ``simple``; for ``cached``, the policy's
    ``engine_session(sampling)`` when it has one (policies that customise decoding on the cached engine, e.g.
    a router that serves each episode with one adapter), else its own ``generate_with_logprobs`` when it
    overrides it, else the cached engine."""
    custom = type(policy).generate_with_logprobs is not HFPolicy.generate_with_logprobs
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")
    own_session = getattr(policy, "engine_session", None)
    if engine == "cached" and callable(own_session):
        return own_session(sampling, prefix_cap=prefix_cap)
    if engine == "simple" or custom:
        return lambda prompts, _idx, _turn: policy.generate_with_logprobs(prompts, sampling)
    if engine == "cached":
        from trace_train.engine import engine_for

        return engine_for(policy).session(sampling, prefix_cap=prefix_cap)
    raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")


def _plain(info: dict[str, Any]) -> dict[str, Any]:
    """Keep the JSON-friendly part of an info dict for trajectory files."""
    keep = {}
    # first_failure and outcome: step 1's diagnosis (issue 28), which trace analyze reads from the records
    for k in ("reward_components", "requirements", "invalid_action", "first_failure", "outcome"):
        if k in info:
            keep[k] = info[k]
    return keep
