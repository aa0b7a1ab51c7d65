"""GRPO rollouts generated on a vLLM-style server: token ids verbatim, LoRA hot-loading, clear errors.

vLLM itself cannot run here. The stand-in server (tests/openai_standin.py) speaks the same endpoints, and
``TinyVLLM`` below makes it generate for real: it loads the hot-loaded PEFT adapter directory onto the tiny
base model with peft and samples from the token-id prompts, as vLLM would.
"""

from __future__ import annotations

import socket
import threading

import pytest
import torch
from safetensors.torch import load_file

from tests.openai_standin import StandinServer, standin_fixture  # noqa: F401 - the `standin` fixture
from trace_gym.openai_client import OpenAIClient, OpenAIError
from trace_gym.registration import make_env
from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer
from trace_train.policies.base import SamplingConfig
from trace_train.policies.remote_generation import RemoteGenerationError, RemoteGenerator
from trace_train.rollout import ResetSpec, collect


def fast_client(server: StandinServer) -> OpenAIClient:
    return OpenAIClient(base_url=server.base_url, timeout=10.0, backoff=0.001)


class TinyVLLM:
    """``complete`` callable for the stand-in: generates with the tiny model plus the adapter named by
    ``model`` (loaded from the path the trainer hot-loaded, with peft), honouring the sampling fields."""

    def __init__(self, model_dir, server: StandinServer):
        self.model_dir, self.server = str(model_dir), server
        self.cache: dict[str, object] = {}
        self.loaded_paths: list[str] = []
        self.lock = threading.Lock()  # torch's global RNG: one request at a time

    def policy(self, name: str):
        from peft import PeftModel

        from trace_train.models import load_model
        from trace_train.policies.hf import HFPolicy

        if name not in self.cache:
            model, tok = load_model(self.model_dir)
            path = self.server.adapters.get(name)
            if path is not None:
                model = PeftModel.from_pretrained(model, path)
                self.loaded_paths.append(path)
            self.cache[name] = HFPolicy(model, tok, name=name)
        return self.cache[name]

    def __call__(self, body: dict) -> list[list[int]]:
        with self.lock:
            policy = self.policy(body["model"])
            assert set(body["stop_token_ids"]) == policy.eos_ids
            sampling = SamplingConfig(
                temperature=body.get("temperature", 1.0),
                top_p=body.get("top_p") or 1.0,
                max_new_tokens=body["max_tokens"],
            )
            torch.manual_seed(body.get("seed", 0))
            return policy.generate_ids(body["prompt"], sampling)


def _args(model_dir, out, url, **kw) -> GRPOArgs:
    base = dict(
        env_id="traintest/echo-v0",
        model=str(model_dir),
        out=str(out),
        steps=2,
        groups_per_step=2,
        group_size=4,
        max_new_tokens=6,
        dynamic_sampling=True,
        lora_rank=4,
        lr=5e-2,
        save_every=1000,  # more than the steps: one checkpoint at the end (0 is refused)
        micro_batch_size=8,
        tensorboard=False,
        progress=False,
        vllm_url=url,
    )
    base.update(kw)
    return GRPOArgs(**base)


def test_client_reads_token_ids_in_both_vllm_formats(standin):
    client = fast_client(standin)
    standin.complete = lambda body: [[7, 8, 9], [4]]
    for via in ("token_ids", "logprobs"):
        standin.token_ids_via = via
        got = client.completions_token_ids(
            "stand-in", [[1, 2, 3], [5]], max_tokens=4, temperature=0.5, top_p=0.9, seed=3, stop_token_ids=[2]
        )
        assert got == [[7, 8, 9], [4]], via
    body = standin.completion_requests[-1]
    assert body["prompt"] == [[1, 2, 3], [5]] and body["n"] == 1 and body["max_tokens"] == 4
    assert body["return_token_ids"] is True
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    assert (body["temperature"], body["top_p"], body["seed"], body["stop_token_ids"]) == (0.5, 0.9, 3, [2])
    standin.token_ids_via = None  # a server that only returns text
    with pytest.raises(OpenAIError, match="no generated token ids") as err:
        client.completions_token_ids("stand-in", [[1], [2]], max_tokens=2)
    assert standin.base_url in str(err.value)


def test_server_ids_enter_the_trajectory_verbatim(standin, tiny_policy):
    eos = tiny_policy.tokenizer.eos_token_id
    scripted = [40, 41, eos, 42]  # the server went past the end of turn: cut after it, like local decoding
    standin.complete = lambda body: [list(scripted) for _ in body["prompt"]]
    remote = RemoteGenerator(standin.base_url, tiny_policy.eos_ids, served_model="stand-in")
    remote.client = fast_client(standin)
    sampling = SamplingConfig(max_new_tokens=6)

    def generator(prompts, _active, _turn):
        return remote.generate(prompts, sampling)

    envs = [make_env("traintest/chat3-v0") for _ in range(2)]
    trajs = collect(
        tiny_policy, envs, [ResetSpec(seed=i) for i in range(2)], sampling, 5, generator=generator
    )
    assert [t.turns for t in trajs] == [3, 3] and len(standin.completion_requests) == 3
    for t in trajs:
        runs, run = [], []
        for tok, m in zip(t.token_ids, t.policy_mask, strict=True):
            if m:
                run.append(tok)
            elif run:
                runs.append(run)
                run = []
        runs += [run] if run else []
        assert runs == [[40, 41, eos]] * 3  # exactly the returned ids, masked, never re-tokenised
    # the prompts sent were the trajectories' own ids at each turn (token-id prompts, no text)
    first = standin.completion_requests[0]
    assert first["model"] == "stand-in" and first["n"] == 1 and first["max_tokens"] == 6
    prefix = first["prompt"][0]
    assert trajs[0].token_ids[: len(prefix)] == prefix and trajs[0].policy_mask[len(prefix)] == 1


def test_grpo_step_generates_on_the_server_and_hot_loads_each_adapter(standin, tiny_model_dir, tmp_path):
    vllm = TinyVLLM(tiny_model_dir, standin)
    standin.complete = vllm
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "run", standin.base_url))

    def local(*_a, **_k):
        raise AssertionError("rollouts must be generated by the server")

    trainer.policy.generate_ids = local
    result = trainer.train()
    assert result["step"] == 2 and result["gen_tokens_per_s"] > 0
    assert [(op, name) for op, name, _ in standin.adapter_log] == [
        ("load", "trace-step-0"),
        ("load", "trace-step-1"),
        ("unload", "trace-step-0"),
        ("load", "trace-step-2"),
        ("unload", "trace-step-1"),
    ]
    assert set(standin.adapters) == {"trace-step-2"}
    # step 1's rollouts used the initial adapter, step 2's the one published after the first update
    models = [body["model"] for body in standin.completion_requests]
    assert set(models) == {"trace-step-0", "trace-step-1"} and models[0] == "trace-step-0"
    step1 = [b for b in standin.completion_requests if b["model"] == "trace-step-0"]
    # one request, and one seed, per rollout
    assert len(step1) >= 8 and len({b["seed"] for b in step1}) == len(step1)
    assert all(len(b["prompt"]) == 1 for b in step1)
    assert vllm.loaded_paths == [standin.adapter_log[0][2], standin.adapter_log[1][2]]
    # the last hot-loaded adapter is the trained one, in PEFT's format; older directories are cleaned up
    served = load_file(f"{standin.adapters['trace-step-2']}/adapter_model.safetensors")
    final = load_file(str(tmp_path / "run" / "adapter" / "adapter_model.safetensors"))
    assert served.keys() == final.keys() and all(torch.equal(served[k], final[k]) for k in final)
    assert any(v.abs().sum() > 0 for k, v in final.items() if "lora_B" in k)
    assert sorted(p.name for p in (tmp_path / "run" / "vllm_adapters").iterdir()) == ["step-0000002"]


def test_response_without_token_ids_is_a_clear_error(standin, tiny_model_dir, tmp_path):
    standin.token_ids_via = None
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "run", standin.base_url, steps=1))
    with pytest.raises(RemoteGenerationError, match="no generated token ids") as err:
        trainer.train()
    message = str(err.value)
    assert standin.base_url in message and "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve" in message


def test_missing_server_is_a_clear_error(tiny_policy):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    remote = RemoteGenerator(
        url,
        tiny_policy.eos_ids,
        model_hint="HuggingFaceTB/SmolLM2-135M-Instruct",
        lora_rank=8,
        client=OpenAIClient(base_url=url, max_retries=0, timeout=2.0),
    )
    with pytest.raises(RemoteGenerationError) as err:
        remote.check_server()
    message = str(err.value)
    assert url in message
    assert (
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve HuggingFaceTB/SmolLM2-135M-Instruct "
        "--enable-lora --max-lora-rank 8" in message
    )


def test_vllm_model_must_be_served(standin, tiny_model_dir, tmp_path):
    with pytest.raises(RemoteGenerationError, match="not 'Qwen/other'"):
        GRPOTrainer(_args(tiny_model_dir, tmp_path / "run", standin.base_url, vllm_model="Qwen/other"))
