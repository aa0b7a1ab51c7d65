"""Seed-grouped GRPO for one LoRA adapter against any chat/text Gymnasium env.

One step:
  1. collect ``groups_per_step`` groups of ``group_size`` rollouts; a group shares one seed (one task), and
     its first ``round(hint_fraction * group_size)`` members are reset with ``options={"hint": True}``;
  2. count groups whose rewards are all equal and, with dynamic sampling, replace them with fresh groups;
  3. advantages normalised inside each group; hint rollouts are trained on the base system prompt;
  4. ``ppo_epochs`` passes over the batch, ``num_minibatches`` optimiser steps per pass, each accumulated
     over micro-batches; optional k3 KL against the base model (the same weights with the adapter off);
  5. metrics, and an atomic checkpoint every ``save_every`` steps.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import resource
import time
from pathlib import Path
from typing import Any

import torch

from trace_gym.registration import make_env, use_target_difficulty
from trace_gym.seeds import check_train_tasks, train_reset_seed
from trace_train.ceiling import fill_caps, oracle_ceiling, require_ceiling
from trace_train.config import GRPOArgs
from trace_train.engine.attention import replay_attention
from trace_train.grpo.advantages import group_advantages, informative_groups
from trace_train.grpo.checkpoint import load_checkpoint, save_checkpoint
from trace_train.grpo.curriculum import LevelCurriculum, RewardChoice, env_levels, success_of
from trace_train.grpo.logprobs import (
    PrefixKV,
    pad_batch,
    sequence_logprobs,
    shared_prefix_length,
    shared_prefix_logprobs,
)
from trace_train.grpo.losses import (
    global_normaliser,
    normaliser,
    policy_loss,
    token_weights,
    truncated_is_weights,
)
from trace_train.grpo.rescue import MAIN, TARGET, GroupSpec, n_rescue, rescue_weights
from trace_train.metrics import MetricsLogger
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy, ensure_lora
from trace_train.rollout import ResetSpec, RolloutStats, Trajectory, collect
from trace_train.roofline import LEDGER, PhaseWork, account, account_metrics


class NonFiniteError(FloatingPointError):
    pass


def _peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class GRPOTrainer:
    """Readable GRPO loop. Works with one process or under ``accelerate launch`` (data parallel)."""

    def __init__(self, args: GRPOArgs, policy: HFPolicy | None = None, accelerator=None):
        from accelerate import Accelerator

        self.args = args
        use_target_difficulty(args.env_id, args.target_difficulty)  # before any env of it is made
        self.loss_cfg = args.loss_config()
        self.acc = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        self.rank, self.world = self.acc.process_index, self.acc.num_processes
        set_reproducible(args.num_threads, args.deterministic)
        torch.manual_seed(args.seed * 1009 + self.rank)  # ranks sample differently
        if policy is None:
            policy = HFPolicy.from_pretrained(
                args.model, adapter=args.init_adapter, lora=args.lora(), dtype=args.dtype
            )
        else:
            policy.model = ensure_lora(policy.model, args.lora(), args.init_adapter)
        self.policy = policy.configure(engine=args.engine, tool_format=args.tool_format)
        # caps left out are fitted to the env's oracle, counted in this policy's tokens (ceiling.fill_caps)
        self.args = args = fill_caps(args, self.policy.renderer, args.env_id, args.difficulty)
        self.policy.model.to(self.acc.device)
        if args.gradient_checkpointing:
            enable_gradient_checkpointing(self.policy.model)
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
        self.model, self.optimizer = self.acc.prepare(policy.model, self.optimizer)
        self.policy.model = self.acc.unwrap_model(self.model)  # generation uses the bare PeftModel
        self.sampling = SamplingConfig(
            temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens
        )
        n_envs = args.groups_per_step * args.group_size
        self.envs = [make_env(args.env_id) for _ in range(n_envs)]
        # issue 29 (curriculum.py, rescue.py): reward choice, adaptive level, target mixing; refused up front
        self.reward_choice = RewardChoice.parse(args.reward)
        self.shaped_keys = {MAIN: self.reward_choice.shaped_key(self.envs[0], args.env_id)}
        self.curriculum = None
        if args.curriculum == "adaptive":
            levels = env_levels(self.envs[0])
            self.curriculum = LevelCurriculum(
                args.env_id,
                levels,
                args.curriculum_target,
                args.curriculum_ema,
                advance=args.curriculum_advance,
                start=args.difficulty,
                group_size=args.group_size,
            )
        self._check_ceiling()
        self.n_target = round(args.target_share * args.groups_per_step) if args.target_env_id else 0
        self.target_envs = [make_env(args.target_env_id) for _ in range(self.n_target * args.group_size)]
        if self.target_envs:  # the target is scored by what it declares (its success reward if no shaping)
            self.shaped_keys[TARGET] = self.reward_choice.shaped_key(
                self.target_envs[0], args.target_env_id, required=False
            )
        self.state: dict[str, Any] = {
            "step": 0,
            "next_task": 0,
            "skipped_steps": 0,
            "next_target_task": 0,
            "rollouts": 0,
            "flops": 0.0,  # model compute spent so far (prefill, decode, training): --flop-budget
            "tokens": 0,  # tokens through the model in those phases
        }
        # refuse up front a run whose tasks would leave the train split (the most it can take, refills included)
        refills = args.max_refill_rounds if args.dynamic_sampling else 0
        check_train_tasks(self.envs[0], 0, args.steps * args.groups_per_step * self.world * (1 + refills))
        if self.target_envs:
            check_train_tasks(self.target_envs[0], 0, args.steps * self.n_target * self.world * (1 + refills))
        self.out = Path(args.out)
        if args.resume:
            self.state = load_checkpoint(
                Path(args.resume), self.policy.model, self.optimizer, self._config(), self.rank, self.world
            )
            self.state.setdefault("next_target_task", 0)
            self.state.setdefault("rollouts", 0)
            self.state.setdefault("flops", 0.0)
            self.state.setdefault("tokens", 0)
            if self.curriculum is not None:
                self.curriculum.load_state_dict(self.state.get("curriculum", {}))
        self.remote = None
        self._gen_calls = 0
        if args.vllm_url:
            self._connect_vllm()

    # ----- generation on a vLLM server (optional) ---------------------------------------------------------
    def _connect_vllm(self) -> None:
        from trace_gym.openai_client import OpenAIClient
        from trace_train.policies.remote_generation import RemoteGenerator

        a = self.args
        self.remote = RemoteGenerator(
            a.vllm_url,
            self.policy.eos_ids,
            served_model=a.vllm_model,  # checked when given (a local --model path is not a served name)
            model_hint=a.model,
            lora_rank=a.lora_rank,
            adapter_dir=a.vllm_adapter_dir or self.out / "vllm_adapters",
            lora_prefix=a.vllm_lora_name,
            client=OpenAIClient(base_url=a.vllm_url, timeout=a.vllm_timeout, max_retries=a.vllm_retries),
        )
        self.remote.check_server()  # reachable, and serving vllm_model when given
        # and not another local model: its sampled ids would mean other tokens to the trainer
        from trace_train.models import resolve_model
        from trace_train.policies.served import check_served_base

        check_served_base(self.remote, resolve_model(a.model), a.vllm_model)
        self._publish_adapter()  # the server generates with the current (initial or resumed) adapter

    def _publish_adapter(self) -> None:
        """Main process saves and hot-loads the adapter; every rank then addresses the new name."""
        step = self.state["step"]
        if self.acc.is_main_process:
            self.remote.publish(self.policy.model, step)
        else:
            self.remote.lora_name = f"{self.args.vllm_lora_name}-step-{step}"
        self.acc.wait_for_everyone()

    def _generator(self):
        """The rollout generator: ``None`` (local decoding) or one that asks the vLLM server."""
        if self.remote is None:
            return None
        a, sampling = self.args, self.sampling

        def generate(
            prompts: list[list[int]], active: list[int], turn: int
        ) -> tuple[list[list[int]], list[list[float]]]:
            # one seed per trajectory, a function of (seed, rank, step, call, turn): distinct inside a group
            # (identical prompts) and reproducible on resume
            self._gen_calls += 1
            key = (a.seed, self.rank, self.state["step"], self._gen_calls, turn)
            base = hash(key) % 2**30  # tuples of ints hash deterministically (no PYTHONHASHSEED salt)
            # the server's log-probs (where it sends them) feed the truncated importance correction
            return self.remote.generate_with_logprobs(prompts, sampling, seeds=[base + i for i in active])

        return generate

    def _config(self) -> dict[str, Any]:
        return dataclasses.asdict(self.args)

    # ----- rollouts ---------------------------------------------------------------------------------
    def _group_specs(
        self, task_indices: list[int], source: int = MAIN, first_group: int = 0
    ) -> list[ResetSpec]:
        """G reset specs per task: the env's groups (``MAIN``, at the curriculum's level when it is adaptive) or
        the mixed-in target's (``TARGET``, at its default level)."""
        a = self.args
        if not task_indices:
            return []
        n_hint = round(a.hint_fraction * a.group_size)
        env = self.envs[0] if source == MAIN else self.target_envs[0]
        levels = [a.difficulty if source == MAIN else None] * len(task_indices)
        if source == MAIN and self.curriculum is not None:
            levels = self.curriculum.choose_round(len(task_indices))
        specs = []
        for g, (task, level) in enumerate(zip(task_indices, levels, strict=True)):
            seed = train_reset_seed(task, env)  # the guard: never a test seed
            for j in range(a.group_size):
                specs.append(
                    GroupSpec(
                        seed=seed,
                        group=first_group + g,
                        hint=j < n_hint,
                        split="train",
                        difficulty=level,
                        source=source,
                    )
                )
        return specs

    def _check_ceiling(self) -> None:
        """Refuse caps that cut the oracle's own episodes (ceiling.py): every level this run can train at,
        on its first train tasks; a group of such tasks scores 0 whatever the policy does."""
        a = self.args
        if not a.min_oracle_ceiling:
            return
        levels = self.curriculum.levels if self.curriculum is not None else [a.difficulty]
        for level in levels:
            ceiling = oracle_ceiling(
                self.policy.renderer,
                a.env_id,
                tasks=16,
                difficulty=level,
                max_new_tokens=a.max_new_tokens,
                max_turns=a.max_turns,
            )
            require_ceiling(ceiling, a.min_oracle_ceiling, f"GRPO on {a.env_id}")

    def _take_tasks(self, n: int, source: int = MAIN) -> list[int]:
        """Task indices for this rank: interleaved across ranks so no two ranks train the same seed (the env's
        and the mixed-in target's tasks are counted apart)."""
        key = "next_task" if source == MAIN else "next_target_task"
        base = self.state[key]
        self.state[key] = base + n * self.world
        return [base + self.rank + self.world * j for j in range(n)]

    def _envs_for(self, specs: list[ResetSpec]) -> list:
        """One env instance per spec, from the pool of the spec's source."""
        pools = {MAIN: iter(self.envs), TARGET: iter(self.target_envs)}
        return [next(pools[getattr(s, "source", MAIN)]) for s in specs]

    def _train_reward(self, t: Trajectory) -> float:
        """The reward a rollout is trained on (``--reward``), from what its env declares."""
        return self.reward_choice.of(t.reward, t.info, self.shaped_keys.get(getattr(t.spec, "source", MAIN)))

    def _budget_left(self) -> float:
        """Rollouts left: by the rollout budget, and by the FLOP budget at the mean FLOPs per rollout so far
        (before the first step there is no mean, so the first step is whole)."""
        a = self.args
        left = a.rollout_budget - self.state["rollouts"] if a.rollout_budget else math.inf
        if a.flop_budget:
            remaining = a.flop_budget - self.state["flops"]
            if remaining <= 0:
                return 0
            if self.state["rollouts"]:
                left = min(left, remaining / (self.state["flops"] / self.state["rollouts"]))
        return left

    def _groups_that_fit(self) -> tuple[int, int]:
        """(groups, of which from the target) for the next step: ``groups_per_step``, or fewer in the step that
        would overspend the rollout budget (the target's share kept, rounded down), so arms compared at one
        budget never differ by a step's worth of rollouts."""
        a = self.args
        n_groups = a.groups_per_step
        budget = self._budget_left()
        if math.isfinite(budget):
            n_groups = min(n_groups, max(int(budget // a.group_size), 0))
        return n_groups, n_groups * self.n_target // a.groups_per_step

    def _collect(self, specs: list[ResetSpec], stats: RolloutStats) -> list[Trajectory]:
        """Roll ``specs`` out, count them in the rollout budget and feed the un-hinted ones' success to the
        curriculum's estimates (every rollout sampled, also those dynamic sampling discards)."""
        a = self.args
        trajs = collect(
            self.policy,
            self._envs_for(specs),
            specs,
            self.sampling,
            a.max_turns,
            a.max_total_tokens,
            generator=self._generator(),
            stats=stats,
        )
        self.state["rollouts"] += len(trajs)
        if self.curriculum is not None:
            # one update per (env, level) of this round, its groups pooled (curriculum.py: order-free)
            outcomes: dict[tuple[str | None, int | None], list[tuple[int, bool]]] = collections.defaultdict(
                list
            )
            for t in trajs:
                if not t.spec.hint:
                    env_id = a.env_id if getattr(t.spec, "source", MAIN) == MAIN else a.target_env_id
                    outcomes[(env_id, t.spec.difficulty)].append((t.spec.group, success_of(t.reward)))
            for (env_id, level), pairs in outcomes.items():
                wins = sum(won for _, won in pairs)
                self.curriculum.update(level, wins, len(pairs), env_id, groups=len({g for g, _ in pairs}))
        return trajs

    def _rescue(
        self, trajs: list[Trajectory], stats: RolloutStats
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Groups where no rollout succeeded get ``n_rescue`` members re-sampled with the env's hint (rescue.py):
        the last members are replaced (un-hinted ones first), so the group keeps G rollouts."""
        a = self.args
        k = n_rescue(a.rescue_fraction, a.group_size)
        groups = sorted({t.spec.group for t in trajs})
        if not k:
            return trajs, {}
        failed = [g for g in groups if not any(success_of(t.reward) for t in trajs if t.spec.group == g)]
        budget = self._budget_left()
        failed = failed[: int(budget // k) if math.isfinite(budget) else len(failed)]
        metrics = {"rescued_groups": len(failed), "rescued_group_share": len(failed) / max(len(groups), 1)}
        if not failed:
            return trajs, metrics
        specs = []
        for g in failed:
            first = next(t.spec for t in trajs if t.spec.group == g)
            specs += [dataclasses.replace(first, hint=True, rescue=True) for _ in range(k)]
        fresh = self._collect(specs, stats)
        for g in failed:
            members = [t for t in trajs if t.spec.group == g]
            drop = {id(t) for t in members[len(members) - k :]}
            trajs = [t for t in trajs if id(t) not in drop] + [t for t in fresh if t.spec.group == g]
        info = informative_groups([self._train_reward(t) for t in trajs], [t.spec.group for t in trajs])
        metrics["rescue_success_rate"] = _mean([float(success_of(t.reward)) for t in fresh])
        metrics["rescued_informative_share"] = _mean([float(info[g]) for g in failed])
        return trajs, metrics

    def collect_groups(self, stats: RolloutStats) -> tuple[list[Trajectory], dict[str, float]]:
        a = self.args
        n_groups, n_target = self._groups_that_fit()
        n_main = n_groups - n_target
        specs = self._group_specs(self._take_tasks(n_main), MAIN)
        specs += self._group_specs(self._take_tasks(n_target, TARGET), TARGET, first_group=n_main)
        self._gen_calls = 0
        rollouts_before = self.state["rollouts"]
        # sampling depends on (seed, rank, step) only: a resumed run samples what the uninterrupted one did
        torch.manual_seed(_step_seed(a.seed, self.rank, self.state["step"]))
        trajs = self._collect(specs, stats)
        trajs, rescue_metrics = self._rescue(trajs, stats)
        source = {t.spec.group: getattr(t.spec, "source", MAIN) for t in trajs}
        info = informative_groups([self._train_reward(t) for t in trajs], [t.spec.group for t in trajs])
        equal_groups = sum(not v for v in info.values())
        refilled = 0
        for _ in range(a.max_refill_rounds if a.dynamic_sampling else 0):
            new_specs: list[ResetSpec] = []
            dead_of: dict[int, list[int]] = {}
            taken = 0
            for src in (MAIN, TARGET):
                dead = [g for g, ok in info.items() if not ok and source[g] == src]
                # all ranks take the same number of tasks so the shared task counter stays aligned across ranks
                n_take = len(dead)
                if self.world > 1:
                    n_take = int(
                        self.acc.gather(torch.tensor([len(dead)], device=self.acc.device)).max().item()
                    )
                taken += n_take
                # refills count in the rollout budget: no more groups than it has left
                room = self._budget_left() // a.group_size - len(new_specs) // a.group_size
                n_fit = min(len(dead), int(max(room, 0)) if math.isfinite(room) else len(dead))
                tasks = self._take_tasks(n_take, src)[:n_fit]
                new_specs += self._group_specs(tasks, src, first_group=len(new_specs) // a.group_size)
                dead_of[src] = dead
            if taken == 0:
                break
            if not new_specs:
                continue
            fresh = self._collect(new_specs, stats)
            fresh_info = informative_groups(
                [self._train_reward(t) for t in fresh], [t.spec.group for t in fresh]
            )
            by_group = {g: [t for t in fresh if t.spec.group == g] for g in fresh_info}
            for src in (MAIN, TARGET):
                usable = [g for g, ok in fresh_info.items() if ok and by_group[g][0].spec.source == src]
                # an informative fresh group replaces a dead one of its own source
                for slot, new_g in zip(dead_of[src], usable, strict=False):
                    members = by_group[new_g]
                    for t in members:  # take over the dead group's id so group ids stay distinct
                        t.spec = dataclasses.replace(t.spec, group=slot)
                    trajs = [t for t in trajs if t.spec.group != slot] + members
                    info[slot] = True
                    refilled += 1
        rewards = torch.tensor([t.reward for t in trajs])
        metrics = {
            "reward_mean": rewards.mean().item(),
            "reward_std": rewards.std(unbiased=False).item(),
            "success_rate": (rewards >= 1.0).float().mean().item(),
            "equal_reward_groups": equal_groups,
            "refilled_groups": refilled,
            "informative_group_share": sum(info.values()) / len(info),
            "hint_reward_mean": _mean([t.reward for t in trajs if t.spec.hint]),
            "turns_mean": _mean([t.turns for t in trajs]),
            "invalid_actions_mean": _mean([t.invalid_actions for t in trajs]),
            "rollouts": self.state["rollouts"] - rollouts_before,  # refills and rescues included
            "rollouts_total": self.state["rollouts"],
            **rescue_metrics,
        }
        metrics.update(self._group_metrics(trajs))
        return trajs, metrics

    def _group_metrics(self, trajs: list[Trajectory]) -> dict[str, Any]:
        """The level of every trained group (JSONL: a list in group order; TensorBoard: counts per level and the
        curriculum's estimates), the training reward when it is not the env's, the mixed-in target's share."""
        a = self.args
        first = {}
        for t in trajs:
            first.setdefault(t.spec.group, t.spec)
        main = [first[g] for g in sorted(first) if getattr(first[g], "source", MAIN) == MAIN]
        out: dict[str, Any] = {}
        if self.curriculum is not None or a.difficulty is not None:
            levels = [s.difficulty for s in main]
            out["group_levels"] = levels
            known = [x for x in levels if x is not None]
            out["level_mean"] = _mean([float(x) for x in known])
            for k in sorted(set(known)):
                out[f"groups_at_level_{k}"] = levels.count(k)
        if self.curriculum is not None:
            out.update(self.curriculum.metrics())
        if self.reward_choice.mode != "success":
            out["train_reward_mean"] = _mean([self._train_reward(t) for t in trajs])
        if self.target_envs:
            target = [t for t in trajs if getattr(t.spec, "source", MAIN) == TARGET]
            out["target_groups"] = len(first) - len(main)
            out["target_group_share"] = (len(first) - len(main)) / max(len(first), 1)
            out["target_success_rate"] = _mean([float(success_of(t.reward)) for t in target])
        return out

    # ----- optimisation -----------------------------------------------------------------------------
    def _logprobs(self, model, seqs, masks, prefix: PrefixKV | None = None):
        pad = self.policy.tokenizer.pad_token_id
        # at the sampling temperature, with the sampler's top-p: the distribution the tokens came from
        if prefix is not None:
            return shared_prefix_logprobs(model, seqs, masks, pad, sampling=self.sampling, prefix=prefix)
        ids, attn, pmask = pad_batch(seqs, masks, pad)
        dev = self.acc.device
        share = self.args.engine != "simple"  # cached: the shared prefix once, packed rows (issue 9)
        return sequence_logprobs(
            model, ids.to(dev), attn.to(dev), pmask.to(dev), sampling=self.sampling, share_prefix=share
        )

    def _shareable_prefix(self, seqs, masks) -> int:
        """The length of the prefix ``seqs`` share (the task prompt within a group, the system/tools prompt
        across groups) when it can be computed once for their micro-batches: cached engine, one process (a
        backward outside the DDP wrapper would not be all-reduced); else 0."""
        if self.args.engine == "simple" or self.world > 1:
            return 0
        return shared_prefix_length(seqs, masks)

    def _batch_prefix(self, model, seqs, shared: int, n_micro: int) -> PrefixKV | None:
        """That prefix, computed once (with gradient when ``model`` trains) when there is more than one
        micro-batch to share it."""
        return PrefixKV.compute(model, seqs[0][:shared]) if shared and n_micro > 1 else None

    @torch.no_grad()
    def _frozen_logprobs(self, seqs, masks, ref: bool) -> list[torch.Tensor]:
        """Per-sequence log-probs of the policy tokens (1-D), without gradients: the old policy (ratio
        baseline) or the base model with the adapter disabled (KL reference)."""
        out: list[torch.Tensor] = []
        mb = self.args.micro_batch_size
        model = self.policy.model
        with model.disable_adapter() if ref else contextlib.nullcontext():
            shared = self._shareable_prefix(seqs, masks)
            prefix = self._batch_prefix(model, seqs, shared, math.ceil(len(seqs) / mb))
            for s in range(0, len(seqs), mb):
                logp, tmask = self._logprobs(model, seqs[s : s + mb], masks[s : s + mb], prefix)
                out += [row[m > 0] for row, m in zip(logp, tmask, strict=True)]
        return out

    def _all_reduce_sum(self, value: float) -> float:
        t = torch.tensor([float(value)], device=self.acc.device)
        return float(self.acc.reduce(t, reduction="sum").item())

    def optimise(self, trajs: list[Trajectory]) -> dict[str, float]:
        a, cfg = self.args, self.loss_cfg
        batch = [t.training_ids() for t in trajs]
        seqs = [ids[: a.max_total_tokens] for ids, _ in batch]
        masks = [m[: a.max_total_tokens] for _, m in batch]
        sampler = [_sampler_row(t, m) for t, m in zip(trajs, masks, strict=True)]
        adv = group_advantages(
            [self._train_reward(t) for t in trajs],
            [t.spec.group for t in trajs],
            scale_by_std=a.loss_type != "dr_grpo",
        )
        n = len(seqs)
        n_updates = a.ppo_epochs * a.num_minibatches
        # rows of an equal-reward group have advantage 0 and (without a KL term) exactly zero gradient: they
        # count in each minibatch's normaliser but are not passed forward and backward; when every row is such
        # (e.g. a task no rollout solves), no pass runs at all
        zero_rows = self._zero_gradient_rows(adv)
        if bool(zero_rows.all()):
            return self._zero_gradient_updates(n_updates)
        idle = zero_rows.tolist()
        gen = torch.Generator().manual_seed(a.seed * 7919 + self.state["step"])
        sums: dict[str, float] = dict.fromkeys(("clip_fraction", "kl"), 0.0)
        mismatch: dict[str, float] = dict.fromkeys(MISMATCH_KEYS, 0.0)  # its own dict: both have a "kl"
        losses: list[float] = []
        grad_norms: list[float] = []
        mismatch_max = 0.0
        mismatch_tokens = 0
        trained_tokens = 0
        t0 = time.perf_counter()
        self.model.train()
        old_cache: dict[int, torch.Tensor] = {}
        ref_cache: dict[int, torch.Tensor] = {}
        # with one optimiser update per batch the old policy *is* the current one: use detached log-probs
        # instead of an extra forward pass (ratio == 1, same gradient)
        if n_updates > 1:
            rows = [i for i in range(n) if not idle[i]]
            frozen = self._frozen_logprobs([seqs[i] for i in rows], [masks[i] for i in rows], ref=False)
            old_cache = dict(zip(rows, frozen, strict=True))
        if cfg.beta > 0:
            ref_cache = dict(enumerate(self._frozen_logprobs(seqs, masks, ref=True)))
        # rescue rollouts: pi(a | hinted prompt)
        hinted_cache = self._hinted_logprobs(trajs, masks, skip=idle)
        rescue_w_sum, rescue_tokens = 0.0, 0
        for epoch in range(a.ppo_epochs):
            order = torch.randperm(n, generator=gen).tolist() if n_updates > 1 else list(range(n))
            per_mb = math.ceil(n / a.num_minibatches)
            for m0 in range(0, n, per_mb):
                mb_idx = order[m0 : m0 + per_mb]
                mb_mask = pad_batch([seqs[i] for i in mb_idx], [masks[i] for i in mb_idx], 0)[2][:, 1:]
                local = normaliser(mb_mask, a.loss_type, a.max_new_tokens * a.max_turns)
                # one normaliser for the whole data-parallel minibatch (DAPO: all ranks' tokens)
                norm, scale = global_normaliser(local, self._all_reduce_sum, self.world)
                mb_idx = [i for i in mb_idx if not idle[i]]
                if not mb_idx:  # the whole minibatch's gradient is 0: AdamW still steps (decay, moments)
                    self._zero_gradients()
                mb_seqs, mb_masks = [seqs[i] for i in mb_idx], [masks[i] for i in mb_idx]
                shared = self._shareable_prefix(mb_seqs, mb_masks) if mb_idx else 0
                micro = _micro_batches(mb_idx, [len(seqs[i]) - shared for i in mb_idx], a)
                mb_loss = 0.0
                prefix = self._batch_prefix(self.model, mb_seqs, shared, len(micro))
                for k, idx in enumerate(micro):
                    ctx = self.acc.no_sync(self.model) if k < len(micro) - 1 else contextlib.nullcontext()
                    with ctx:
                        logp, tmask = self._logprobs(
                            self.model, [seqs[i] for i in idx], [masks[i] for i in idx], prefix
                        )
                        old_logp = (
                            _scatter([old_cache[i] for i in idx], tmask) if old_cache else logp.detach()
                        )
                        ref_logp = _scatter([ref_cache[i] for i in idx], tmask) if ref_cache else None
                        sampler_logp = _scatter([sampler[i] for i in idx], tmask, fill=float("nan"))
                        is_w = (
                            truncated_is_weights(old_logp, sampler_logp, tmask, cfg.is_cap)
                            if cfg.is_cap > 0
                            else None
                        )
                        rows = [hinted_cache.get(i) for i in idx]
                        if any(r is not None for r in rows):  # rescue rollouts: toward the un-hinted policy
                            nan = float("nan")
                            fill = [
                                r if r is not None else torch.full((int(m.sum()),), nan)
                                for r, m in zip(rows, tmask, strict=True)
                            ]
                            rw = rescue_weights(
                                old_logp, _scatter(fill, tmask, fill=nan), tmask, a.rescue_is_cap
                            )
                            sel = torch.tensor([r is not None for r in rows], device=rw.device)[:, None]
                            is_w = torch.where(sel, rw, is_w if is_w is not None else torch.ones_like(rw))
                            if epoch == 0:
                                on = sel & (tmask > 0)
                                rescue_w_sum += float(rw[on].sum())
                                rescue_tokens += int(on.sum())
                        w = token_weights(tmask, a.loss_type)
                        loss, m = policy_loss(
                            logp, old_logp, adv[idx].to(logp.device), w, norm, cfg, ref_logp, is_w, scale
                        )
                        if not torch.isfinite(loss):
                            raise NonFiniteError(f"non-finite loss at step {self.state['step']}")
                        self.acc.backward(loss)
                    n_tok = int(tmask.sum().item())
                    mb_loss += loss.item() / scale  # this rank's share of the minibatch loss
                    sums["clip_fraction"] += m["clip_fraction"].item() * n_tok
                    sums["kl"] += m["kl"].item() * n_tok
                    if epoch == 0:  # the sampler's policy is the old policy only before the first update
                        mm = mismatch_stats(old_logp, sampler_logp, tmask, is_w)
                        mismatch_tokens += int(mm.pop("tokens"))
                        mismatch_max = max(mismatch_max, mm.pop("abs_max"))
                        for key in MISMATCH_KEYS:
                            mismatch[key] += mm[key]
                    trained_tokens += n_tok
                if prefix is not None:  # the micro-batches' gradients on the shared prefix, through it once
                    prefix.backward()
                losses.append(mb_loss)
                grad_norm = self._clip_and_check()
                if grad_norm is None:  # non-finite gradient: skip this update, keep the run alive
                    self.state["skipped_steps"] += 1
                    self.optimizer.zero_grad(set_to_none=True)
                    continue
                grad_norms.append(grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        LEDGER.add_seconds("train", seconds)
        tokens_seen = max(trained_tokens, 1)
        out = {
            # means over the minibatches actually run / the updates actually applied (not the planned count)
            "loss": _mean(losses),
            "grad_norm": _mean(grad_norms),
            "optimizer_updates": len(grad_norms),
            "clip_fraction": sums["clip_fraction"] / tokens_seen,
            "kl": sums["kl"] / tokens_seen,
            "train_tokens_per_s": trained_tokens / max(seconds, 1e-9),
            "train_seconds": seconds,
            "zero_advantage_rows": sum(idle),  # not passed forward/backward: their gradient is exactly 0
        }
        if rescue_tokens:
            out["rescue_is_weight_mean"] = rescue_w_sum / rescue_tokens
        if mismatch_tokens:  # per policy token with a sampler log-prob: before and after the IS correction
            out.update({f"mismatch_{k}": mismatch[k] / mismatch_tokens for k in MISMATCH_KEYS})
            out["mismatch_abs_max"] = mismatch_max
            out["mismatch_tokens"] = mismatch_tokens
        return out

    def _hinted_logprobs(
        self, trajs: list[Trajectory], masks: list[list[int]], skip: list[bool]
    ) -> dict[int, torch.Tensor]:
        """Per rescue rollout trained on the base prompt (and not in ``skip``): the policy's log-probs (no grad)
        of its policy tokens on the hinted sequence as sampled, as many as its training mask keeps (rescue.py)."""
        idx = [
            i
            for i, t in enumerate(trajs)
            if getattr(t.spec, "rescue", False) and t.base_system_ids is not None and not skip[i]
        ]
        if not idx:
            return {}
        rows = self._frozen_logprobs(
            [trajs[i].token_ids for i in idx], [trajs[i].policy_mask for i in idx], ref=False
        )
        return {i: row[: sum(1 for x in masks[i] if x)] for i, row in zip(idx, rows, strict=True)}

    def _zero_gradient_rows(self, adv: torch.Tensor) -> torch.Tensor:
        """Per row, whether its gradient is exactly 0: advantage 0 (its group's rewards are equal) and no KL term,
        so every token's loss is -min(ratio * 0, clip(ratio) * 0) = 0. One process only: ranks that skipped
        different rows would run different numbers of backward passes and stall the all-reduce."""
        if self.world > 1 or self.loss_cfg.beta != 0:
            return torch.zeros_like(adv, dtype=torch.bool)
        return adv == 0

    def _zero_gradients(self) -> None:
        """Zero gradients on every trainable parameter, so the next optimiser step is the one a backward of a
        zero loss would give (AdamW skips a parameter whose grad is None; it must decay it instead)."""
        for p in self.model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)

    def _zero_gradient_updates(self, n_updates: int) -> dict[str, float]:
        """The optimiser updates a batch of zero advantages would make, without computing its zero gradients:
        AdamW still decays its moments and the weights as it would after a zero-gradient backward."""
        t0 = time.perf_counter()
        for _ in range(n_updates):
            self._zero_gradients()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": 0.0,
            "grad_norm": 0.0,
            "optimizer_updates": n_updates,
            "clip_fraction": 0.0,
            "kl": 0.0,
            "train_tokens_per_s": 0.0,
            "train_seconds": time.perf_counter() - t0,
            "zero_advantage_batch": 1,  # no forward/backward ran (nor the sampler-mismatch measurement)
        }

    def _clip_and_check(self) -> float | None:
        params = [p for p in self.model.parameters() if p.requires_grad and p.grad is not None]
        if not params:
            return 0.0
        norm = self.acc.clip_grad_norm_(params, self.args.max_grad_norm)
        norm = float(norm)
        return norm if math.isfinite(norm) else None

    # ----- the loop ---------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        a = self.args
        logger = MetricsLogger(
            self.out,
            enabled=self.acc.is_main_process,
            tensorboard=a.tensorboard,
            total_steps=a.steps if a.progress else 0,
        )
        last: dict[str, Any] = {}
        run_work, run_t0 = LEDGER.snapshot(), time.perf_counter()
        try:
            while self.state["step"] < a.steps and self._groups_that_fit()[0] > 0:
                step_work, step_t0 = LEDGER.snapshot(), time.perf_counter()
                stats = RolloutStats()
                trajs, metrics = self.collect_groups(stats)
                metrics.update(self.optimise(trajs))
                self.state["step"] += 1
                if self.remote is not None:  # the next rollouts sample from the updated adapter
                    self._publish_adapter()
                metrics["gen_tokens_per_s"] = stats.generated_tokens / max(stats.generate_seconds, 1e-9)
                metrics["gen_seconds"] = stats.generate_seconds
                metrics["env_seconds"] = stats.env_seconds
                metrics["peak_memory_mb"] = _peak_memory_mb()
                metrics["skipped_updates"] = self.state["skipped_steps"]
                work = LEDGER.since(step_work)
                metrics.update(account_metrics(account(work, time.perf_counter() - step_t0)))
                self._count_compute(work)
                metrics["flops_total"] = self.state["flops"]
                metrics["tokens_total"] = self.state["tokens"]
                metrics = self._reduce(metrics)
                logger.log(self.state["step"], metrics)
                last = metrics
                last_step = self.state["step"] == a.steps or self._groups_that_fit()[0] == 0
                if a.save_every and (self.state["step"] % a.save_every == 0 or last_step):
                    self.save()
        finally:
            logger.close()
        if self.acc.is_main_process:
            self.policy.model.save_pretrained(self.out / "adapter")
        self.acc.wait_for_everyone()
        roofline = account(LEDGER.since(run_work), time.perf_counter() - run_t0)
        return {"step": self.state["step"], **last, "roofline": roofline}

    def _count_compute(self, work: dict[str, PhaseWork]) -> None:
        """Add a step's model FLOPs and tokens (every phase, summed over the processes) to the run's totals."""
        total = torch.tensor(
            [sum(w.flops for w in work.values()), float(sum(w.tokens for w in work.values()))],
            dtype=torch.float64,
        )
        if self.world > 1:  # every process must see the same totals, or their budget checks part ways
            total = self.acc.reduce(total.to(self.acc.device), reduction="sum").cpu()
        self.state["flops"] += float(total[0])
        self.state["tokens"] += int(total[1])

    def _reduce(self, metrics: dict[str, float]) -> dict[str, float]:
        if self.world == 1:
            return metrics
        keys = sorted(k for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v))
        t = torch.tensor([float(metrics[k]) for k in keys], device=self.acc.device)
        t = self.acc.reduce(t, reduction="mean")
        return {**metrics, **dict(zip(keys, t.tolist(), strict=True))}

    def save(self) -> Path:
        return save_checkpoint(
            self.out / "checkpoints",
            self.state["step"],
            self.policy.model,
            self.optimizer,
            self._trainer_state(),
            self._config(),
            rank=self.rank,
            world_size=self.world,
            is_main=self.acc.is_main_process,
            barrier=self.acc.wait_for_everyone,
        )

    def _trainer_state(self) -> dict[str, Any]:
        """What a checkpoint keeps besides weights and optimiser: counters, and the curriculum's estimates."""
        state = dict(self.state)
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        return state


def enable_gradient_checkpointing(model) -> None:
    """Non-reentrant activation checkpointing (works with frozen inputs, so no input-grad hook is needed) whose
    replays use the attention of their forward (the shared-prefix training path needs both)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    kwargs = {"use_reentrant": False, "context_fn": replay_attention(base)}
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.2x name
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


MISMATCH_KEYS = ("abs_mean", "kl", "residual_abs_mean", "is_weight_mean", "truncated_fraction")


def mismatch_stats(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, tmask: torch.Tensor, is_w: torch.Tensor | None
) -> dict[str, float]:
    """Sums over the policy tokens that have a sampler log-prob (divide by ``tokens``), plus the max.

    Before the correction: |old - sampler| and the k3 estimate of KL(sampler || trainer). After it: the part
    of the log-ratio the truncated weight leaves uncorrected, |log w - (old - sampler)| (0 below the cap).
    """
    with torch.no_grad():
        valid = (tmask > 0) & torch.isfinite(sampler_logp)
        d = torch.where(valid, old_logp - torch.nan_to_num(sampler_logp), torch.zeros_like(old_logp))
        log_w = torch.log(is_w) if is_w is not None else torch.zeros_like(d)
        residual = torch.where(valid, (log_w - d).abs(), torch.zeros_like(d))
        w = is_w if is_w is not None else torch.ones_like(d)
        vf = valid.float()
        return {
            "tokens": float(vf.sum()),
            "abs_max": float(d.abs().max()) if valid.any() else 0.0,
            "abs_mean": float(d.abs().sum()),
            "kl": float(((torch.exp(d) - 1 - d) * vf).sum()),
            "residual_abs_mean": float(residual.sum()),
            "is_weight_mean": float((w * vf).sum()),
            "truncated_fraction": float(((residual > 1e-5) & valid).float().sum()),  # above float noise
        }


def _sampler_row(traj: Trajectory, mask: list[int]) -> torch.Tensor:
    """The sampler's log-probs of the policy tokens of ``mask`` (1-D; NaN where none was reported).

    Hint rollouts were sampled under the hinted prompt but are trained on the base one on purpose: their
    sampler log-probs are not a mismatch to correct, so they get NaN (importance weight 1).
    """
    n_policy = sum(1 for x in mask if x)
    lps = traj.training_sampler_logprobs() if hasattr(traj, "training_sampler_logprobs") else []
    if traj.spec.hint or len(lps) < len(mask):
        return torch.full((n_policy,), float("nan"))
    return torch.tensor([lp for lp, x in zip(lps, mask, strict=False) if x], dtype=torch.float32)


def _step_seed(seed: int, rank: int, step: int) -> int:
    return (seed * 1_000_003 + rank * 7_919 + step) % 2**63


def set_reproducible(num_threads: int, deterministic: bool) -> None:
    """A fixed CPU thread count (reduction order changes results) and deterministic kernels where they exist."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def _scatter(rows: list[torch.Tensor], tmask: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Place cached per-sequence policy-token log-probs at the policy positions of a micro-batch."""
    out = torch.full(tmask.shape, fill, dtype=torch.float32, device=tmask.device)
    for i, r in enumerate(rows):
        out[i, tmask[i] > 0] = r.to(out.device, torch.float32)
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def train(args: GRPOArgs, policy: HFPolicy | None = None) -> dict[str, Any]:
    return GRPOTrainer(args, policy).train()


def _micro_batches(indices: list[int], tokens: list[int], args: GRPOArgs) -> list[list[int]]:
    """Consecutive micro-batches of ``indices``: at most ``micro_batch_size`` sequences and, past the first
    sequence, at most ``micro_batch_tokens`` tokens (each sequence counted past the shared prefix)."""
    out: list[list[int]] = []
    count = 0
    for i, n in zip(indices, tokens, strict=True):
        if out and len(out[-1]) < args.micro_batch_size and count + n <= args.micro_batch_tokens:
            out[-1].append(i)
            count += n
        else:
            out.append([i])
            count = n
    return out
