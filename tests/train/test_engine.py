"""The cached rollout engine against the simple one: same greedy tokens, same log-probs, caches that stay
right across turns (error replies, conversations that end early, holes squeezed out, a kept prefix)."""

from __future__ import annotations

import itertools

import gymnasium as gym
import pytest
import torch

from tests.train.old_transformers import with_past_key_values_signature
from tests.train.positional_model import build_positional_model
from trace_train.engine import engine_for
from trace_train.grpo.logprobs import pad_batch, sequence_logprobs
from trace_train.models import build_tiny_model
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.rollout import ResetSpec, collect

TOOL = {
    "type": "function",
    "function": {
        "name": "find",
        "description": "Find a record by id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    },
}


class RaggedEnv(gym.Env):
    """Tool-style conversation whose length depends on the seed: seed % 4 + 1 turns (seed 0 ends after the
    first turn), env replies of seed-dependent length, and an error tool reply on the second turn of odd seeds."""

    def __init__(self):
        self.observation_space = gym.spaces.Text(10_000)
        self.action_space = gym.spaces.Text(10_000)
        self.tools = [TOOL]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_ = seed or 0
        self.turn = 0
        self.messages = [
            {"role": "system", "content": "You look records up with tools. Be brief."},
            {"role": "user", "content": f"Find record {self.seed_ * 7}" + " please" * (self.seed_ % 3)},
        ]
        return list(self.messages), {"tools": self.tools}

    def step(self, action):
        self.turn += 1
        self.messages.append({"role": "assistant", "content": action})
        done = self.turn >= self.seed_ % 4 + 1
        if not done:
            if self.turn == 2 and self.seed_ % 2:
                reply = "Error: unknown tool 'x'. Call one of: find."
            else:
                reply = "record " + "ab" * (self.turn * (self.seed_ % 5))
            self.messages.append({"role": "tool", "tool_call_id": f"c{self.turn}", "content": reply})
        return list(self.messages), float(done), done, False, {"tools": self.tools}


def _policy(dtype=torch.float64) -> HFPolicy:
    """The position-sensitive tiny model (tests/train/positional_model.py), in float64 by default: its greedy
    replies differ between conversations and end with <|im_end|>, and a token at a wrong position changes them
    (the random tiny model emits one token over and over and barely notices positions)."""
    model, tok = build_positional_model(dtype)
    return HFPolicy(model, tok, name="tiny-positional")


def _turns(traj) -> list[list[int]]:
    """The policy tokens of each turn."""
    runs = itertools.groupby(zip(traj.token_ids, traj.policy_mask, strict=True), key=lambda x: x[1])
    return [[t for t, _ in run] for m, run in runs if m]


def _run(policy, engine, seeds, sampling, max_turns=5, **kw):
    envs = [RaggedEnv() for _ in seeds]
    return collect(policy, envs, [ResetSpec(seed=s) for s in seeds], sampling, max_turns, engine=engine, **kw)


GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=10)
# a turn's prefill: every row alone (no padding) or all rows right-padded to the longest
PREFILL = pytest.mark.parametrize("max_padding", [0.0, 1.0], ids=["row-by-row", "padded"])


@PREFILL
def test_greedy_cached_equals_simple_across_ragged_turns(max_padding):
    policy = _policy()
    engine_for(policy).max_prefill_padding = max_padding
    seeds = list(range(7))
    simple = _run(policy, "simple", seeds, GREEDY)
    cached = _run(policy, "cached", seeds, GREEDY)
    assert [t.turns for t in cached] == [s % 4 + 1 for s in seeds]  # seed 0 ended early, others went on
    # a model that can fail this test: its greedy replies differ and every turn ends with the end-of-turn token
    eos = policy.tokenizer.eos_token_id
    assert all(turn[-1] == eos and len(turn) < GREEDY.max_new_tokens for t in simple for turn in _turns(t))
    assert len({a for t in simple for a in t.actions}) >= 4
    for a, b in zip(simple, cached, strict=True):
        assert a.token_ids == b.token_ids and a.policy_mask == b.policy_mask
        assert a.actions == b.actions and a.reward == b.reward
        assert len(b.sampler_logprobs) == len(b.token_ids)
        # float64 model: a position off by any amount moves the log-probs far beyond this
        assert torch.allclose(torch.tensor(a.sampler_logprobs), torch.tensor(b.sampler_logprobs), atol=2e-6)
    errors = [m for t in cached for m in t.messages if str(m.get("content", "")).startswith("Error:")]
    assert errors  # some conversations went on after an error reply
    stats = policy._cached_engine.stats
    assert stats.compactions >= 1  # the conversation that ended early left the batch


@PREFILL
def test_rows_that_finish_leave_the_decode_steps(max_padding):
    """With many end-of-turn tokens the rows finish their turns at different steps, so the decode steps drop
    the finished ones (cache rows permuted, then put back in order). Sampled under one seed, every turn's
    tokens and log-probs are those of an engine that keeps every row to the end of the turn."""
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=16)
    runs = []
    for min_idle in (1.01, 0.25):  # never drop rows; drop them once a quarter of the running rows are done
        policy = _policy()
        policy.eos_ids = policy.eos_ids | set(range(40, 400, 7))  # ~1 in 7 tokens ends a turn
        engine = engine_for(policy)
        engine.max_prefill_padding, engine.min_idle_fraction = max_padding, min_idle
        session = engine.session(sampling, generator=torch.Generator().manual_seed(5))
        seeds = list(range(8))
        envs = [RaggedEnv() for _ in seeds]
        runs.append(collect(policy, envs, [ResetSpec(seed=s) for s in seeds], sampling, 5, generator=session))
        shrinks = engine.stats.row_shrinks
    kept, dropped = runs
    assert shrinks >= 2
    for a, b in zip(kept, dropped, strict=True):
        assert a.token_ids == b.token_ids and a.policy_mask == b.policy_mask
        assert torch.allclose(torch.tensor(a.sampler_logprobs), torch.tensor(b.sampler_logprobs), atol=1e-5)
    turn_lengths = {len(list(run)) for t in dropped for m, run in itertools.groupby(t.policy_mask) if m}
    assert len(turn_lengths) >= 4  # the turns did end at different steps


@PREFILL
def test_compaction_and_prefill_chunks_change_nothing(max_padding):
    """Squeeze holes after every turn and prefill in 5-token chunks: same tokens as the simple engine."""
    policy = _policy()
    engine = engine_for(policy)
    engine.max_hole_fraction, engine.prefill_chunk_tokens = -1.0, 5  # below 0: compact after every turn
    engine.max_prefill_padding = max_padding
    seeds = [1, 2, 3, 5, 6]
    simple = _run(policy, "simple", seeds, GREEDY)
    cached = _run(policy, "cached", seeds, GREEDY)
    assert [t.token_ids for t in simple] == [t.token_ids for t in cached]
    assert engine.stats.compactions >= 3


@PREFILL
@pytest.mark.parametrize("share", [True, False])
def test_shared_prefix_is_kept_once_and_changes_nothing(share, max_padding):
    """With ``share_prefix`` the rows hold only the columns after the common prefix (its K/V once per batch,
    attended to by every row through the ``shared_prefix`` attention); without, every row holds a copy. Both give
    the simple engine's tokens and log-probs."""
    policy = _policy()
    seeds = [1, 2, 3, 5, 6]
    simple = _run(policy, "simple", seeds, GREEDY)
    engine = engine_for(policy)
    engine.share_prefix, engine.max_prefill_padding = share, max_padding
    session = engine.session(GREEDY)
    envs = [RaggedEnv() for _ in seeds]
    cached = collect(policy, envs, [ResetSpec(seed=s) for s in seeds], GREEDY, 5, generator=session)
    for a, b in zip(simple, cached, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.sampler_logprobs), torch.tensor(b.sampler_logprobs), atol=1e-5)
    cache = session.cache
    held = [layer.used for layer in cache.layers]
    if share:
        assert cache.prefix is not None and cache.prefix.length > 10
        assert all(n == cache.mask.shape[1] for n in held)  # only the columns after the prefix
        assert cache.mask.shape[1] < min(len(ids) for ids in cache.ids) - cache.prefix.length + 40
    else:
        assert cache.prefix is None
        assert all(n >= len(cache.ids[0]) - 40 for n in held)


def test_a_model_that_drops_the_shared_prefix_is_refused():
    from trace_train.engine.attention import SharedPrefix

    prefix = SharedPrefix([(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))] * 2)
    prefix.layers_used = 1
    with pytest.raises(RuntimeError, match="1 of 2 layers"):
        prefix.check()


def _teacher_forced(policy, traj, sampling):
    ids, attn, pmask = pad_batch([traj.token_ids], [traj.policy_mask], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, tmask = sequence_logprobs(policy.model, ids, attn, pmask, sampling=sampling)
    return logp[tmask > 0]


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=8)])
def test_sampled_logprobs_match_a_fresh_forward_of_the_whole_conversation(sampling):
    """Every sampled token's log-prob, taken from the cache turn after turn, equals the teacher-forced
    log-prob of a single forward over the final conversation (same temperature / top-k / top-p)."""
    policy = _policy()
    torch.manual_seed(0)
    trajs = _run(policy, "cached", [1, 2, 3, 7], sampling)
    for t in trajs:
        got = torch.tensor([lp for lp, m in zip(t.sampler_logprobs, t.policy_mask, strict=True) if m])
        assert torch.allclose(got, _teacher_forced(policy, t, sampling), atol=1e-4)
        assert all(lp == 0.0 for lp, m in zip(t.sampler_logprobs, t.policy_mask, strict=True) if not m)


def test_kept_prefix_is_reused_and_dropped_when_weights_change():
    policy = _policy()
    first = _run(policy, "cached", [1, 2, 3], GREEDY)
    engine = policy._cached_engine
    assert engine.stats.prefix_tokens_reused == 0
    again = _run(policy, "cached", [5, 6], GREEDY)
    assert engine.stats.prefix_tokens_reused > 0  # the system/tools prefix came from the first session
    assert [t.token_ids for t in again] == [t.token_ids for t in _run(policy, "simple", [5, 6], GREEDY)]
    assert first
    # an in-place update of trainable weights (an optimiser step) invalidates the kept prefix
    reused = engine.stats.prefix_tokens_reused
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(1.5)
    after = _run(policy, "cached", [5, 6], GREEDY)
    assert engine.stats.prefix_tokens_reused == reused
    assert [t.token_ids for t in after] == [t.token_ids for t in _run(policy, "simple", [5, 6], GREEDY)]


def test_identical_prompts_of_a_group_sample_independently():
    policy = _policy()
    torch.manual_seed(1)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12)
    trajs = _run(policy, "cached", [4] * 6, sampling, max_turns=1)
    assert len({tuple(t.token_ids) for t in trajs}) > 1


@PREFILL
def test_a_groups_shared_prompt_is_prefilled_once(max_padding):
    """Rollouts of a GRPO group start from the same prompt: it is prefilled once and its cache row copied for
    each; greedy turns then equal the simple engine's (across error replies and early ends), and sampled
    log-probs equal a fresh forward of each final conversation."""
    policy = _policy()
    engine = engine_for(policy)
    engine.max_prefill_padding = max_padding
    seeds = [3, 3, 3, 0, 0, 5, 2, 2]
    cached = _run(policy, "cached", seeds, GREEDY)
    assert engine.stats.prompts_deduplicated == 4
    simple = _run(policy, "simple", seeds, GREEDY)
    for a, b in zip(simple, cached, strict=True):
        assert a.token_ids == b.token_ids and a.policy_mask == b.policy_mask
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8)
    torch.manual_seed(2)
    sampled = _run(policy, "cached", seeds, sampling)
    assert len({tuple(t.token_ids) for t in sampled[:3]}) > 1  # the copies sample independently
    for t in sampled:
        got = torch.tensor([lp for lp, m in zip(t.sampler_logprobs, t.policy_mask, strict=True) if m])
        assert torch.allclose(got, _teacher_forced(policy, t, sampling), atol=1e-4)


def test_bad_engine_name_is_refused():
    with pytest.raises(ValueError, match="unknown engine"):
        _run(_policy(), "fast", [1], GREEDY)


def test_a_policy_that_customises_decoding_is_honoured():
    """A subclass overriding generate_with_logprobs (e.g. a router forcing an adapter) is not bypassed."""
    calls = []

    class Custom(HFPolicy):
        def generate_with_logprobs(self, prompts, sampling, logprobs=True):
            calls.append(len(prompts))
            return super().generate_with_logprobs(prompts, sampling, logprobs)

    model, tok = build_tiny_model(seed=3)
    trajs = _run(Custom(model, tok), "cached", [1, 2], GREEDY, max_turns=1)
    assert calls == [2] and all(t.turns == 1 for t in trajs)


class OtherSystemEnv(RaggedEnv):
    """RaggedEnv whose seeds >= 50 get another system prompt: they cannot join a batch whose kept prefix is
    the first system prompt."""

    def reset(self, *, seed=None, options=None):
        messages, info = super().reset(seed=seed, options=options)
        if self.seed_ >= 50:
            self.messages[0] = {"role": "system", "content": "Another assistant entirely."}
        return list(self.messages), info


@pytest.mark.parametrize("engine", ["cached", "simple"])
def test_continuous_batching_runs_each_episode_as_one_batch_does(engine):
    """stream_collect with 3 envs for 9 episodes of uneven length: finished episodes hand their env to the next
    spec, which joins the running batch (cached engine) or waits for a fresh session (other system prompt,
    simple engine); every trajectory equals the one-batch simple-engine run, returned in spec order."""
    from trace_train.rollout import stream_collect

    policy = _policy()
    seeds = [0, 5, 2, 1, 6, 3, 50, 51, 4]
    reference = collect(
        policy,
        [OtherSystemEnv() for _ in seeds],
        [ResetSpec(seed=s) for s in seeds],
        GREEDY,
        5,
        engine="simple",
    )
    finished: list[int] = []
    engine_stats = engine_for(policy).stats
    joins_before = engine_stats.joins
    streamed = stream_collect(
        policy,
        [OtherSystemEnv() for _ in range(3)],
        [ResetSpec(seed=s) for s in seeds],
        GREEDY,
        5,
        engine=engine,
        on_finish=lambda i, traj, env: finished.append(i),
    )
    assert sorted(finished) == list(range(len(seeds))) and finished != list(range(len(seeds)))
    assert [t.spec.seed for t in streamed] == seeds
    for a, b in zip(reference, streamed, strict=True):
        assert a.token_ids == b.token_ids and a.policy_mask == b.policy_mask and a.reward == b.reward
        assert torch.allclose(torch.tensor(a.sampler_logprobs), torch.tensor(b.sampler_logprobs), atol=1e-5)
    joins = engine_stats.joins - joins_before
    if engine == "cached":
        assert 1 <= joins < len(seeds) - 3  # some joined; the other-system seeds could not
    else:
        assert joins == 0


def test_the_kept_prefix_stops_at_the_system_segment_so_later_conversations_join():
    """The first batch's prompts share more than the system segment ("Find record 2..."): the stream caps the
    kept prefix at the system/tools segment, so a later task with another request still joins the batch."""
    from trace_train.rollout import stream_collect

    policy = _policy()
    seeds = [
        4,
        4,
        3,
        1,
    ]  # 28, 28, 21 share "Find record 2"; seed 1 asks for record 7 after two 1-turn tasks end
    stats = engine_for(policy).stats
    joins = stats.joins
    streamed = stream_collect(
        policy, [RaggedEnv() for _ in range(3)], [ResetSpec(seed=s) for s in seeds], GREEDY, 5
    )
    assert stats.joins - joins >= 1
    reference = _run(policy, "simple", seeds, GREEDY)
    assert [t.token_ids for t in streamed] == [t.token_ids for t in reference]


def test_the_cache_reaches_a_decoder_with_the_pre_5_24_signature():
    # transformers < 5.24 takes the cache as past_key_values and ignores an unknown cache= keyword: each turn
    # would then be decoded without the conversation before it
    seeds = list(range(5))
    expected = _run(_policy(), "cached", seeds, GREEDY)
    policy = _policy()
    with_past_key_values_signature(policy.model)
    got = _run(policy, "cached", seeds, GREEDY)
    for a, b in zip(expected, got, strict=True):
        assert a.token_ids == b.token_ids and a.actions == b.actions
