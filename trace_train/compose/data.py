"""Gate-training data: rollouts of each adapter on its own capability env, labelled token by token.

For adapter k (slot k) the composed model is forced to slot k, which is exactly adapter k (see
``model.py``), and rolled out on env k's train split; successful episodes (reward >= ``min_reward``) are kept.
The base (slot 0) is rolled out on the same envs, and with ``base_target_episodes`` on the target's own train
tasks, and its generated text is labelled 0: it teaches the gates when *not* to deviate from the base.

Labels sit on the position that *produces* a token: the gate of position j decides how the model computes
the distribution of token j+1, so if token j+1 was generated under slot k, position j gets label k.
Prompt and env tokens carry no label (they only give context). The LM loss covers generated tokens of
successful episodes only (a failing base reply is a routing example, not something to imitate).

An adapter with no successful rollout on its env (a small base that solves nothing there) leaves its slot
without data; with ``oracle_episodes`` the env's oracle conversations stand in, labelled with that slot
(``<name> (oracle)`` in the collection report).

``labels = "advantage"`` keeps slot k's label only on the tokens adapter k predicts more surely than the base
(log-probability margin ``advantage_margin``, both teacher-forced on the episode) and labels the rest base.
With ``"slot"`` every generated token of the episode is labelled k, including the many the base writes just
as well, and an oracle stand-in labels k tokens the adapter itself would not write. The demo's gates then
routed a cancellation reason to an adapter that wrote the wrong one (docs/composition.md, ``trace explain``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from trace_gym.registration import make_env
from trace_gym.seeds import reset_seed
from trace_train.compose.baselines import SlotPolicy
from trace_train.compose.losses import IGNORE
from trace_train.compose.model import BASE_SLOT, Composition
from trace_train.policies.base import SamplingConfig
from trace_train.rollout import ResetSpec, Trajectory, collect


@dataclass
class GateExample:
    input_ids: list[int]
    gate_labels: list[int]  # slot per position, IGNORE where none
    lm_mask: list[int]  # 1 where the LM loss predicts this token
    slot: int
    env_id: str
    reward: float

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def label_trajectory(traj: Trajectory, slot: int, env_id: str, lm: bool) -> GateExample:
    ids, mask = traj.training_ids()
    labels = [IGNORE] * len(ids)
    for j in range(len(ids) - 1):
        if mask[j + 1]:
            labels[j] = slot
    return GateExample(
        input_ids=list(ids),
        gate_labels=labels,
        lm_mask=list(mask) if lm else [0] * len(ids),
        slot=slot,
        env_id=env_id,
        reward=traj.reward,
    )


@dataclass
class CollectionReport:
    per_slot: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, name: str, trajs: list[Trajectory], kept: int) -> None:
        rewards = [t.reward for t in trajs]
        self.per_slot[name] = {
            "episodes": len(trajs),
            "kept": kept,
            "success_rate": sum(r >= 1.0 for r in rewards) / max(1, len(rewards)),
            "reward_mean": sum(rewards) / max(1, len(rewards)),
        }


@torch.no_grad()
def token_logprobs(composition: Composition, input_ids: list[int], slot: int) -> torch.Tensor:
    """log p(token j+1 | tokens <= j) at every position j, with every token routed to ``slot``."""
    ids = torch.tensor([input_ids], device=composition.model.device)
    with composition.forced(slot):
        logits = composition.model(ids).logits[0, :-1]
    return logits.float().log_softmax(-1).gather(1, ids[0, 1:, None]).squeeze(1)


def advantage_labels(
    composition: Composition, example: GateExample, margin: float
) -> tuple[GateExample, int]:
    """``example`` with slot k's labels kept only where adapter k beats the base by ``margin`` nats on the
    labelled token; the others become base labels. Returns the example and how many labels stayed k."""
    k = example.slot
    positions = [j for j, label in enumerate(example.gate_labels) if label == k]
    if k == BASE_SLOT or not positions:
        return example, 0
    gain = token_logprobs(composition, example.input_ids, k) - token_logprobs(
        composition, example.input_ids, BASE_SLOT
    )
    labels = list(example.gate_labels)
    for j in positions:
        if not gain[j] > margin:
            labels[j] = BASE_SLOT
    return replace(example, gate_labels=labels), sum(label == k for label in labels)


def _relabel(
    composition: Composition, examples: list[GateExample], margin: float
) -> tuple[list[GateExample], float]:
    """Advantage labels for each example; the share of slot labels that stayed on the adapter."""
    before = sum(label == e.slot for e in examples for label in e.gate_labels)
    out, kept = [], 0
    for e in examples:
        e, n = advantage_labels(composition, e, margin)
        out.append(e)
        kept += n
    return out, kept / max(1, before)


def _rollouts(
    policy: SlotPolicy,
    env_id: str,
    episodes: int,
    first_index: int,
    sampling: SamplingConfig,
    args: Any,
    difficulty: int | None = None,
    adapter: str | None = None,
) -> list[Trajectory]:
    """``episodes`` rollouts of ``policy`` (one slot forced). With a generation server (``args.server_url``) the
    turns are generated there instead, by the base plus ``adapter`` (what forcing its slot computes: the base for
    slot 0), hot-loaded for these rollouts and unloaded after; the prompts are still rendered here."""
    served = None
    if getattr(args, "server_url", None):
        from trace_train.policies.served import ServedPolicy

        served = ServedPolicy.connect(
            args.model,
            args.server_url,
            served_model=args.served_model,
            adapter=adapter,
            timeout=args.server_timeout,
            max_retries=args.server_retries,
        )
    try:
        return _collect(policy, env_id, episodes, first_index, sampling, args, difficulty, served)
    finally:
        if served is not None:
            served.close()


def _collect(policy, env_id, episodes, first_index, sampling, args, difficulty, served) -> list[Trajectory]:
    generator = None
    if served is not None:
        generator = lambda prompts, _active, _turn: served.generate_with_logprobs(prompts, sampling)  # noqa: E731
    trajs: list[Trajectory] = []
    envs = [make_env(env_id) for _ in range(min(args.rollout_batch_size, episodes))]
    try:
        for b in range(0, episodes, len(envs)):
            n = min(len(envs), episodes - b)
            specs = [
                ResetSpec(
                    seed=reset_seed("train", first_index + b + i, envs[0]),
                    group=b + i,
                    split="train",
                    difficulty=difficulty,
                )
                for i in range(n)
            ]
            trajs += collect(
                policy, envs[:n], specs, sampling, args.max_turns, args.max_total_tokens, generator=generator
            )
    finally:
        for env in envs:
            env.close()
    return trajs


def _oracle_episodes(
    policy: SlotPolicy, env_id: str, episodes: int, first_index: int, difficulty: int | None
) -> list[Trajectory]:
    """The env's oracle conversations of train tasks ``first_index..``, rendered as the policy sees them."""
    from trace_gym.seeds import train_reset_seed
    from trace_train.sft import oracle_trajectories

    probe = make_env(env_id)
    try:
        seeds = [train_reset_seed(first_index + i, probe) for i in range(episodes)]  # never test seeds
    finally:
        probe.close()
    trajs, _failed = oracle_trajectories(policy, env_id, seeds, difficulty=difficulty)
    return trajs


def slot_policy(composition: Composition, tokenizer: Any, slot: int, args: Any) -> SlotPolicy:
    """Slot ``slot`` forced, rendering and generating as ``args`` says (``engine``, ``tool_format``): the gates
    must see the tool text the adapters were trained on."""
    policy = SlotPolicy(composition, tokenizer, slot)
    return policy.configure(
        engine=getattr(args, "engine", None), tool_format=getattr(args, "tool_format", None)
    )


def collect_gate_data(
    composition: Composition, tokenizer: Any, env_ids: list[str], args: Any
) -> tuple[list[GateExample], CollectionReport]:
    """Labelled examples for every adapter (slot k on ``env_ids[k-1]``) plus base text (slot 0)."""
    if len(env_ids) != len(composition.names):
        raise ValueError(
            f"{len(env_ids)} envs for {len(composition.names)} adapters: give one env per adapter"
        )
    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    difficulties = list(getattr(args, "difficulties", None) or [None] * len(env_ids))
    if len(difficulties) != len(env_ids):
        raise ValueError(f"{len(difficulties)} difficulties for {len(env_ids)} envs: give one per env")
    examples: list[GateExample] = []
    report = CollectionReport()
    torch.manual_seed(args.seed)
    for k, (env_id, level) in enumerate(zip(env_ids, difficulties, strict=True), start=1):
        # one policy (and so one cached engine) per slot: a kept shared prefix must not cross slots
        policy = slot_policy(composition, tokenizer, k, args)
        adapter = None
        if getattr(args, "server_url", None):
            from trace_train.compose.artefact import adapter_dir

            adapter = str(adapter_dir(args.adapters[k - 1]))
        trajs = _rollouts(policy, env_id, args.episodes_per_env, 0, sampling, args, level, adapter)
        good = [t for t in trajs if t.reward >= args.min_reward and t.generated_tokens]
        own = [label_trajectory(t, k, env_id, lm=True) for t in good]
        report.add(composition.names[k - 1], trajs, len(good))
        name = composition.names[k - 1]
        if not good and getattr(args, "oracle_episodes", 0):
            # nothing of the adapter's own to learn routing from: label the env's oracle episodes (what its
            # successful rollouts would look like) with the adapter's slot
            oracle = _oracle_episodes(policy, env_id, args.oracle_episodes, args.oracle_seed_offset, level)
            own = [label_trajectory(t, k, env_id, lm=True) for t in oracle]
            name = f"{name} (oracle)"
            report.add(name, oracle, len(oracle))
        if own and getattr(args, "labels", "slot") == "advantage":
            own, share = _relabel(composition, own, args.advantage_margin)
            report.per_slot[name]["advantage_share"] = share  # of its tokens, those still labelled k
        examples += own
        if args.base_episodes_per_env:
            base_policy = slot_policy(composition, tokenizer, 0, args)
            base = _rollouts(
                base_policy, env_id, args.base_episodes_per_env, args.episodes_per_env, sampling, args, level
            )
            kept = [t for t in base if t.generated_tokens]
            examples += [label_trajectory(t, 0, env_id, lm=t.reward >= args.min_reward) for t in kept]
            report.add(f"base@{env_id}", base, len(kept))
    target = getattr(args, "target", None)
    if getattr(args, "base_target_episodes", 0) and target:
        # the base's own target contexts: slot 0, so the gates leave the base alone where no adapter acts
        base_policy = slot_policy(composition, tokenizer, 0, args)
        level = getattr(args, "target_difficulty", None)
        base = _rollouts(
            base_policy,
            target,
            args.base_target_episodes,
            args.base_target_seed_offset,
            sampling,
            args,
            level,
        )
        kept = [t for t in base if t.generated_tokens]
        examples += [label_trajectory(t, 0, target, lm=t.reward >= args.min_reward) for t in kept]
        report.add(f"base@{target} (target)", base, len(kept))
    if not any(e.slot for e in examples):
        raise RuntimeError(
            "no adapter produced a successful episode on its own env "
            f"(min_reward {args.min_reward}): {report.per_slot}; lower --min-reward or train the adapters longer"
        )
    return examples, report
