"""OpenAIHTTPPolicy against the local OpenAI-compatible stand-in (no network)."""

from __future__ import annotations

import json
import threading

import pytest

from tests.openai_standin import StandinServer, standin_fixture  # noqa: F401 - the `standin` fixture
from trace_gym.core.parsing import parse_action
from trace_gym.openai_client import OpenAIError
from trace_train.policies.base import Policy, SamplingConfig
from trace_train.policies.openai_http import OpenAIHTTPPolicy, clean_message

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    },
}


def policy_for(server: StandinServer, **kwargs) -> OpenAIHTTPPolicy:
    return OpenAIHTTPPolicy("stand-in", base_url=server.base_url, timeout=5.0, **kwargs)


def test_is_a_policy(standin):
    assert isinstance(policy_for(standin), Policy)


def test_batch_in_order_with_sampling_mapped(standin):
    standin.respond = lambda request: "answer " + request["messages"][-1]["content"]
    policy = policy_for(standin)
    conversations = [[{"role": "user", "content": f"q{i}"}] for i in range(5)]
    sampling = SamplingConfig(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=32, stop=("END",), seed=10)
    texts = policy.act(conversations, [[]] * 5, sampling)
    assert texts == [f"answer q{i}" for i in range(5)]
    by_question = {r["messages"][-1]["content"]: r for r in standin.requests}
    for i in range(5):
        sent = by_question[f"q{i}"]
        assert sent["model"] == "stand-in" and sent["temperature"] == 0.7 and sent["top_p"] == 0.9
        assert sent["top_k"] == 20 and sent["max_tokens"] == 32 and sent["stop"] == ["END"]
        assert sent["seed"] == 10 + i  # distinct samples for a group of equal prompts
        assert "tools" not in sent  # no tools, no tools field


def test_requests_of_a_batch_run_concurrently(standin):
    """All 8 requests must be in flight at once: each waits until it has seen 8 in flight. An event, not a race
    against the clock: sequential requests never get there (each gives up after a generous 60 s and the test
    fails), concurrent ones pass however loaded the machine."""
    lock, all_in = threading.Lock(), threading.Event()
    in_flight = [0]

    def together(request):
        with lock:
            in_flight[0] += 1
            if in_flight[0] == 8:
                all_in.set()
        reached = all_in.wait(timeout=60)
        return "ok" if reached else "alone"

    standin.respond = together
    policy = OpenAIHTTPPolicy(
        "stand-in", base_url=standin.base_url, timeout=120.0, max_workers=8, max_retries=0
    )
    texts = policy.act([[{"role": "user", "content": "x"}]] * 8, [[]] * 8, SamplingConfig())
    assert texts == ["ok"] * 8


def test_structured_tool_calls_render_as_tool_call_blocks(standin):
    call = {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "k1"}'}}
    standin.respond = lambda request: {"content": "Let me check.", "tool_calls": [call]}
    conversation = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "name": "lookup", "content": "v1"},
    ]
    [text] = policy_for(standin).act([conversation], [[TOOL]], SamplingConfig(temperature=0.0))
    assert text == 'Let me check.\n<tool_call>{"name": "lookup", "arguments": {"key": "k1"}}</tool_call>'
    turn = parse_action(text)  # the env reads it like a local model's text
    assert turn.tool_calls[0].name == "lookup" and turn.tool_calls[0].arguments == {"key": "k1"}
    sent = standin.requests[-1]
    assert sent["tools"] == [TOOL] and sent["temperature"] == 0.0 and "seed" not in sent
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "c", "content": "v1"}  # "name" dropped


def test_malformed_structured_arguments_are_passed_through(standin):
    call = {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}}
    standin.respond = lambda request: {"content": None, "tool_calls": [call]}
    [text] = policy_for(standin).act([[{"role": "user", "content": "x"}]], [[TOOL]], SamplingConfig())
    assert (
        json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>"))["arguments"] == "{not json"
    )


def test_tool_choice_none_is_sent(standin):
    policy_for(standin, tool_choice="none").act(
        [[{"role": "user", "content": "x"}]], [[TOOL]], SamplingConfig()
    )
    assert standin.requests[-1]["tool_choice"] == "none"


def test_lora_name_addresses_a_hot_loaded_adapter(standin, tmp_path):
    policy = policy_for(standin)
    policy.load_adapter(tmp_path, "cap-a")
    assert standin.adapters == {"cap-a": str(tmp_path)}
    policy.act([[{"role": "user", "content": "x"}]], [[]], SamplingConfig())
    assert standin.requests[-1]["model"] == "cap-a"
    fixed = policy_for(standin, lora_name="cap-a")
    assert fixed.served_model == "cap-a"


def test_retry_then_failure_propagates(standin):
    standin.fail(500, times=1)
    policy = OpenAIHTTPPolicy("stand-in", base_url=standin.base_url, max_retries=2)
    policy.client.backoff = 0.001
    assert policy.act([[{"role": "user", "content": "x"}]], [[]], SamplingConfig()) == ["echo: x"]
    with pytest.raises(OpenAIError, match="does not exist"):
        OpenAIHTTPPolicy("missing", base_url=standin.base_url).act(
            [[{"role": "user", "content": "x"}]] * 2, [[]] * 2, SamplingConfig()
        )


def test_mismatched_tools_and_empty_batch(standin):
    policy = policy_for(standin)
    assert policy.act([], [], SamplingConfig()) == []
    with pytest.raises(ValueError):
        policy.act([[{"role": "user", "content": "x"}]], [], SamplingConfig())


def test_clean_message_keeps_role_keys():
    assert clean_message({"role": "user", "content": "x", "extra": 1}) == {"role": "user", "content": "x"}


def test_http_policy_and_tool_text_import_without_torch_or_transformers():
    import subprocess
    import sys

    code = (
        "import sys, trace_train.policies.openai_http, trace_train.tool_text; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
