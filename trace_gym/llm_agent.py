"""A small LLM agent: render a Jinja2 markdown prompt, ask an OpenAI-compatible chat endpoint, get validated JSON.

Used by the analysis agent of step 1 (capability discovery and labelling) and the env-generation agent of
step 2. One call of :meth:`LLMAgent.ask` is one bounded repair loop::

    from trace_gym.llm_agent import LLMAgent, LLMAgentError, render_prompt
    from trace_gym.openai_client import OpenAIClient

    agent = LLMAgent(OpenAIClient(base_url="http://127.0.0.1:8000/v1"), model="Qwen/Qwen2.5-7B-Instruct")
    schema = {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["NA", "PRESENT"]}}}
    try:
        result = agent.ask(render_prompt("analysis/label.md", trajectory=..., capabilities=...), schema)
        result.value        # the parsed, schema-valid JSON
        result.attempts     # every try: raw answer and, for the failed ones, why
    except LLMAgentError as err:
        err.attempts        # all tries failed: nothing is dropped silently, the caller reports them

Prompts are markdown files under ``prompts/`` at the repository root (``PROMPTS_DIR``; ``$TRACE_PROMPTS_DIR``
or ``prompts_dir=`` point elsewhere), rendered with ``StrictUndefined`` so a missing variable is an error,
not an empty string.

The answer is parsed leniently where that is unambiguous (a fenced ```json block, or the first JSON value
after some prose), then validated with ``jsonschema`` plus an optional ``check`` callable for rules a schema
cannot say (e.g. "every trajectory id labelled once"). A failed attempt (no JSON, truncated JSON, schema
violation, failed check, an answer cut off by ``max_tokens``) is retried up to ``max_attempts`` times in all;
each retry shows the model its previous answer and the exact error, which fixes most slips of capable models.
Transport failures (HTTP errors after the client's own retries) raise :class:`~trace_gym.openai_client.OpenAIError`
unchanged: they say nothing about the model's answer.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jsonschema

from trace_gym.openai_client import OpenAIClient

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"

# check(value) -> problems; an empty list means the answer is acceptable
Check = Callable[[Any], Sequence[str]]


def prompts_dir(override: str | os.PathLike | None = None) -> Path:
    """Where prompts are read from: ``override``, else ``$TRACE_PROMPTS_DIR``, else the repository's ``prompts/``."""
    path = Path(override or os.environ.get("TRACE_PROMPTS_DIR") or PROMPTS_DIR)
    if not path.is_dir():
        raise FileNotFoundError(
            f"prompt directory {path} does not exist (set TRACE_PROMPTS_DIR or pass prompts_dir=)"
        )
    return path


@lru_cache(maxsize=8)
def _environment(directory: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # markdown for a model, not HTML
    )


def render_prompt(template: str, directory: str | os.PathLike | None = None, /, **context: Any) -> str:
    """Render ``prompts/<template>`` (e.g. ``"analysis/label.md"``) with ``context``; a missing variable raises.

    ``directory`` overrides the prompt directory (see :func:`prompts_dir`).
    """
    root = prompts_dir(directory)
    try:
        loaded = _environment(str(root)).get_template(template)
    except jinja2.TemplateNotFound:
        raise FileNotFoundError(f"prompt {template!r} not found under {root}") from None
    return loaded.render(**context)


class AnswerError(ValueError):
    """One answer that could not be used; the message is what the model is told on retry."""


@dataclass(frozen=True)
class Attempt:
    """One try: the raw answer text and, if it was rejected, why."""

    raw: str
    error: str | None = None
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"raw": self.raw, "error": self.error, "finish_reason": self.finish_reason}


@dataclass
class AgentResult:
    value: Any
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def retries(self) -> int:
        return len(self.attempts) - 1


class LLMAgentError(RuntimeError):
    """Every attempt failed; ``attempts`` holds each raw answer and its error, for the caller's report."""

    def __init__(self, message: str, attempts: list[Attempt]):
        super().__init__(message)
        self.attempts = attempts


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The JSON value in a model's answer: the whole text, a fenced block, or the first ``{``/``[`` value.

    Raises :class:`AnswerError` saying what was wrong (empty, truncated, not JSON).
    """
    return json_candidates(text)[0]


def json_candidates(text: str) -> list[Any]:
    """Every JSON value an answer may mean, most likely first: the whole text, fenced blocks, then each
    ``{``/``[`` value in order (prose like "see [1]" yields a value too, so callers validate each candidate).

    Raises :class:`AnswerError` when there is none, saying whether the answer is empty, truncated or not JSON.
    """
    stripped = text.strip()
    if not stripped:
        raise AnswerError("the answer is empty; reply with one JSON value")
    found: list[Any] = []
    for candidate in [stripped, *(m.group(1).strip() for m in _FENCE.finditer(text))]:
        try:
            found.append(json.loads(candidate))
        except json.JSONDecodeError:
            continue
    if found:
        return found
    decoder = json.JSONDecoder()
    first_error: json.JSONDecodeError | None = None
    start = 0
    while start < len(text):
        if text[start] not in "{[":
            start += 1
            continue
        try:
            value, end = decoder.raw_decode(text, start)
            found.append(value)
            start = end
        except json.JSONDecodeError as err:
            if not found and first_error is None:
                if _unclosed(text, start):  # the outermost value never closes: the answer was cut off
                    raise AnswerError("the JSON is truncated (it ends before the value is closed)") from None
                first_error = err
            start += 1
    if found:
        return found
    detail = f": {first_error.msg} at character {first_error.pos}" if first_error else ""
    raise AnswerError(f"the answer contains no valid JSON value{detail}")


def _unclosed(text: str, start: int) -> bool:
    """True when the brackets opened at ``start`` are still open (or a string unterminated) at the end."""
    depth, in_string, escaped = 0, False, False
    for char in text[start:]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return False
    return True


def validate(value: Any, schema: Mapping[str, Any], check: Check | None = None) -> None:
    """Raise :class:`AnswerError` naming every schema violation (up to 5) and failed check of ``value``."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:5]]
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise AnswerError("the JSON does not match the schema: " + "; ".join(lines) + more)
    problems = list(check(value)) if check else []
    if problems:
        raise AnswerError("the answer breaks these rules: " + "; ".join(problems[:10]))


def _first_valid(candidates: list[Any], schema: Mapping[str, Any], check: Check | None) -> Any:
    """The first candidate that validates; else the error of the first (the likeliest meant) candidate."""
    first: AnswerError | None = None
    for value in candidates:
        try:
            validate(value, schema, check)
            return value
        except AnswerError as err:
            first = first or err
    assert first is not None
    raise first


class LLMAgent:
    """Asks one model for schema-valid JSON with a bounded number of attempts.

    ``temperature``/``max_tokens``/``seed`` go to every request (``seed`` is offset by the attempt so a
    retry does not resample the same answer on servers that honour seeds). ``system`` is an optional system
    message placed before each prompt.
    """

    def __init__(
        self,
        client: OpenAIClient,
        model: str,
        *,
        max_attempts: int = 3,
        temperature: float = 0.0,
        max_tokens: int | None = 2048,
        system: str | None = None,
        json_mode: bool = False,
    ):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.client = client
        self.model = model
        self.max_attempts = max_attempts
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system = system
        self.json_mode = json_mode  # sends response_format={"type": "json_object"} (servers that support it)

    def ask(
        self,
        prompt: str,
        schema: Mapping[str, Any],
        *,
        check: Check | None = None,
        seed: int | None = None,
        temperature: float | None = None,
    ) -> AgentResult:
        """Send ``prompt``; return the first answer that parses and validates, else raise :class:`LLMAgentError`."""
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": prompt})
        attempts: list[Attempt] = []
        extra = {"response_format": {"type": "json_object"}} if self.json_mode else None
        for attempt in range(self.max_attempts):
            answer = self.client.chat(
                self.model,
                messages,
                temperature=self.temperature if temperature is None else temperature,
                max_tokens=self.max_tokens,
                seed=None if seed is None else seed + attempt,
                extra=extra,
            )
            raw = answer.content or ""
            try:
                value = _first_valid(json_candidates(raw), schema, check)
            except AnswerError as err:
                error = str(err)
                if answer.finish_reason == "length":
                    error = f"the answer was cut off at max_tokens ({self.max_tokens}); {error}"
                attempts.append(Attempt(raw, error, answer.finish_reason))
                messages = [
                    *messages,
                    {"role": "assistant", "content": raw},
                    {
                        "role": "user",
                        "content": f"Your answer could not be used: {error}. Reply again with only the JSON "
                        "value that the instructions ask for, complete and valid, with no other text.",
                    },
                ]
                continue
            attempts.append(Attempt(raw, None, answer.finish_reason))
            return AgentResult(value, attempts)
        raise LLMAgentError(
            f"{self.model} gave no valid answer in {self.max_attempts} attempts; last error: {attempts[-1].error}",
            attempts,
        )

    def ask_prompt(
        self,
        template: str,
        schema: Mapping[str, Any],
        *,
        context: Mapping[str, Any] | None = None,
        directory: str | os.PathLike | None = None,
        **kwargs: Any,
    ) -> AgentResult:
        """:meth:`ask` with ``render_prompt(template, directory, **context)``."""
        return self.ask(render_prompt(template, directory, **(context or {})), schema, **kwargs)
