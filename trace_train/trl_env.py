"""trace envs in TRL's ``GRPOTrainer`` through its ``rollout_func`` hook.

TRL (>= 0.20, with the ``bench`` extra) offers two hooks for environments. ``environment_factory`` turns an
object's methods into tools and runs TRL's own tool loop: it has no place for the simulated user of a
conversational env (the episode would end at the first reply), and it needs a chat template with a tool-call
response parser. ``rollout_func`` hands the whole rollout to us, so trace's own multi-turn engine
(:func:`trace_train.rollout.collect`) plays the episodes, user simulator included, and the token ids go to TRL
exactly as sampled: the policy's tokens with ``env_mask`` 1, the env's replies with 0, the sampler's log-probs
alongside. ::

    from trl import GRPOConfig, GRPOTrainer
    from trace_train.trl_env import TraceRollout

    rollout = TraceRollout("trace/retail-v2", max_turns=8)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=rollout.reward,                     # the env's verifier reward of each episode
        train_dataset=rollout.dataset(range(256)),       # one row per train-split seed
        rollout_func=rollout,
        args=GRPOConfig(num_generations=4, max_completion_length=256, ...),
    )

Seed groups: TRL repeats each dataset row ``num_generations`` times, and every repeat of a row resets the env
with the row's seed, so the G completions of a group share one task (seed-grouped GRPO). The dataset's
``prompt`` is the instance's opening conversation (system prompt and first user turn), so TRL's logs show what
the agent saw; rollouts are matched to their seed through it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import gymnasium as gym

from trace_train.policies.base import SamplingConfig
from trace_train.rollout import ResetSpec, Trajectory, collect


def _key(prompt: Any) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


class TraceRollout:
    """A ``rollout_func`` for TRL's GRPOTrainer that plays trace episodes (see the module docstring)."""

    def __init__(
        self,
        env_id: str,
        max_turns: int = 8,
        max_total_tokens: int = 4096,
        split: str = "train",
        hint: bool = False,
        make_kwargs: dict[str, Any] | None = None,
    ):
        import trace_gym  # noqa: F401 - registers the envs
        from trace_gym.registration import resolve_env_id

        if split == "test":
            raise ValueError("training must not see test seeds: use split='train'")
        self.env_id = resolve_env_id(env_id)
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens
        self.split = split
        self.hint = hint
        self.make_kwargs = dict(make_kwargs or {})
        self.seed_of: dict[str, int] = {}
        self.envs: list[gym.Env] = []
        self.last: list[Trajectory] = []
        self.__name__ = f"trace_rollout[{self.env_id}]"  # TRL logs callables by name

    def dataset(self, seeds: Iterable[int]):
        """A ``datasets.Dataset`` with one row per seed: ``prompt`` (the opening conversation) and ``seed``."""
        import datasets

        env = gym.make(self.env_id, **self.make_kwargs)
        rows = []
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed), options=self._spec(int(seed)).options())
            prompt = [{"role": m["role"], "content": m.get("content") or ""} for m in obs]
            self.seed_of[_key(prompt)] = int(seed)
            rows.append({"prompt": prompt, "seed": int(seed)})
        env.close()
        return datasets.Dataset.from_list(rows)

    def _spec(self, seed: int) -> ResetSpec:
        return ResetSpec(seed=seed, hint=self.hint, split=self.split)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        seeds = []
        for prompt in prompts:
            seed = self.seed_of.get(_key(prompt))
            if seed is None:
                raise ValueError(
                    "a prompt that TraceRollout.dataset() did not make reached the rollout; build the train "
                    "dataset with rollout.dataset(seeds)"
                )
            seeds.append(seed)
        while len(self.envs) < len(seeds):
            self.envs.append(gym.make(self.env_id, **self.make_kwargs))
        policy = self._policy(trainer)
        args = trainer.args
        sampling = SamplingConfig(
            temperature=float(args.temperature),
            top_p=float(args.top_p),
            top_k=int(args.top_k or 0),
            max_new_tokens=int(args.max_completion_length),
        )
        trajectories = collect(
            policy,
            self.envs[: len(seeds)],
            [self._spec(s) for s in seeds],
            sampling,
            max_turns=self.max_turns,
            max_total_tokens=self.max_total_tokens,
        )
        self.last = trajectories
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        out["trace_reward"] = []
        for traj in trajectories:
            ids, mask = traj.token_ids, traj.policy_mask
            start = mask.index(1) if 1 in mask else len(ids)  # the prompt ends where the policy first speaks
            out["prompt_ids"].append(ids[:start])
            out["completion_ids"].append(ids[start:])
            out["env_mask"].append(mask[start:])
            out["logprobs"].append([0.0 if math.isnan(lp) else lp for lp in traj.sampler_logprobs[start:]])
            out["trace_reward"].append(float(traj.reward))
        return out

    @staticmethod
    def _policy(trainer: Any):
        from trace_train.policies.hf import HFPolicy

        model = (
            trainer.accelerator.unwrap_model(trainer.model)
            if hasattr(trainer, "accelerator")
            else trainer.model
        )
        return HFPolicy(
            model, trainer.processing_class, name="trl", merge_for_generation=False, engine="simple"
        )

    @staticmethod
    def reward(completions: list[Any], trace_reward: list[float] | None = None, **kwargs: Any) -> list[float]:
        """The reward function to pass to GRPOTrainer: each episode's verifier reward from the rollout."""
        if trace_reward is None:
            raise ValueError(
                "TraceRollout.reward needs rollout_func=TraceRollout(...) (no 'trace_reward' field)"
            )
        return [float(r) for r in trace_reward]
