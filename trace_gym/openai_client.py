"""A small client for OpenAI-compatible chat servers (vLLM, llama.cpp, hosted APIs), standard library only.

Used by the HTTP policy of ``trace rollout``/``trace evaluate``, the LLM user simulator
(``trace_gym.worlds.llm_user``) and the analysis agents. It speaks two endpoints:

* ``POST {base_url}/chat/completions``: one request, the first choice's assistant message back (content plus
  structured ``tool_calls``), or all ``n`` choices with :meth:`OpenAIClient.chat_choices`;
* ``POST {base_url}/completions`` with token-id prompts: :meth:`OpenAIClient.completions_token_ids` returns the
  generated token ids themselves (vLLM's ``return_token_ids``, or ``return_tokens_as_token_ids`` on older
  versions), for trainers that must keep ids end to end;
* ``POST {base_url}/load_lora_adapter`` / ``unload_lora_adapter``: vLLM's dynamic LoRA endpoints, so a trainer
  can hand a freshly saved PEFT adapter to a running server. The server must allow it::

      VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve <model> --enable-lora --max-lora-rank 64

  A loaded adapter is then addressed as a model of its own: ``model=<lora_name>``.

Failures are bounded: 429, 5xx, timeouts and refused connections are retried with exponential backoff
(honouring ``Retry-After``); any other status raises :class:`OpenAIError` at once. Every error names the URL,
the status and the start of the server's answer, because "connection refused" alone does not say which
server was meant.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class OpenAIError(RuntimeError):
    """A request failed for good: ``status`` is the HTTP status (None when no answer came)."""

    def __init__(self, message: str, url: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.url = url
        self.status = status
        self.body = body


@dataclass(frozen=True)
class AssistantMessage:
    """One choice of a chat completion. ``tool_calls`` are in OpenAI's wire form (arguments as JSON text)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The message to append to a conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        return message


class OpenAIClient:
    """Blocking client; safe to share between threads (each call opens its own connection).

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` or ``http://127.0.0.1:8000/v1`` (vLLM's default);
    ``api_key`` to ``$OPENAI_API_KEY`` (omitted from requests when unset, as local servers need none).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        headers: Mapping[str, str] | None = None,
    ):
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.headers = dict(headers or {})

    def __repr__(self) -> str:  # never print the key
        return f"OpenAIClient(base_url={self.base_url!r}, timeout={self.timeout}, max_retries={self.max_retries})"

    # ---- chat -------------------------------------------------------------------------------------------------
    def chat(self, model: str, messages: Sequence[Mapping[str, Any]], **options: Any) -> AssistantMessage:
        """The first choice of ``POST /chat/completions``; ``options`` as in :meth:`chat_choices`."""
        return self.chat_choices(model, messages, **options)[0]

    def chat_choices(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        n: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> list[AssistantMessage]:
        """All choices of one chat completion. ``None`` options are left out (the server's default applies);
        ``extra`` is merged into the body as is (e.g. vLLM's ``top_k``, ``chat_template_kwargs``)."""
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages]}
        optional = {
            "tools": list(tools) if tools else None,
            "tool_choice": tool_choice,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
            "seed": seed,
            "stop": [stop] if isinstance(stop, str) else (list(stop) if stop else None),
            "n": n,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        body.update(extra or {})
        answer = self.post_json("/chat/completions", body)
        url = self.url("/chat/completions")
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices:
            raise OpenAIError(f"POST {url}: the answer has no choices: {_snippet(answer)}", url, 200)
        return [_parse_choice(choice, url) for choice in choices]

    # ---- completions over token ids ---------------------------------------------------------------------------
    def completions_token_ids(
        self,
        model: str,
        prompts: Sequence[Sequence[int]],
        *,
        max_tokens: int,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        seed: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> list[list[int]]:
        """Generate one continuation per token-id prompt (``POST /completions``); the generated ids back.

        :meth:`completions_with_logprobs` with the log-probs left out; its options and notes apply.
        """
        return [
            ids
            for ids, _ in self.completions_with_logprobs(
                model,
                prompts,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                seed=seed,
                stop_token_ids=stop_token_ids,
                extra=extra,
            )
        ]

    def completions_with_logprobs(
        self,
        model: str,
        prompts: Sequence[Sequence[int]],
        *,
        max_tokens: int,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        seed: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> list[tuple[list[int], list[float] | None]]:
        """Generate one continuation per token-id prompt (``POST /completions``): the generated ids and, where
        the server sends them (``choices[i].logprobs.token_logprobs``, one per generated token), their log-probs.

        ``prompt`` is sent as a list of token-id lists (vLLM takes those as is, with no tokenisation), ``n=1``.
        The ids are read from ``choices[i].token_ids`` (vLLM >= 0.10.2 with ``"return_token_ids": true``) or,
        failing that, from ``choices[i].logprobs.tokens`` as ``"token_id:123"`` strings (older vLLM with
        ``"logprobs": 0, "return_tokens_as_token_ids": true``). Both are asked for in the same request (vLLM
        ignores fields it does not know); the first is preferred. A server that returns neither raises
        :class:`OpenAIError` (it cannot serve token-exact generation). Note that with ``seed`` every prompt of
        the request uses that same seed, so identical prompts give identical samples: send one request per
        prompt with distinct seeds when that matters.
        """
        url = self.url("/completions")
        body: dict[str, Any] = {
            "model": model,
            "prompt": [[int(t) for t in p] for p in prompts],
            "max_tokens": int(max_tokens),
            "n": 1,
            "return_token_ids": True,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        }
        optional = {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "seed": seed,
            "stop_token_ids": [int(t) for t in stop_token_ids] if stop_token_ids else None,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        body.update(extra or {})
        answer = self.post_json("/completions", body)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            got = len(choices) if isinstance(choices, list) else "no"
            raise OpenAIError(
                f"POST {url}: expected {len(prompts)} choices (one per prompt), got {got}: {_snippet(answer)}",
                url,
                200,
            )
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        return [(_choice_token_ids(choice, url), _choice_logprobs(choice)) for choice in ordered]

    def models(self) -> list[str]:
        """Ids served (``GET /models``); with vLLM, loaded LoRA adapters are listed too."""
        answer = self.request("GET", "/models")
        data = answer.get("data", []) if isinstance(answer, dict) else []
        return [str(entry.get("id")) for entry in data if isinstance(entry, dict)]

    # ---- vLLM dynamic LoRA ------------------------------------------------------------------------------------
    def load_lora_adapter(self, lora_name: str, lora_path: str | os.PathLike, replace: bool = False) -> None:
        """Hot-load a PEFT adapter directory into a vLLM server under the model name ``lora_name``.

        ``lora_path`` is read by the server, so it must be a path on the server's machine. vLLM refuses a
        name that is already loaded; ``replace=True`` unloads it first (for a trainer that republishes one
        name after every step; a new name per step avoids the window in which the name is missing).
        """
        body = {"lora_name": lora_name, "lora_path": os.fspath(lora_path)}
        if replace:
            try:
                self.unload_lora_adapter(lora_name)
            except OpenAIError as err:
                if err.status not in (400, 404):  # "not loaded" is fine here
                    raise
        self.post_json("/load_lora_adapter", body)

    def unload_lora_adapter(self, lora_name: str) -> None:
        self.post_json("/unload_lora_adapter", {"lora_name": lora_name})

    # ---- transport --------------------------------------------------------------------------------------------
    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", path, body)

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """Send one request with bounded retries; the decoded JSON answer (or the text, for non-JSON)."""
        url = self.url(path)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **self.headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            delay: float | None = None
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=self.timeout) as response:
                    return _decode(response.read())
            except urllib.error.HTTPError as err:
                text = _read_error(err)
                if err.code not in RETRY_STATUSES or attempt >= self.max_retries:
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    raise OpenAIError(
                        f"{method} {url} failed with HTTP {err.code}{tries}: {_snippet(text)}",
                        url,
                        err.code,
                        text,
                    ) from None
                delay = _retry_after(err.headers.get("Retry-After") if err.headers else None)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt >= self.max_retries:
                    reason = getattr(err, "reason", err)
                    raise OpenAIError(
                        f"{method} {url} failed after {attempt + 1} attempts: {reason} "
                        "(is the server running, and is base_url right?)",
                        url,
                    ) from err
            wait = min(self.max_backoff, self.backoff * 2**attempt)
            time.sleep(min(self.max_backoff, delay) if delay is not None else wait)
            attempt += 1


def _parse_choice(choice: Any, url: str) -> AssistantMessage:
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise OpenAIError(f"POST {url}: a choice has no message: {_snippet(choice)}", url, 200)
    calls = message.get("tool_calls") or []
    content = message.get("content")
    return AssistantMessage(
        content=content if isinstance(content, str) or content is None else str(content),
        tool_calls=[call for call in calls if isinstance(call, dict)],
        finish_reason=choice.get("finish_reason"),
    )


def _choice_token_ids(choice: Any, url: str) -> list[int]:
    """The generated ids of one completion choice: ``token_ids``, else ``logprobs.tokens`` ("token_id:N")."""
    if isinstance(choice, dict):
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
            return list(ids)
        tokens = (choice.get("logprobs") or {}).get("tokens")
        if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            try:
                return [int(t.split(":", 1)[1]) for t in tokens]
            except ValueError:
                pass
    raise OpenAIError(
        f"POST {url}: the completion carries no generated token ids (neither `token_ids` nor "
        f"`logprobs.tokens` as 'token_id:N'): {_snippet(choice)}. Token-exact generation needs vLLM "
        "(`return_token_ids`, vLLM >= 0.10.2, or `return_tokens_as_token_ids` on older versions).",
        url,
        200,
    )


def _choice_logprobs(choice: dict[str, Any]) -> list[float] | None:
    """The log-prob of each generated token (``logprobs.token_logprobs``), or None when the server sent none
    (a count that does not match the tokens is treated as none: it cannot be aligned)."""
    logprobs = choice.get("logprobs") or {}
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) or not all(isinstance(v, int | float) for v in values):
        return None
    tokens = logprobs.get("tokens")
    ids = choice.get("token_ids")
    n = len(ids) if isinstance(ids, list) else len(tokens) if isinstance(tokens, list) else len(values)
    return [float(v) for v in values] if len(values) == n else None


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # vLLM's LoRA endpoints answer in plain text


def _read_error(err: urllib.error.HTTPError) -> str:
    try:
        return err.read().decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - the status alone is still worth reporting
        return ""


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _snippet(value: Any, limit: int = 500) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit] + "..."
