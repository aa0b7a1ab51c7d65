"""The OpenAI-compatible policy server: ``POST /v1/chat/completions`` (plain and streaming), ``GET /v1/models``,
and vLLM's token-id ``POST /v1/completions`` with LoRA hot-loading (:mod:`trace_train.serve.completions`).

Requests that arrive together are batched into one ``policy.act`` call (up to ``max_batch`` requests with the
same sampling settings, gathered for at most ``batch_window`` seconds), because a local model generates a batch
in about the time of one conversation. One batch runs at a time: the model is one device's worth of compute.

Streaming sends OpenAI's ``chat.completion.chunk`` events over Server-Sent Events. trace policies return a
whole turn per call (their API is text-level), so the chunks follow the finished generation: the format is
exactly what streaming clients parse (content pieces, tool-call deltas, finish reason, usage), the latency to
the first token is that of the whole turn.

Standard library only (``ThreadingHTTPServer``, HTTP/1.1 keep-alive): the time goes into generation, and
one fewer dependency keeps ``trace serve`` available wherever trace is installed.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlparse

from trace_gym.interop.server import bind_server
from trace_train.policies.base import Conversation, Policy, SamplingConfig, ToolSchema
from trace_train.serve.completions import AdapterHost, completion_response, parse_completion_request
from trace_train.serve.protocol import (
    APIError,
    ChatRequest,
    assistant_message,
    completion,
    parse_request,
    stream_chunks,
)

MAX_BODY = 16 * 1024 * 1024
POST_ROUTES = ("/chat/completions", "/completions", "/load_lora_adapter", "/unload_lora_adapter")


class Batcher:
    """Runs ``policy.act`` on one thread, on batches of requests that share their sampling settings (holding
    ``lock``, which token-id completions and adapter changes also take: one model, one device)."""

    def __init__(
        self, policy: Policy, max_batch: int = 8, window: float = 0.005, lock: threading.Lock | None = None
    ):
        self.policy = policy
        self.lock = lock or threading.Lock()
        self.max_batch = max_batch
        self.window = window
        self.jobs: queue.Queue[tuple[Conversation, list[ToolSchema], SamplingConfig, Future]] = queue.Queue()
        self.batches = 0
        self.thread = threading.Thread(target=self._loop, name="policy-batcher", daemon=True)
        self.thread.start()

    def submit(self, conversation: Conversation, tools: list[ToolSchema], sampling: SamplingConfig) -> Future:
        future: Future = Future()
        self.jobs.put((conversation, tools, sampling, future))
        return future

    def _loop(self) -> None:
        while True:
            batch = [self.jobs.get()]
            deadline = time.monotonic() + self.window
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.jobs.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            groups: dict[SamplingConfig, list] = {}
            for job in batch:
                groups.setdefault(job[2], []).append(job)
            for sampling, jobs in groups.items():
                self.batches += 1
                try:
                    with self.lock:
                        texts = self.policy.act([j[0] for j in jobs], [j[1] for j in jobs], sampling)
                    if len(texts) != len(jobs):
                        raise RuntimeError(
                            f"the policy answered {len(texts)} turns for {len(jobs)} conversations"
                        )
                except Exception as err:  # noqa: BLE001 - every waiting request must hear about it
                    for job in jobs:
                        job[3].set_exception(err)
                    continue
                for job, text in zip(jobs, texts, strict=True):
                    job[3].set_result(text)


class PolicyServer:
    """Serves ``policy`` under ``model_name`` on ``host:port`` (see the module docstring)."""

    def __init__(
        self,
        policy: Policy,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_batch: int = 8,
        batch_window: float = 0.005,
        request_timeout: float = 600.0,
    ):
        self.policy = policy
        self.model_name = model_name or getattr(policy, "name", "trace-policy")
        # token-id completions and LoRA hot-loading (vLLM's endpoints), serialised with chat batches
        self.adapters = AdapterHost(policy)
        self.batcher = Batcher(policy, max_batch=max_batch, window=batch_window, lock=self.adapters.lock)
        self.request_timeout = request_timeout
        self.created = int(time.time())
        self.httpd = bind_server(host, port, _handler(self))
        self.httpd.daemon_threads = True
        self._in_flight = 0  # POST requests being answered: a graceful stop waits for them (drain)
        self._idle = threading.Condition()

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.httpd.server_close()

    def shutdown(self) -> None:
        self.httpd.shutdown()

    def drain(self, timeout: float) -> int:
        """Wait until no request is being answered, or ``timeout`` seconds; returns how many still are (their
        clients lose the connection when the process exits). After :meth:`shutdown` no new request starts."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight and time.monotonic() < deadline:
                self._idle.wait(timeout=max(0.0, deadline - time.monotonic()))
            return self._in_flight

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _begin(self) -> None:
        with self._idle:
            self._in_flight += 1

    def _end(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "trace",
                    "root": self.root,
                },
                *self.adapters.models(self.model_name, self.created),
            ],
        }

    @property
    def root(self) -> str | None:
        """The served model's directory, as vLLM's ``root`` (clients check they talk to their own model)."""
        tokenizer = getattr(self.policy, "tokenizer", None)
        return getattr(tokenizer, "name_or_path", None) or None

    def complete(self, body: Any) -> dict[str, Any]:
        """``POST /v1/completions`` (see :mod:`trace_train.serve.completions`)."""
        self.adapters._require("token-id completion")
        tokenizer = self.policy.tokenizer
        served = (self.model_name, *self.adapters.paths)
        request = parse_completion_request(body, served, tokenizer)
        try:
            outputs = self.adapters.generate(request, self.model_name)
        except APIError:
            raise
        except Exception as err:  # noqa: BLE001 - the model failed: say so in OpenAI's shape
            raise APIError(
                500, f"generation failed: {type(err).__name__}: {err}", kind="server_error"
            ) from err
        eos = set(request.stop_token_ids) | set(self.policy.eos_ids)
        return completion_response(request, outputs, tokenizer, eos)

    def generate(self, request: ChatRequest) -> tuple[dict[str, Any], dict[str, int], str]:
        """The assistant message, usage and finish reason for one request."""
        future = self.batcher.submit(request.messages, request.tools, request.sampling)
        try:
            text = future.result(timeout=self.request_timeout)
        except TimeoutError as err:
            raise APIError(504, "generation timed out", kind="server_error", code="timeout") from err
        except Exception as err:  # noqa: BLE001 - the policy failed: say so in OpenAI's shape
            raise APIError(
                500, f"the policy failed: {type(err).__name__}: {err}", kind="server_error"
            ) from err
        message = assistant_message(text, request.parse_tools)
        usage, finish = self._usage(request, text)
        if message.get("tool_calls"):
            finish = "tool_calls"
        return message, usage, finish

    def _usage(self, request: ChatRequest, text: str) -> tuple[dict[str, int], str]:
        """Token counts from the policy's tokenizer when it has one (else whitespace words, an estimate)."""
        tokenizer = getattr(self.policy, "tokenizer", None)
        prompt_ids = getattr(self.policy, "prompt_ids", None)
        if tokenizer is not None and prompt_ids is not None:
            prompt = len(prompt_ids(request.messages, request.tools))
            generated = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            prompt = sum(len(str(m.get("content") or "").split()) for m in request.messages)
            generated = len(text.split())
        finish = "length" if generated >= request.sampling.max_new_tokens else "stop"
        return {
            "prompt_tokens": prompt,
            "completion_tokens": generated,
            "total_tokens": prompt + generated,
        }, finish


def _handler(server: PolicyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the body until the
        # client's delayed ACK (~40 ms per request on Linux).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = urlparse(self.path).path.rstrip("/")
            if path in ("/v1/models", "/models"):
                self._json(200, server.models())
            elif path in ("/health", "/v1/health"):
                self._json(
                    200, {"status": "ok", "model": server.model_name, "batches": server.batcher.batches}
                )
            elif path in ("/v1/chat/completions", "/chat/completions"):
                self._error(APIError(405, "use POST for /v1/chat/completions", code="method_not_allowed"))
            else:
                self._error(APIError(404, f"no endpoint GET {path}", code="not_found"))

        def do_POST(self) -> None:  # noqa: N802
            server._begin()
            try:
                self._post()
            finally:
                server._end()

        def _post(self) -> None:
            path = urlparse(self.path).path.rstrip("/")
            try:
                raw = self._read()
                route = path.removeprefix("/v1")
                if route not in POST_ROUTES:
                    raise APIError(
                        404,
                        f"no endpoint POST {path}; this server offers "
                        + ", ".join(f"/v1{r}" for r in POST_ROUTES),
                        code="not_found",
                    )
                try:
                    body = json.loads(raw or b"null")
                except (json.JSONDecodeError, UnicodeDecodeError) as err:
                    raise APIError(400, f"the body is not valid JSON: {err}", code="invalid_json") from None
                if route == "/completions":
                    self._json(200, server.complete(body))
                    return
                if route == "/load_lora_adapter":
                    self._text(200, server.adapters.load(body))
                    return
                if route == "/unload_lora_adapter":
                    self._text(200, server.adapters.unload(body))
                    return
                request = parse_request(body, (server.model_name,))
                message, usage, finish = server.generate(request)
            except APIError as err:
                self._error(err)
                return
            if request.stream:
                self._stream(stream_chunks(request, message, usage, finish))
            else:
                self._json(200, completion(request, message, usage, finish))

        def _read(self) -> bytes:
            length = self.headers.get("Content-Length")
            try:
                size = int(length or 0)
            except ValueError:
                self.close_connection = True
                raise APIError(400, f"bad Content-Length {length!r}") from None
            if size > MAX_BODY:
                self.close_connection = True
                raise APIError(413, f"request body over {MAX_BODY} bytes", code="request_too_large")
            return self.rfile.read(size) if size > 0 else b""

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _text(self, status: int, text: str) -> None:  # vLLM's LoRA endpoints answer in plain text
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, err: APIError) -> None:
            self._json(err.status, err.body())

        def _stream(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")  # the stream ends with the connection: no length needed
            self.end_headers()
            self.close_connection = True
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
            pass

    return Handler
