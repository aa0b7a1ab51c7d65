"""``trace env-serve``: trace envs over HTTP, many sessions at once, in the style of OpenEnv's env API.

Trainers on other machines (verl, SkyRL, OpenRLHF, NeMo Gym, OpenEnv clients) drive trace envs with three
verbs; every body and answer is JSON::

    POST /reset   {"session_id"?: str, "seed"?: int, "options"?: {...}}
                  -> {"session_id", "observation", "info", "reward": 0.0, "terminated", "truncated", "done"}
    POST /step    {"session_id": str, "action": str | {"content", "tool_calls"}, "compact"?: bool}
                  -> {"session_id", "observation", "reward", "terminated", "truncated", "done", "info"}
                  with "compact": true, "new_messages" (the messages appended since the last answer) replaces
                  "observation", and info omits "tools" when they did not change (RemoteEnv uses this)
    GET  /state?session_id=ID
                  -> {"session_id", "episode_id", "step_count", "done", "observation", "tools"}
    POST /close   {"session_id": str}          (also DELETE /sessions/ID)
    GET  /health  -> {"status": "ok", "env_id", "sessions", "max_sessions"}
    GET  /info    -> {"env_id", "tools", "session_timeout_s", "max_sessions"}

A ``/reset`` without ``session_id`` opens a new session (one env instance). Sessions are independent envs;
one session's requests run one at a time, different sessions in parallel (one thread per connection). A
session idle for ``session_timeout`` seconds is closed by a reaper thread, so a client that dies leaks
nothing. Errors come back as ``{"error": {"type", "message"}}`` with 400 (malformed JSON, missing or
ill-typed fields, bad seed/options), 404 (unknown path or session), 409 (step before reset or after the
episode ended), 413 (body too large), 503 (session limit reached).

Why the standard library: ``http.server.ThreadingHTTPServer`` with HTTP/1.1 keep-alive serves the JSON verbs at
a few thousand requests per second on localhost (see docs/interop.md), needs no dependency, and env steps are
CPU-bound Python anyway, so an async framework would not add throughput. WebSocket is not offered: the
standard library has no server for it, and a keep-alive HTTP connection gives the same one-round-trip step.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import gymnasium as gym
import numpy as np

MAX_BODY = 8 * 1024 * 1024


class RequestError(Exception):
    """A client error: ``status`` and a message that says what to fix."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass
class Session:
    env: gym.Env
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    episode_id: str | None = None
    step_count: int = 0
    done: bool = True
    observation: Any = None
    tools: list[dict[str, Any]] = field(default_factory=list)


class SessionPool:
    """Env instances by session id, with a size limit and idle expiry."""

    def __init__(self, make_env: Callable[[], gym.Env], max_sessions: int = 256, timeout: float = 300.0):
        self.make_env = make_env
        self.max_sessions = max_sessions
        self.timeout = timeout
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.opened = 0
        self.reaped = 0

    def open(self) -> tuple[str, Session]:
        with self.lock:
            if len(self.sessions) >= self.max_sessions:
                raise RequestError(
                    503,
                    "too_many_sessions",
                    f"the server holds {self.max_sessions} sessions (--max-sessions); close one (POST /close) "
                    f"or wait for idle ones to expire ({self.timeout:g} s)",
                )
            session_id = uuid.uuid4().hex
            session = Session(self.make_env())
            self.sessions[session_id] = session
            self.opened += 1
        return session_id, session

    def get(self, session_id: Any, touch: bool = True) -> Session:
        """The session; ``touch`` counts the request as activity (a read of /state does not)."""
        if not isinstance(session_id, str):
            raise RequestError(400, "invalid_request", "'session_id' must be a string (from /reset)")
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(
                404,
                "unknown_session",
                f"no session {session_id!r}: it was closed, expired after {self.timeout:g} s idle, or never "
                "existed; POST /reset without session_id opens a new one",
            )
        if touch:
            session.last_used = time.monotonic()
        return session

    def close(self, session_id: str) -> bool:
        with self.lock:
            session = self.sessions.pop(session_id, None)
        if session is not None:
            with session.lock:
                session.env.close()
        return session is not None

    def reap(self) -> int:
        """Close every session idle for longer than the timeout; returns how many."""
        now = time.monotonic()
        with self.lock:
            stale = [sid for sid, s in self.sessions.items() if now - s.last_used > self.timeout]
        for session_id in stale:
            if self.close(session_id):
                self.reaped += 1
        return len(stale)

    def close_all(self) -> None:
        for session_id in list(self.sessions):
            self.close(session_id)


def to_json(value: Any) -> Any:
    """JSON-safe copy of env output (numpy scalars and arrays, tuples, sets)."""
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


class EnvServer:
    """The session pool, the verbs, and a ``ThreadingHTTPServer`` that routes requests to them."""

    def __init__(
        self,
        env_id: str,
        make_kwargs: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 8080,
        max_sessions: int = 256,
        session_timeout: float = 300.0,
    ):
        self.env_id = env_id
        self.make_kwargs = dict(make_kwargs or {})
        probe = gym.make(
            env_id, **self.make_kwargs
        )  # fail now, with Gymnasium's message, if it cannot be made
        self.tools = to_json(_tools(probe))
        probe.close()
        self.pool = SessionPool(lambda: gym.make(env_id, **self.make_kwargs), max_sessions, session_timeout)
        self.httpd = bind_server(host, port, _handler(self))
        self.httpd.daemon_threads = True
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="session-reaper", daemon=True)

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self._reaper.start()
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self._stop.set()
            self.pool.close_all()
            self.httpd.server_close()

    def shutdown(self) -> None:
        self.httpd.shutdown()

    def _reap_loop(self) -> None:
        interval = min(max(self.pool.timeout / 4, 0.05), 5.0)
        while not self._stop.wait(interval):
            self.pool.reap()

    # ---- verbs ----------------------------------------------------------------------------------------------
    def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise RequestError(
                400, "invalid_request", f"'seed' must be a non-negative integer or null, got {seed!r}"
            )
        options = body.get("options")
        if options is not None and not isinstance(options, dict):
            raise RequestError(
                400, "invalid_request", f"'options' must be an object, got {type(options).__name__}"
            )
        if "session_id" in body and body["session_id"] is not None:
            session_id = body["session_id"]
            session = self.pool.get(session_id)
        else:
            session_id, session = self.pool.open()
        with session.lock:
            try:
                obs, info = session.env.reset(seed=seed, options=options)
            except (ValueError, TypeError, KeyError) as err:  # bad options or seed for this env
                raise RequestError(400, "invalid_request", f"reset failed: {err}") from err
            session.episode_id, session.step_count, session.done = uuid.uuid4().hex, 0, False
            session.observation = to_json(obs)
            session.tools = to_json(info.get("tools", self.tools))
            return {
                "session_id": session_id,
                "episode_id": session.episode_id,
                "observation": session.observation,
                "info": to_json(info),
                "reward": 0.0,
                "terminated": False,
                "truncated": False,
                "done": False,
            }

    def step(self, body: dict[str, Any]) -> dict[str, Any]:
        session = self.pool.get(body.get("session_id"))
        if "action" not in body:
            raise RequestError(
                400, "invalid_request", "'action' is required: a string or {content, tool_calls}"
            )
        _check_action(body["action"])
        with session.lock:
            if session.episode_id is None:
                raise RequestError(409, "episode_not_started", "call /reset for this session before /step")
            if session.done:
                raise RequestError(409, "episode_over", "the episode is over: call /reset to start a new one")
            obs, reward, terminated, truncated, info = session.env.step(body["action"])
            session.step_count += 1
            session.done = bool(terminated or truncated)
            shown = len(session.observation or [])
            # Conversations only grow, so the new messages are the tail; a compact client appends them itself.
            new_messages = to_json(obs[shown:]) if isinstance(obs, list) else None
            session.observation = (
                (session.observation or [])[:shown] + new_messages
                if new_messages is not None
                else to_json(obs)
            )
            answer = {
                "session_id": body["session_id"],
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "done": session.done,
            }
            tools = to_json(info["tools"]) if "tools" in info else None
            compact = body.get("compact") is True and new_messages is not None
            if compact and tools == session.tools:
                info = {k: v for k, v in info.items() if k != "tools"}
            if tools is not None:
                session.tools = tools
            answer["info"] = to_json(info)
            if compact:
                answer["new_messages"] = new_messages
            else:
                answer["observation"] = session.observation
            return answer

    def state(self, session_id: Any) -> dict[str, Any]:
        session = self.pool.get(session_id, touch=False)
        with session.lock:
            return {
                "session_id": session_id,
                "episode_id": session.episode_id,
                "step_count": session.step_count,
                "done": session.done,
                "observation": session.observation,
                "tools": session.tools,
            }

    def close(self, session_id: Any) -> dict[str, Any]:
        if not isinstance(session_id, str):
            raise RequestError(400, "invalid_request", "'session_id' must be a string")
        if not self.pool.close(session_id):
            raise RequestError(404, "unknown_session", f"no session {session_id!r}")
        return {"session_id": session_id, "closed": True}

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "env_id": self.env_id,
            "sessions": len(self.pool.sessions),
            "max_sessions": self.pool.max_sessions,
            "opened": self.pool.opened,
            "reaped": self.pool.reaped,
        }

    def info(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "make_kwargs": to_json(self.make_kwargs),
            "tools": self.tools,
            "session_timeout_s": self.pool.timeout,
            "max_sessions": self.pool.max_sessions,
        }


ACTION_SHAPES = (
    'a string, or an object {"content": string or null, "tool_calls": [ {"name", "arguments"} ... ]}'
)


def _check_action(action: Any) -> None:
    """A 400 for an action of the wrong type, as the API documents (an env would read it as an empty or malformed
    message and use up a turn): a string, or a message object with ``content`` and/or ``tool_calls``."""
    if isinstance(action, str):
        return
    if not isinstance(action, dict) or not ({"content", "tool_calls"} & action.keys()):
        got = (
            type(action).__name__ if not isinstance(action, dict) else f"an object with keys {sorted(action)}"
        )
        raise RequestError(400, "invalid_request", f"'action' must be {ACTION_SHAPES}; got {got}")
    content, calls = action.get("content"), action.get("tool_calls")
    if content is not None and not isinstance(content, str):
        raise RequestError(
            400, "invalid_request", f"'action.content' must be a string or null; got {content!r}"
        )
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
        raise RequestError(
            400, "invalid_request", f"'action.tool_calls' must be a list of objects; got {calls!r}"
        )


def bind_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A ``ThreadingHTTPServer`` on ``host:port``; a port in use or an address that cannot be bound is a
    ValueError naming it and the fix (the CLI prints it as one line)."""
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as err:
        raise ValueError(
            f"cannot listen on {host}:{port} ({err.strerror or err}): another server may hold the port; "
            "choose another --port, or --port 0 for any free one"
        ) from None


def check_port(host: str, port: int) -> None:
    """Refuse a port that cannot be bound before slow work (loading a model) starts: see :func:`bind_server`."""
    bind_server(host, port, BaseHTTPRequestHandler).server_close()


def serve_until_stopped(server: Any, banner: str, grace_s: float = 30.0) -> None:
    """Run a CLI server (``trace env-serve``, ``trace serve``) until Ctrl-C or SIGTERM.

    ``banner`` is printed first, flushed: it says where to connect (with ``--port 0`` the OS picks the port),
    for scripts and tests that wait for it. A server with ``drain`` (``trace serve``, whose requests generate for
    seconds) stops gracefully on SIGTERM, as process managers expect: it takes no new request, answers those in
    flight (at most ``grace_s`` seconds), then exits 0. Ctrl-C stops at once.
    """
    print(banner, flush=True)
    if hasattr(server, "drain"):

        def stop_accepting(*_: Any) -> None:  # shutdown() waits for serve_forever: not from its own thread
            threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, stop_accepting)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
            if server.in_flight:
                print(
                    f"stopping: answering {server.in_flight} request(s) in flight (up to {grace_s:.0f} s)",
                    flush=True,
                )
            left = server.drain(grace_s)
            print("stopped" + (f"; {left} request(s) cut" if left else ""), flush=True)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        server.serve_forever()


def _raise(err: Exception) -> Any:
    raise err


def _tools(env: gym.Env) -> list[dict[str, Any]]:
    try:
        return list(env.get_wrapper_attr("tools"))
    except AttributeError:
        return []


def _handler(server: EnvServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client env
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the body until the
        # client's delayed ACK (~40 ms per request on Linux).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            url = urlparse(self.path)
            query = parse_qs(url.query)
            routes = {
                "/health": server.health,
                "/info": server.info,
                "/state": lambda: server.state((query.get("session_id") or [None])[0]),
            }
            self._answer(routes.get(url.path), url.path)

        def do_POST(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            try:
                self._raw = self._read()
            except RequestError as err:
                failure = err  # bound here: Python unbinds ``err`` when the except block ends
                self._answer(lambda: _raise(failure), path)
                return
            routes = {
                "/reset": lambda: server.reset(self._body(optional=True)),
                "/step": lambda: server.step(self._body()),
                "/state": lambda: server.state(self._body().get("session_id")),
                "/close": lambda: server.close(self._body().get("session_id")),
            }
            self._answer(routes.get(path), path)

        def do_DELETE(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            prefix = "/sessions/"
            route = (lambda: server.close(path[len(prefix) :])) if path.startswith(prefix) else None
            self._answer(route, path)

        def _read(self) -> bytes:
            """The whole body, read before routing so that a keep-alive connection stays in step."""
            length = self.headers.get("Content-Length")
            try:
                size = int(length or 0)
            except ValueError:
                self.close_connection = True
                raise RequestError(400, "invalid_request", f"bad Content-Length {length!r}") from None
            if size > MAX_BODY:
                self.close_connection = True  # the unread body would be taken for the next request
                raise RequestError(413, "body_too_large", f"request body over {MAX_BODY} bytes")
            return self.rfile.read(size) if size > 0 else b""

        def _body(self, optional: bool = False) -> dict[str, Any]:
            raw = self._raw
            if not raw.strip():
                if optional:
                    return {}
                raise RequestError(400, "invalid_request", "empty body: send a JSON object")
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise RequestError(400, "invalid_json", f"the body is not valid JSON: {err}") from None
            if not isinstance(body, dict):
                raise RequestError(
                    400, "invalid_request", f"the body must be a JSON object, got {type(body).__name__}"
                )
            return body

        def _answer(self, route: Callable[[], dict[str, Any]] | None, path: str) -> None:
            try:
                if route is None:
                    raise RequestError(404, "not_found", f"no endpoint {self.command} {path}")
                status, payload = 200, route()
            except RequestError as err:
                status, payload = err.status, {"error": {"type": err.kind, "message": str(err)}}
            except Exception as err:  # noqa: BLE001 - an env bug must answer, not kill the connection
                status = 500
                payload = {"error": {"type": "env_error", "message": f"{type(err).__name__}: {err}"}}
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
            pass

    return Handler
