"""A remote trace env (served by ``trace env-serve``) as a local ``gymnasium.Env``.

::

    env = RemoteEnv("http://127.0.0.1:8080")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Hello! How can I help?")
    env.close()  # closes the server-side session

Each ``RemoteEnv`` holds one server session (opened by the first ``reset``) over one keep-alive connection,
standard library only. Server errors raise :class:`RemoteEnvError` with the server's message; a dropped
connection is reopened once per request.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
from typing import Any
from urllib.parse import urlparse

import gymnasium as gym

from trace_gym.core.spaces import AssistantTurnSpace, ChatObservationSpace


class RemoteEnvError(RuntimeError):
    """The server refused a request: ``status`` and the error ``kind`` it named."""

    def __init__(self, message: str, status: int | None = None, kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind


class EnvServerClient:
    """The JSON verbs of an env server over one keep-alive HTTP connection."""

    def __init__(self, base_url: str, timeout: float = 60.0):
        url = urlparse(base_url if "://" in base_url else f"http://{base_url}")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must look like http://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.scheme, self.host, self.port = url.scheme, url.hostname, url.port
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, self.prefix + path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                break
            except (ConnectionError, http.client.HTTPException, TimeoutError, OSError) as err:
                self.close()
                if attempt:
                    raise RemoteEnvError(f"{method} {self.base_url}{path} failed: {err!r}") from err
        try:
            payload = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            payload = {"error": {"type": "bad_response", "message": raw[:200].decode(errors="replace")}}
        if response.status >= 400 or "error" in payload:
            error = payload.get("error") or {}
            raise RemoteEnvError(
                f"{method} {self.base_url}{path}: {response.status} {error.get('type')}: {error.get('message')}",
                status=response.status,
                kind=error.get("type"),
            )
        return payload

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RemoteEnv(gym.Env[list, Any]):
    """A ``gymnasium.Env`` whose episodes run on an env server (one session per instance)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, base_url: str, timeout: float = 60.0, render_mode: str | None = None):
        self.client = EnvServerClient(base_url, timeout=timeout)
        self.server_info = self.client.request("GET", "/info")
        self.env_id = self.server_info["env_id"]
        self.tools: list[dict[str, Any]] = self.server_info.get("tools", [])
        self.observation_space = ChatObservationSpace()
        self.action_space = AssistantTurnSpace(self.tools)
        self.render_mode = render_mode
        self.session_id: str | None = None
        self._last: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        body: dict[str, Any] = {"seed": seed, "options": options}
        if self.session_id is not None:
            body["session_id"] = self.session_id
        try:
            answer = self.client.request("POST", "/reset", body)
        except RemoteEnvError as err:
            if err.kind != "unknown_session":
                raise
            body.pop("session_id")  # our session expired on the server: open a new one
            answer = self.client.request("POST", "/reset", body)
        self.session_id = answer["session_id"]
        self._last = answer["observation"]
        self._tools = answer["info"].get("tools")
        return answer["observation"], answer["info"]

    def step(self, action: Any):
        if self.session_id is None:
            raise RuntimeError("call reset() before step()")
        # Compact answers carry only the new messages and leave out unchanged tools: the wire stays small
        # however long the conversation grows.
        body = {"session_id": self.session_id, "action": action, "compact": True}
        answer = self.client.request("POST", "/step", body)
        info = answer["info"]
        if "new_messages" in answer:
            self._last = self._last + answer["new_messages"]
        else:
            self._last = answer["observation"]
        if "tools" in info:
            self._tools = info["tools"]
        elif self._tools is not None:
            info["tools"] = self._tools
        return (
            copy.deepcopy(self._last),
            float(answer["reward"]),
            bool(answer["terminated"]),
            bool(answer["truncated"]),
            answer["info"],
        )

    def state(self) -> dict[str, Any]:
        if self.session_id is None:
            raise RuntimeError("call reset() before state()")
        return self.client.request("GET", f"/state?session_id={self.session_id}")

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        from trace_gym.core.env import render_conversation

        return render_conversation(self._last)

    def close(self) -> None:
        if self.session_id is not None:
            # Already expired, or the server is gone: nothing left to free.
            with contextlib.suppress(RemoteEnvError):
                self.client.request("POST", "/close", {"session_id": self.session_id})
            self.session_id = None
        self.client.close()
