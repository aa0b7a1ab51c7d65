"""`trace serve` as a real server process, driven by the official `openai` client."""

import http.client
import json
from urllib.parse import urlparse

import openai
import pytest

from tests.interop.servers import ServerProcess

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def scripted():
    proc = ServerProcess(
        "serve",
        "py:tests.interop.scripted_policy:ScriptedPolicy",
        "--port",
        "0",
        "--served-model-name",
        "scripted",
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(scripted):
    return openai.OpenAI(base_url=scripted.url, api_key="unused", max_retries=0, timeout=60)


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list().data] == ["scripted"]


def test_tool_calls_come_back_structured_and_round_trip(client):
    messages = [{"role": "user", "content": "Paris"}]
    reply = client.chat.completions.create(model="scripted", messages=messages, tools=[WEATHER])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model="scripted", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "The tool answered: sunny"
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls


def test_tool_choice_none_returns_text(client):
    reply = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "Rome"}], tools=[WEATHER], tool_choice="none"
    )
    assert reply.choices[0].message.content == "echo: Rome" and not reply.choices[0].message.tool_calls


def test_streaming_matches_the_plain_answer(client):
    kwargs = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "Oslo " * 20}],
        "tools": [WEATHER],
    }
    plain = client.chat.completions.create(**kwargs).choices[0]
    content, calls, finish, usage = "", {}, None, None
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    chunks = 0
    for chunk in stream:
        chunks += 1
        usage = chunk.usage or usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += (call.function.name or "") if call.function else ""
            entry["arguments"] += (call.function.arguments or "") if call.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert chunks > 4  # really in pieces
    assert content == plain.message.content and finish == "tool_calls" and usage.total_tokens > 0
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == json.loads(plain.message.tool_calls[0].function.arguments)


@pytest.mark.parametrize(
    ("kwargs", "error", "param"),
    [
        ({"model": "other"}, openai.NotFoundError, "model"),
        ({"temperature": 5}, openai.BadRequestError, "temperature"),
        ({"messages": []}, openai.BadRequestError, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, openai.BadRequestError, "messages[0]"),
        ({"tool_choice": "required", "tools": [WEATHER]}, openai.BadRequestError, "tool_choice"),
        ({"n": 3}, openai.BadRequestError, "n"),
        ({"max_tokens": 0}, openai.BadRequestError, "max_tokens"),
        ({"tools": [{"type": "function"}]}, openai.BadRequestError, "tools"),
    ],
)
def test_bad_requests_get_openai_errors(client, kwargs, error, param):
    request = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], **kwargs}
    with pytest.raises(error) as caught:
        client.chat.completions.create(**request)
    body = caught.value.body
    assert body["param"] == param and body["type"] == "invalid_request_error" and len(body["message"]) > 10


def test_policy_failure_is_a_server_error_and_the_server_survives(client):
    with pytest.raises(openai.InternalServerError, match="scripted failure"):
        client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "please fail"}]
        )
    assert client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "ok"}])


def test_malformed_json_and_unknown_paths(scripted):
    parts = urlparse(scripted.url)
    for method, path, body, status in [
        ("POST", "/v1/chat/completions", b"{oops", 400),
        ("POST", "/v1/embeddings", b"{}", 404),
        # token-id completions need a transformers model; this one is a py: policy
        ("POST", "/v1/completions", b"{}", 400),
        ("GET", "/v1/chat/completions", None, 405),
    ]:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = json.loads(response.read())
        conn.close()
        assert response.status == status and set(payload["error"]) == {"message", "type", "param", "code"}


@pytest.mark.slow  # a transformers model in a subprocess: ~10 s alone, minutes on a loaded 2-core machine
def test_a_real_transformers_model_serves_plain_and_streaming(tmp_path):
    from trace_train.models import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny")
    proc = ServerProcess(
        "serve", str(model_dir), "--port", "0", "--served-model-name", "tiny", "--device", "cpu"
    )
    try:
        client = openai.OpenAI(base_url=proc.url, api_key="unused", max_retries=0, timeout=120)
        kwargs = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hello"}],
            "tools": [WEATHER],
            "max_tokens": 6,
            "temperature": 0,
        }
        plain = client.chat.completions.create(**kwargs)
        assert plain.usage.completion_tokens <= 6 and plain.usage.prompt_tokens > 10
        assert plain.choices[0].finish_reason in ("stop", "length", "tool_calls")
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(**kwargs, stream=True)
            if chunk.choices
        )
        assert streamed == (plain.choices[0].message.content or "")
    finally:
        proc.stop()


def test_sigterm_answers_the_requests_in_flight_then_exits_0():
    """A process manager's stop (SIGTERM) mid-generation: the request being generated is answered, no new one
    is taken, and the server exits 0 saying so (it used to exit at once and cut the connection)."""
    import threading

    proc = ServerProcess(
        "serve", "py:tests.interop.scripted_policy:ScriptedPolicy", "--port", "0", "--served-model-name", "s"
    )
    client = openai.OpenAI(base_url=proc.url, api_key="unused", max_retries=0, timeout=60)
    replies = []
    thread = threading.Thread(
        target=lambda: replies.append(
            client.chat.completions.create(model="s", messages=[{"role": "user", "content": "sleep 2"}])
        )
    )
    thread.start()
    import time

    time.sleep(0.7)  # the request is being generated
    proc.proc.terminate()
    thread.join(timeout=30)
    assert replies and replies[0].choices[0].message.content == "echo: sleep 2"
    assert proc.proc.wait(timeout=30) == 0
    out = proc.proc.stdout.read()
    assert "answering 1 request(s) in flight" in out and "stopped" in out
    with pytest.raises(openai.APIConnectionError):  # no new request is taken
        client.models.list()
    proc.stop()
