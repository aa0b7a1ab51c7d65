"""A local stand-in for an OpenAI-compatible server (vLLM flavour), for tests that must not touch the network.

A real HTTP server on 127.0.0.1 (port chosen by the OS) in a background thread::

    with StandinServer(respond=lambda request: "hello") as server:
        client = OpenAIClient(base_url=server.base_url)

Endpoints: ``POST /v1/chat/completions`` (the answer comes from ``respond(request_body)``, which may return a
string (the content), a message dict (``content`` / ``tool_calls``), a list of those (one per choice) or a
whole response dict with ``choices``), ``GET /v1/models``, and vLLM's ``POST /v1/load_lora_adapter`` /
``/v1/unload_lora_adapter`` (loaded adapters become servable model names, as in vLLM; every load and unload is
logged in ``adapter_log``). ``POST /v1/completions`` takes token-id prompts: ``complete(request_body)`` returns
one list of generated ids per prompt (or a whole response dict with ``choices``), sent back the way the request
asks for them (vLLM's ``return_token_ids`` -> ``choices[i].token_ids``; ``return_tokens_as_token_ids`` with
``logprobs`` -> ``logprobs.tokens`` as ``"token_id:N"``); ``token_ids_via`` picks which of the two the server
understands, to act as a recent vLLM (``"token_ids"``), an older one (``"logprobs"``) or a server without
either (``None``). Every chat request body is kept in ``requests``, every completion body in
``completion_requests``, so tests can check what was sent. ``fail(status, times)`` makes the next requests fail,
for retry tests. The ``standin`` fixture (import ``standin_fixture``) wraps one server per test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Responder = Callable[[dict[str, Any]], Any]


def one_token(request: dict[str, Any]) -> list[list[int]]:
    """Default completion: each prompt's last token once."""
    return [[p[-1] if p else 0] for p in request.get("prompt") or []]


def echo(request: dict[str, Any]) -> str:
    """Default responder: repeats the last message's content."""
    messages = request.get("messages") or [{}]
    return f"echo: {messages[-1].get('content')}"


class StandinServer:
    def __init__(
        self,
        respond: Responder = echo,
        models: tuple[str, ...] = ("stand-in",),
        api_key: str | None = None,
        complete: Responder = one_token,
        token_ids_via: str | None = "token_ids",
    ):
        self.respond = respond
        self.complete = complete
        self.token_ids_via = token_ids_via
        self.models = list(models)
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []  # chat request bodies, in arrival order
        self.calls: list[tuple[str, str]] = []  # (method, path) of every request
        self.headers: list[dict[str, str]] = []
        self.completion_requests: list[dict[str, Any]] = []  # completion request bodies
        self.adapters: dict[str, str] = {}  # lora_name -> lora_path
        self.adapter_log: list[tuple[str, str, str | None]] = []  # ("load" | "unload", name, path)
        self._failures: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- control ----------------------------------------------------------------------------------------------
    def fail(self, status: int = 500, times: int = 1, retry_after: str | None = None) -> None:
        """The next ``times`` requests (any endpoint) answer ``status``."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * times)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stand-in server is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> StandinServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- endpoints --------------------------------------------------------------------------------------------
    def _next_failure(self) -> tuple[int, str | None] | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    def _chat(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(body)
        model = body.get("model")
        if model not in self.models and model not in self.adapters:
            return 404, {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
        answer = self.respond(body)
        if isinstance(answer, dict) and "choices" in answer:
            return 200, answer
        answers = answer if isinstance(answer, list) else [answer]
        choices = []
        for i, item in enumerate(answers):
            message = {"content": item} if isinstance(item, str) else dict(item)
            message.setdefault("content", None)
            message["role"] = "assistant"
            reason = "tool_calls" if message.get("tool_calls") else "stop"
            choices.append({"index": i, "message": message, "finish_reason": reason})
        return 200, {
            "id": "chatcmpl-standin",
            "object": "chat.completion",
            "model": model,
            "choices": choices,
        }

    def _completions(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.completion_requests.append(body)
        model = body.get("model")
        if model not in self.models and model not in self.adapters:
            return 404, {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
        answer = self.complete(body)
        if isinstance(answer, dict) and "choices" in answer:
            return 200, answer
        choices = []
        for i, ids in enumerate(answer):
            choice: dict[str, Any] = {"index": i, "text": "", "finish_reason": "stop"}
            if self.token_ids_via == "token_ids" and body.get("return_token_ids"):
                choice["token_ids"] = list(ids)
            if (
                self.token_ids_via == "logprobs"
                and body.get("logprobs") is not None
                and body.get("return_tokens_as_token_ids")
            ):
                choice["logprobs"] = {
                    "tokens": [f"token_id:{t}" for t in ids],
                    "token_logprobs": [0.0] * len(ids),
                }
            choices.append(choice)
        return 200, {"id": "cmpl-standin", "object": "text_completion", "model": model, "choices": choices}

    def _load(self, body: dict[str, Any]) -> tuple[int, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return 400, {"error": {"message": "lora_name and lora_path are required"}}
        with self._lock:
            if name in self.adapters:
                return 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
            self.adapters[name] = path
            self.adapter_log.append(("load", name, path))
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def _unload(self, body: dict[str, Any]) -> tuple[int, Any]:
        name = body.get("lora_name")
        with self._lock:
            if name not in self.adapters:
                return 404, {"error": {"message": f"The lora adapter '{name}' cannot be found."}}
            del self.adapters[name]
            self.adapter_log.append(("unload", name, None))
        return 200, f"Success: LoRA adapter '{name}' removed successfully."

    def _models(self) -> tuple[int, Any]:
        ids = self.models + sorted(self.adapters)
        return 200, {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}


def _handler(server: StandinServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def _dispatch(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with server._lock:
                server.calls.append((method, self.path))
                server.headers.append(dict(self.headers))
            failure = server._next_failure()
            if failure is not None:
                status, retry_after = failure
                extra = {"Retry-After": retry_after} if retry_after is not None else {}
                return self._send(status, {"error": {"message": f"injected failure {status}"}}, extra)
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                return self._send(401, {"error": {"message": "Incorrect API key provided"}})
            try:
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                return self._send(400, {"error": {"message": "body is not JSON"}})
            routes: dict[tuple[str, str], Callable[[], tuple[int, Any]]] = {
                ("POST", "/v1/chat/completions"): lambda: server._chat(body),
                ("POST", "/v1/completions"): lambda: server._completions(body),
                ("POST", "/v1/load_lora_adapter"): lambda: server._load(body),
                ("POST", "/v1/unload_lora_adapter"): lambda: server._unload(body),
                ("GET", "/v1/models"): server._models,
            }
            route = routes.get((method, self.path))
            if route is None:
                return self._send(404, {"error": {"message": f"no route {method} {self.path}"}})
            try:
                status, payload = route()
            except Exception as err:  # noqa: BLE001 - a broken responder shows up as a 500, like a real server
                status, payload = 500, {"error": {"message": f"responder failed: {err!r}"}}
            self._send(status, payload)

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            text = payload if isinstance(payload, str) else json.dumps(payload)
            data = text.encode()
            self.send_response(status)
            kind = "text/plain" if isinstance(payload, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture(name="standin")
def standin_fixture():
    """One stand-in server per test; set ``standin.respond`` to script its answers."""
    with StandinServer() as server:
        yield server
