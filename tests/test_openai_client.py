"""The stdlib OpenAI-compatible client against the local stand-in server (no network)."""

from __future__ import annotations

import json
import socket

import pytest

from tests.openai_standin import StandinServer, standin_fixture  # noqa: F401 - the `standin` fixture
from trace_gym.openai_client import AssistantMessage, OpenAIClient, OpenAIError


def fast_client(server: StandinServer, **kwargs) -> OpenAIClient:
    kwargs.setdefault("backoff", 0.001)
    return OpenAIClient(base_url=server.base_url, timeout=5.0, **kwargs)


def test_chat_sends_options_and_returns_message(standin):
    standin.respond = lambda request: {"content": "hi there"}
    client = fast_client(standin, api_key="sk-test")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    message = client.chat(
        "stand-in",
        [{"role": "user", "content": "hello"}],
        tools=tools,
        temperature=0.0,
        top_p=0.9,
        max_tokens=7,
        seed=3,
        stop="END",
        n=1,
        extra={"top_k": 5},
    )
    assert message == AssistantMessage(content="hi there", tool_calls=[], finish_reason="stop")
    sent = standin.requests[-1]
    assert sent["model"] == "stand-in" and sent["messages"] == [{"role": "user", "content": "hello"}]
    assert sent["tools"] == tools and sent["temperature"] == 0.0 and sent["top_p"] == 0.9
    assert sent["max_tokens"] == 7 and sent["seed"] == 3 and sent["stop"] == ["END"] and sent["n"] == 1
    assert sent["top_k"] == 5
    assert standin.headers[-1]["Authorization"] == "Bearer sk-test"


def test_unset_options_are_left_out(standin, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fast_client(standin).chat("stand-in", [{"role": "user", "content": "x"}])
    assert set(standin.requests[-1]) == {"model", "messages"}
    assert "Authorization" not in standin.headers[-1]


def test_api_key_from_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    with StandinServer(api_key="sk-env") as server:
        assert fast_client(server).chat("stand-in", [{"role": "user", "content": "x"}]).content
    assert "sk-env" not in repr(OpenAIClient(api_key="sk-env"))


def test_tool_calls_and_several_choices(standin):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    standin.respond = lambda request: [{"content": None, "tool_calls": [call]}, "second"]
    choices = fast_client(standin).chat_choices("stand-in", [{"role": "user", "content": "x"}], n=2)
    assert choices[0].tool_calls == [call] and choices[0].finish_reason == "tool_calls"
    assert choices[0].to_message() == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert choices[1].content == "second"


def test_retries_5xx_and_429_then_succeeds(standin):
    standin.fail(500, times=2)
    standin.fail(429, times=1, retry_after="0")
    message = fast_client(standin, max_retries=3).chat("stand-in", [{"role": "user", "content": "x"}])
    assert message.content == "echo: x"
    assert len(standin.calls) == 4


def test_gives_up_after_bounded_retries_naming_url_and_status(standin):
    standin.fail(503, times=10)
    client = fast_client(standin, max_retries=2)
    with pytest.raises(OpenAIError) as err:
        client.chat("stand-in", [{"role": "user", "content": "x"}])
    assert err.value.status == 503
    assert "/v1/chat/completions" in str(err.value) and "503" in str(err.value)
    assert len(standin.calls) == 3


def test_client_errors_are_not_retried(standin):
    with pytest.raises(OpenAIError) as err:
        fast_client(standin).chat("no-such-model", [{"role": "user", "content": "x"}])
    assert err.value.status == 404 and "does not exist" in str(err.value)
    assert len(standin.calls) == 1


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = OpenAIClient(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.001, timeout=2)
    with pytest.raises(OpenAIError) as err:
        client.chat("m", [{"role": "user", "content": "x"}])
    assert f"127.0.0.1:{port}/v1/chat/completions" in str(err.value) and err.value.status is None


def test_bad_answer_shape_is_an_error(standin):
    standin.respond = lambda request: {"choices": []}
    with pytest.raises(OpenAIError, match="no choices"):
        fast_client(standin).chat("stand-in", [{"role": "user", "content": "x"}])


def test_lora_hot_loading(standin, tmp_path):
    client = fast_client(standin)
    client.load_lora_adapter("cap-a", tmp_path)
    assert standin.adapters == {"cap-a": str(tmp_path)}
    assert "cap-a" in client.models()
    assert client.chat("cap-a", [{"role": "user", "content": "x"}]).content == "echo: x"
    with pytest.raises(OpenAIError) as err:
        client.load_lora_adapter("cap-a", tmp_path)
    assert err.value.status == 400
    client.load_lora_adapter("cap-a", tmp_path / "step2", replace=True)
    assert standin.adapters == {"cap-a": str(tmp_path / "step2")}
    client.load_lora_adapter("cap-b", tmp_path, replace=True)  # replacing a name not loaded is fine
    client.unload_lora_adapter("cap-a")
    assert client.models() == ["stand-in", "cap-b"]
    assert json.loads(json.dumps(standin.calls))  # every call was recorded
