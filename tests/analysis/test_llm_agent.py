"""The LLM agent helper against a real local HTTP server answering good, malformed and truncated JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.openai_standin import StandinServer
from trace_gym.llm_agent import AnswerError, LLMAgent, LLMAgentError, extract_json, render_prompt
from trace_gym.openai_client import OpenAIClient

SCHEMA = {
    "type": "object",
    "required": ["label"],
    "properties": {"label": {"enum": ["NA", "PRESENT", "LACKING"]}},
    "additionalProperties": False,
}


def scripted(*answers: object):
    """A responder that plays ``answers`` in order (the last one repeats)."""
    queue = list(answers)

    def respond(_request: dict) -> object:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond


def truncated(text: str) -> dict:
    return {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        ]
    }


@pytest.fixture
def server() -> Iterator[StandinServer]:
    with StandinServer() as s:
        yield s


def agent_for(server: StandinServer, **kwargs) -> LLMAgent:
    return LLMAgent(OpenAIClient(base_url=server.base_url, max_retries=0), model="stand-in", **kwargs)


def test_good_answer_first_try(server: StandinServer) -> None:
    server.respond = scripted('Here you go:\n```json\n{"label": "LACKING"}\n```')
    result = agent_for(server).ask("label it", SCHEMA)
    assert result.value == {"label": "LACKING"} and result.retries == 0
    assert server.requests[0]["messages"] == [{"role": "user", "content": "label it"}]


def test_malformed_then_truncated_then_good_is_repaired_with_the_error_shown(server: StandinServer) -> None:
    server.respond = scripted('{"label": "MAYBE"}', truncated('{"label": "LACK'), '{"label": "PRESENT"}')
    result = agent_for(server, max_attempts=3).ask("label it", SCHEMA, seed=7)
    assert result.value == {"label": "PRESENT"}
    assert [a.error is None for a in result.attempts] == [False, False, True]
    assert "does not match the schema" in result.attempts[0].error
    assert "cut off at max_tokens" in result.attempts[1].error and "truncated" in result.attempts[1].error
    retry = server.requests[1]["messages"]
    assert retry[1] == {"role": "assistant", "content": '{"label": "MAYBE"}'}
    assert "MAYBE" in retry[2]["content"] and "could not be used" in retry[2]["content"]
    assert [r["seed"] for r in server.requests] == [7, 8, 9]  # a retry does not resample the same answer


def test_gives_up_after_max_attempts_and_reports_every_answer(server: StandinServer) -> None:
    server.respond = scripted("I think it is lacking.")
    with pytest.raises(LLMAgentError) as err:
        agent_for(server, max_attempts=2).ask("label it", SCHEMA)
    assert len(server.requests) == 2
    assert [a.raw for a in err.value.attempts] == ["I think it is lacking."] * 2
    assert "no valid JSON" in str(err.value)


def test_check_callable_rejects_a_schema_valid_answer(server: StandinServer) -> None:
    server.respond = scripted('{"label": "NA"}', '{"label": "PRESENT"}')
    result = agent_for(server).ask(
        "x", SCHEMA, check=lambda v: ["NA is not allowed here"] if v["label"] == "NA" else []
    )
    assert result.value["label"] == "PRESENT" and "NA is not allowed here" in result.attempts[0].error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ('{"a": [1, {"b"', "truncated"),
        ('{"a": "x\\"', "truncated"),
        ("no json here", "no valid"),
    ],
)
def test_extract_json_errors(text: str, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        extract_json(text)


def test_bracketed_prose_before_the_answer_is_skipped(server: StandinServer) -> None:
    assert extract_json('Note: answer {"a": 2} done') == {"a": 2}
    server.respond = scripted('See note [1]. Answer: {"label": "NA"}')
    assert agent_for(server).ask("x", SCHEMA).value == {"label": "NA"}
    assert extract_json(json.dumps([1, 2])) == [1, 2]


def test_render_prompt_is_strict(tmp_path) -> None:
    (tmp_path / "p.md").write_text("# Hi {{ name }}\n")
    assert render_prompt("p.md", tmp_path, name="there") == "# Hi there\n"
    with pytest.raises(Exception, match="undefined"):
        render_prompt("p.md", tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        render_prompt("missing.md", tmp_path)
