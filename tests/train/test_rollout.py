"""Token ids end to end: masks over multi-turn conversations, no re-tokenisation, hint swapping, grouping."""

from __future__ import annotations

import pytest
import torch

from trace_gym.registration import make_env
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, collect
from trace_train.sft import oracle_trajectories


def test_multiturn_ids_equal_generated_ids_and_mask(tiny_policy):
    """Record what generate returned; the policy-masked ids must be exactly those, in order."""
    produced: list[list[int]] = []
    real = tiny_policy.generate_with_logprobs

    def spy(prompts, sampling):
        out = real(prompts, sampling)
        produced.extend(out[0])
        return out

    tiny_policy.generate_with_logprobs = spy
    envs = [make_env("traintest/chat3-v0") for _ in range(3)]
    specs = [ResetSpec(seed=i) for i in range(3)]
    trajs = collect(tiny_policy, envs, specs, SamplingConfig(max_new_tokens=12), max_turns=5, engine="simple")
    assert [t.turns for t in trajs] == [3, 3, 3] and len(produced) == 9
    segments = []
    for t in trajs:  # maximal runs of policy tokens = one generated turn each
        run: list[int] = []
        for tok, m in zip(t.token_ids, t.policy_mask, strict=True):
            if m:
                run.append(tok)
            elif run:
                segments.append(tuple(run))
                run = []
        if run:
            segments.append(tuple(run))
    assert sorted(segments) == sorted(tuple(o) for o in produced)  # the exact ids generate returned
    assert max(t.turns for t in trajs) >= 1
    for t in trajs:
        assert len(t.token_ids) == len(t.policy_mask)
        assert t.generated_tokens > 0


def test_oracle_multiturn_token_layout(tiny_policy):
    """Teacher-forced multi-turn trajectory: ids decode to the rendered conversation; the masked ids are
    exactly the agent turns (tool call text + end-of-turn), and tool results are not masked."""
    trajs, failed = oracle_trajectories(tiny_policy, "traintest/lookup-v0", [3, 4], max_turns=4)
    assert failed == 0 and len(trajs) == 2
    tok = tiny_policy.tokenizer
    for t in trajs:
        assert t.turns == 2 and t.reward == 1.0
        rendered = tiny_policy.renderer.render(t.messages, t.info.get("tools", []) or [_tool()], False)
        assert tok.decode(t.token_ids) == rendered.rstrip("\n")
        segments, cur = [], []
        for i, m in zip(t.token_ids, t.policy_mask, strict=True):
            if m:
                cur.append(i)
            elif cur:
                segments.append(cur)
                cur = []
        segments.append(cur) if cur else None
        assert len(segments) == 2
        assert tok.decode(segments[0]).startswith('<tool_call>{"name": "lookup"')
        assert segments[0][-1] == tok.eos_token_id and segments[1][-1] == tok.eos_token_id
        assert "tool_response" not in tok.decode(segments[1])


def _tool():
    from toy_envs import LOOKUP_TOOL

    return LOOKUP_TOOL


def test_plain_string_env_and_group_seeds(tiny_policy):
    envs = [make_env("traintest/echo-v0") for _ in range(4)]
    specs = [ResetSpec(seed=7, group=0)] * 2 + [ResetSpec(seed=8, group=1)] * 2
    trajs = collect(tiny_policy, envs, specs, SamplingConfig(max_new_tokens=4), max_turns=2)
    assert trajs[0].messages[0]["role"] == "user"
    assert trajs[0].messages[0]["content"] == trajs[1].messages[0]["content"]  # one seed -> one task
    assert [t.turns for t in trajs] == [1, 1, 1, 1]


def test_hint_rollouts_train_on_base_prompt(tiny_policy):
    envs = [make_env("traintest/lookup-v0") for _ in range(2)]
    trajs = collect(
        tiny_policy,
        envs,
        [ResetSpec(seed=1, hint=True), ResetSpec(seed=1)],
        SamplingConfig(max_new_tokens=6),
        1,
    )
    hinted, plain = trajs
    assert "Hint:" in tiny_policy.tokenizer.decode(hinted.token_ids)
    ids, mask = hinted.training_ids()
    text = tiny_policy.tokenizer.decode(ids)
    assert "Hint:" not in text
    # the prompt part equals the un-hinted rollout's prompt token for token
    p_len = plain.policy_mask.index(1)
    assert ids[:p_len] == plain.token_ids[:p_len]
    # the policy tokens are untouched
    assert [i for i, m in zip(ids, mask, strict=True) if m] == [
        i for i, m in zip(hinted.token_ids, hinted.policy_mask, strict=True) if m
    ]
    assert plain.training_ids() == (plain.token_ids, plain.policy_mask)


def test_seed_grouping_and_hint_share(tiny_model_dir):
    from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer

    args = GRPOArgs(
        env_id="traintest/echo-v0",
        model=str(tiny_model_dir),
        out="unused",
        group_size=4,
        groups_per_step=3,
        hint_fraction=0.5,
        lora_rank=2,
    )
    trainer = GRPOTrainer(args)
    specs = trainer._group_specs(trainer._take_tasks(3))
    assert len(specs) == 12
    for g in range(3):
        members = [s for s in specs if s.group == g]
        assert len({s.seed for s in members}) == 1 and len(members) == 4
        assert sum(s.hint for s in members) == 2
    assert len({s.seed for s in specs}) == 3
    assert trainer._take_tasks(3) == [3, 4, 5]  # never reuses a task


def test_batched_generation_matches_single():
    """Left padding must not change greedy outputs, on the position-sensitive test model (the random one emits
    one token over and over, whatever its positions), whose replies differ and end."""
    from tests.train.positional_model import build_positional_model

    model, tok = build_positional_model(torch.float64)
    policy = HFPolicy(model, tok, name="tiny-positional")
    texts = ["Find record 7", "Find record 352 please please", "Find record 41" + " please" * 9]
    prompts = [policy.prompt_ids([{"role": "user", "content": t}], []) for t in texts]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=12)
    batched = policy.generate_ids(prompts, greedy)
    single = [policy.generate_ids([p], greedy)[0] for p in prompts]
    assert batched == single
    assert len({tuple(x) for x in single}) > 1 and all(tok.eos_token_id in x for x in single)


def test_tiny_model_builds():
    model, tok = build_tiny_model()
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    policy = HFPolicy(model, tok)
    assert not policy.renderer.native_tools
    with pytest.raises(TypeError):
        from trace_train.policies.base import as_conversation

        as_conversation(3)


def test_dynamic_sampling_refills_whole_groups(tiny_model_dir, monkeypatch):
    """Refilled groups replace dead ones one for one: every group keeps G members sharing one seed."""
    from trace_train.grpo import trainer as trainer_mod
    from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer

    args = GRPOArgs(
        env_id="traintest/echo-v0",
        model=str(tiny_model_dir),
        out="unused",
        group_size=3,
        groups_per_step=4,
        lora_rank=2,
        dynamic_sampling=True,
        max_refill_rounds=3,
        max_new_tokens=2,
    )
    trainer = GRPOTrainer(args)
    real = trainer_mod.collect
    calls = {"n": 0}

    def scripted(policy, envs, specs, *a, **k):
        trajs = real(policy, envs, specs, *a, **k)
        calls["n"] += 1
        seen: set[int] = set()
        for t in trajs:  # call 1: groups 1 and 2 dead; call 2: its first group dead; then all alive
            dead = t.spec.group in (1, 2) if calls["n"] == 1 else (calls["n"] == 2 and t.spec.group == 0)
            t.reward = 0.0 if dead or t.spec.group in seen else 1.0  # alive: one success per group
            seen.add(t.spec.group)
        return trajs

    monkeypatch.setattr(trainer_mod, "collect", scripted)
    trajs, metrics = trainer.collect_groups(trainer_mod.RolloutStats())
    assert metrics["equal_reward_groups"] == 2 and metrics["refilled_groups"] == 2
    groups = sorted({t.spec.group for t in trajs})
    assert groups == [0, 1, 2, 3]
    for g in groups:
        members = [t for t in trajs if t.spec.group == g]
        assert len(members) == 3 and len({t.spec.seed for t in members}) == 1


def test_merged_lora_generation_is_exact_and_restores_weights():
    import torch

    from trace_train.policies.hf import LoraSettings, attach_lora

    model, tok = build_tiny_model()
    peft_model = attach_lora(model, LoraSettings(rank=4), None)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a non-trivial adapter
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    grads = {n: p.requires_grad for n, p in peft_model.named_parameters()}
    policy = HFPolicy(peft_model, tok)
    prompt = policy.prompt_ids([{"role": "user", "content": "hello there"}], [])
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=12)
    merged = policy.generate_ids([prompt, prompt[:-3]], greedy)
    policy.merge_for_generation = False
    plain = policy.generate_ids([prompt, prompt[:-3]], greedy)
    assert merged == plain
    for n, p in peft_model.named_parameters():
        assert torch.equal(p, before[n]), n  # bit-exact restore
        assert p.requires_grad == grads[n]
