"""Generation on a server (issue 51): ``trace serve`` started as a real subprocess speaks vLLM's token-id
``/v1/completions`` with log-probs and LoRA hot-loading, and a :class:`ServedPolicy` that generates there gives
the local engine's episodes (greedy), for the base and for a hot-loaded adapter; a server that dies mid-run
stops the run with a one-line error, and the resumed run loses and duplicates no episode."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.interop.servers import ServerProcess
from trace_gym.openai_client import OpenAIClient
from trace_train.config import EvalSettings
from trace_train.evaluate import evaluate
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.policies.remote_generation import RemoteGenerationError
from trace_train.policies.served import ServedPolicy

ENV = "traintest/lookup-v0"
SETTINGS = EvalSettings(episodes=6, max_new_tokens=6, max_turns=2, batch_size=3, min_oracle_ceiling=0)


@pytest.fixture(scope="module")
def served_dirs(tmp_path_factory):
    """A tiny model whose greedy turns differ between tasks (the plain random init answers newlines only, which
    would make any equality check vacuous), and a LoRA adapter that changes them."""
    from trace_train.config import LoraSettings
    from trace_train.models import build_tiny_model
    from trace_train.policies.hf import attach_lora

    root = tmp_path_factory.mktemp("served")
    model, tokenizer = build_tiny_model(seed=3)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    peft = attach_lora(model, LoraSettings(rank=4, alpha=8), None)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    peft.save_pretrained(root / "adapter")
    return root / "model", root / "adapter"


@pytest.fixture(scope="module")
def server(served_dirs):
    proc = ServerProcess("serve", str(served_dirs[0]), "--port", "0", "--engine", "cached")
    yield proc
    proc.stop()


def _episodes(policy, out=None, resume=False, settings=SETTINGS):
    return evaluate(policy, ENV, settings, split="train", out_jsonl=out, resume=resume).trajectories


def _same(a, b):
    drop = ("model",)  # the policy's name: the local directory vs directory+server
    return [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]


def test_served_episodes_equal_the_local_engines_for_the_base_and_a_hot_loaded_adapter(served_dirs, server):
    model_dir, adapter = served_dirs
    local_base = _episodes(HFPolicy.from_pretrained(str(model_dir)))
    local_adapter = _episodes(HFPolicy.from_pretrained(str(model_dir), adapter=str(adapter)))
    assert len({json.dumps(r["actions"]) for r in local_base}) > 1  # not a constant answer
    assert [r["actions"] for r in local_adapter] != [r["actions"] for r in local_base]

    policy = ServedPolicy.connect(str(model_dir), server.url, timeout=30)
    assert _same(_episodes(policy), local_base)
    name = policy.use_adapter(str(adapter))
    assert name in OpenAIClient(base_url=server.url).models()  # hot-loaded, addressed by name
    assert _same(_episodes(policy), local_adapter)
    policy.close()
    assert OpenAIClient(base_url=server.url).models() == [policy.generator.served_model]  # unloaded
    assert _same(_episodes(policy), local_base)  # the base again: the adapter is off


def test_completions_return_the_samplers_log_probs(served_dirs, server):
    model_dir, _ = served_dirs
    local = HFPolicy.from_pretrained(str(model_dir))
    policy = ServedPolicy.connect(str(model_dir), server.url, timeout=30)
    prompts = [local.prompt_ids([{"role": "user", "content": f"task {i}"}], []) for i in range(2)]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=5)
    ids, lps = policy.generate_with_logprobs(prompts, sampling)
    want_ids, want_lps = local.generate_with_logprobs(prompts, sampling)
    assert ids == want_ids
    assert all(len(a) == len(b) for a, b in zip(lps, ids, strict=True))
    assert all(
        math.isclose(x, y, abs_tol=1e-3)
        for a, b in zip(lps, want_lps, strict=True)
        for x, y in zip(a, b, strict=True)
    )


def test_a_server_for_another_model_is_refused(served_dirs, server, tmp_path):
    from trace_train.models import save_tiny_model

    other = save_tiny_model(tmp_path / "other")
    with pytest.raises(RemoteGenerationError, match="serves .* but this run's model is"):
        ServedPolicy.connect(str(other), server.url, timeout=30)


def test_a_server_killed_mid_run_stops_it_with_one_line_and_the_resumed_run_loses_nothing(
    served_dirs, server, tmp_path
):
    model_dir, _ = served_dirs
    full = tmp_path / "local.jsonl"
    _episodes(HFPolicy.from_pretrained(str(model_dir)), out=full)
    first = ServerProcess("serve", str(model_dir), "--port", "0")
    policy = ServedPolicy.connect(str(model_dir), first.url, timeout=30, max_retries=1)
    policy.generator.client.backoff = 0.01
    real, calls = policy.generate_with_logprobs, []

    def kill_on_second_batch(prompts, sampling, logprobs=True):
        calls.append(len(prompts))
        if len(calls) == 2:  # mid-run: the first batch's episodes are written, the second's are not
            first.stop()
        return real(prompts, sampling, logprobs)

    policy.generate_with_logprobs = kill_on_second_batch
    out = tmp_path / "served.jsonl"
    with pytest.raises(RemoteGenerationError) as err:
        _episodes(policy, out=out)
    message = str(err.value)
    assert "\n" not in message and first.url in message and "failed after 2 attempts" in message
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert 0 < len(kept) < SETTINGS.episodes

    # resumed on another server of the same model (the module's, on another port): only the unwritten tasks run
    again = ServedPolicy.connect(str(model_dir), server.url, timeout=30)
    _episodes(again, out=out, resume=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    seeds = [r["seed"] for r in records]
    assert len(seeds) == len(set(seeds)) == SETTINGS.episodes  # none lost, none twice
    assert _same(records, [json.loads(line) for line in full.read_text().splitlines()])


def test_trace_rollout_and_calibrate_through_the_server_equal_the_local_ones(served_dirs, server, tmp_path):
    """The commands' own path (``--server-url``): rollout records and a calibration equal the local ones."""
    from trace_train.base_rollouts import RolloutArgs, rollout
    from trace_train.calibrate import calibrate
    from trace_train.config import CalibrationSettings, GenerationSettings
    from trace_train.policy_factory import make_policy

    model_dir = str(served_dirs[0])
    common = dict(env_id=ENV, model=model_dir, episodes=4, max_turns=2, max_new_tokens=6, batch_size=2)
    common.update(min_oracle_ceiling=0)
    rollout(RolloutArgs(**common, out=str(tmp_path / "local")))
    rollout(RolloutArgs(**common, out=str(tmp_path / "served"), server_url=server.url))
    local = (tmp_path / "local" / "trajectories.jsonl").read_text().splitlines()
    served = (tmp_path / "served" / "trajectories.jsonl").read_text().splitlines()
    assert _same([json.loads(x) for x in served], [json.loads(x) for x in local])

    settings = CalibrationSettings(
        seeds=2, group_size=2, levels=[], temperature=0.0, max_new_tokens=6, max_turns=2, min_oracle_ceiling=0
    )
    served_policy = make_policy(model_dir, generation=GenerationSettings(server_url=server.url))
    assert isinstance(served_policy, ServedPolicy)
    a = calibrate(ENV, HFPolicy.from_pretrained(model_dir), settings, model_name="m")
    b = calibrate(ENV, served_policy, settings, model_name="m")
    assert a.to_spec() == b.to_spec()


def test_grpo_samples_on_trace_serve_with_the_adapter_hot_loaded_and_its_log_probs(
    served_dirs, server, tmp_path
):
    """``trace train --vllm-url`` against ``trace serve``: each step's adapter is hot-loaded and addressed, and
    the server's log-probs come back with the sampled ids (the importance correction's sampler side)."""
    from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer

    args = GRPOArgs(
        env_id="traintest/echo-v0",
        model=str(served_dirs[0]),
        out=str(tmp_path / "grpo"),
        steps=2,
        groups_per_step=1,
        group_size=2,
        max_new_tokens=4,
        lora_rank=4,
        save_every=1000,
        micro_batch_size=4,
        tensorboard=False,
        progress=False,
        vllm_url=server.url,
        vllm_lora_name="grpo-test",
    )
    trainer = GRPOTrainer(args)
    real, seen = trainer.remote.generate_with_logprobs, []

    def record(prompts, sampling, seeds=None):
        seen.append((trainer.remote.lora_name, *real(prompts, sampling, seeds)))
        return seen[-1][1:]

    trainer.remote.generate_with_logprobs = record
    trainer.train()
    assert [name for name, _, _ in seen] == ["grpo-test-step-0", "grpo-test-step-1"]  # each step's adapter
    assert all(
        len(lp) == len(ids) and all(math.isfinite(x) and x <= 0 for x in lp)
        for _, rows, lps in seen
        for ids, lp in zip(rows, lps, strict=True)
    )
    assert "grpo-test-step-2" in OpenAIClient(base_url=server.url).models()
    trainer.remote.release()
    assert "grpo-test-step-2" not in OpenAIClient(base_url=server.url).models()


def test_a_server_too_slow_to_answer_gives_a_bounded_retry_then_one_line():
    """A server that accepts the connection and never answers: ``server_retries`` retries of ``server_timeout``
    each, then one line naming the server and the cause (never a hang)."""
    import socket
    import time

    from trace_train.models import build_tiny_tokenizer
    from trace_train.policies.remote_generation import RemoteGenerator

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    client = OpenAIClient(base_url=url, timeout=0.3, max_retries=2, backoff=0.01)
    tokenizer = build_tiny_tokenizer()
    policy = ServedPolicy(
        tokenizer, RemoteGenerator(url, [tokenizer.eos_token_id], served_model="m", client=client), "m"
    )
    started = time.monotonic()
    try:
        with pytest.raises(RemoteGenerationError) as err:
            policy.generate_with_logprobs([[1, 2, 3]], SamplingConfig(temperature=0.0, max_new_tokens=3))
    finally:
        silent.close()
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert "\n" not in message and url in message and "failed after 3 attempts: timed out" in message


def test_grpo_refuses_a_server_of_another_local_model(served_dirs, server, tmp_path):
    from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer
    from trace_train.models import save_tiny_model

    other = save_tiny_model(tmp_path / "other")
    args = GRPOArgs(
        env_id="traintest/echo-v0", model=str(other), out=str(tmp_path / "g"), steps=1, lora_rank=4
    )
    args.vllm_url, args.tensorboard, args.progress = server.url, False, False
    with pytest.raises(RemoteGenerationError, match="serves .* but this run's model is"):
        GRPOTrainer(args)


def test_a_failed_hot_load_names_the_adapters_own_rank(tmp_path):
    """The hint of a failed hot-load says how to start a server that takes this adapter: --max-lora-rank of the
    adapter's rank (it always said 16, the default)."""
    import json
    import socket

    from trace_train.models import build_tiny_tokenizer
    from trace_train.policies.remote_generation import RemoteGenerator

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 64, "peft_type": "LORA"}))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    closed.close()  # nothing listens there: the load fails at once
    client = OpenAIClient(base_url=url, timeout=0.3, max_retries=0, backoff=0.01)
    tokenizer = build_tiny_tokenizer()
    policy = ServedPolicy(
        tokenizer, RemoteGenerator(url, [tokenizer.eos_token_id], served_model="m", client=client), "m"
    )
    with pytest.raises(RemoteGenerationError, match="--max-lora-rank 64"):
        policy.use_adapter(str(adapter))
