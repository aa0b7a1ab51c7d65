import json

import pytest

from trace_gym.core.parsing import ActionParseError, parse_action


def test_plain_text_is_a_reply():
    turn = parse_action("Hello, how can I help?")
    assert turn.content == "Hello, how can I help?" and turn.tool_calls == ()


def test_openai_message_dict_with_string_arguments():
    action = {
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"x": 1}'}}
        ],
    }
    turn = parse_action(action)
    assert turn.content == ""
    assert [(c.name, c.arguments, c.id) for c in turn.tool_calls] == [("get", {"x": 1}, "c1")]


def test_simplified_call_dict_and_several_calls():
    turn = parse_action(
        {"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"y": "z"}}]}
    )
    assert [c.name for c in turn.tool_calls] == ["a", "b"]


def test_tool_call_blocks_with_surrounding_text():
    text = 'Let me look.\n<tool_call>{"name": "get", "arguments": {"id": "#W1"}}</tool_call>\n<tool_call>{"name": "h", "arguments": {}}</tool_call>'
    turn = parse_action(text)
    assert turn.content == "Let me look."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("get", {"id": "#W1"}), ("h", {})]


def test_unterminated_tool_call_block_at_end_of_generation():
    turn = parse_action('<tool_call>{"name": "get", "arguments": {"id": 3}}')
    assert turn.tool_calls[0].arguments == {"id": 3}


def test_fenced_json():
    turn = parse_action('Sure.\n```json\n{"name": "get", "arguments": {"id": 2}}\n```')
    assert turn.content == "Sure." and turn.tool_calls[0].arguments == {"id": 2}


def test_quoted_records_and_code_are_replies_not_calls():
    for text in (
        'Here is the item:\n```\n{"name": "Desk Lamp", "price": 60.5}\n```\nShall I proceed?',
        '{"name": "Desk Lamp", "price": 60.5}',
        'Like this:\n```python\nx = {"name": 1, "arguments": 2}\n```',
    ):
        turn = parse_action(text)
        assert turn.tool_calls == () and turn.content == text


def test_fenced_code_that_is_not_a_call_stays_content():
    text = 'Here is the data:\n```json\n{"total": 3}\n```'
    assert parse_action(text).content == text


def test_bare_json_call_list_and_message():
    assert parse_action('{"name": "get", "arguments": {}}').tool_calls[0].name == "get"
    assert len(parse_action('[{"name": "a", "arguments": {}}, {"name": "b"}]').tool_calls) == 2
    msg = parse_action('{"content": "hi", "tool_calls": [{"function": {"name": "a", "arguments": "{}"}}]}')
    assert msg.content == "hi" and msg.tool_calls[0].name == "a"


def test_double_encoded_arguments():
    inner = json.dumps({"order_id": "#W7"})
    turn = parse_action(json.dumps({"name": "get", "arguments": json.dumps(inner)}))
    assert turn.tool_calls[0].arguments == {"order_id": "#W7"}


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ('<tool_call>{"name": "get", "arguments": {</tool_call>', "invalid JSON in <tool_call> block"),
        ('<tool_call>{"arguments": {}}</tool_call>', "missing tool name"),
        ('{"name": "get", "arguments": "not json"}', "invalid JSON in the arguments of 'get'"),
        ("[" * 5000 + '{"name": "a", "arguments": {}}' + "]" * 5000, "nested too deeply"),
        ('<tool_call>{"name": "a", "arguments": ' + "[" * 5000 + "</tool_call>", "nested too deeply"),
        ('{"name": "get", "arguments": [1, 2]}', "must be a JSON object"),
        ({"content": 3}, "'content' must be a string"),
        ({"tool_calls": "x"}, "'tool_calls' must be a list"),
        ({"role": "user", "content": "hi"}, "must be an assistant message"),
        ({"contents": "typo"}, "unexpected keys"),
        (42, "must be a str or a dict"),
        ('{"name": "get", "arguments": {', "invalid JSON in the reply, which looks like a JSON tool call"),
    ],
)
def test_malformed_actions_raise_a_message_that_names_the_problem(action, fragment):
    with pytest.raises(ActionParseError, match=None) as err:
        parse_action(action)
    assert fragment in str(err.value)


def test_parsing_runs_in_linear_time():
    import contextlib
    import time

    for text in ('{"name": 1, ' * 30_000 + '"arguments": 2}', '"name": ' * 40_000, "```json\n" * 40_000):
        start = time.perf_counter()
        with contextlib.suppress(ActionParseError):
            parse_action(text)
        assert time.perf_counter() - start < 1.0, text[:40]


@pytest.mark.parametrize("value", [{1, 2}, b"x", object(), float("inf"), {3: 4}])
def test_arguments_that_are_not_json_values_are_parse_errors(value):
    with pytest.raises(ActionParseError, match="not JSON"):
        parse_action({"tool_calls": [{"name": "get", "arguments": {"x": value}}]})


def test_hostile_nesting_in_arguments_is_a_parse_error():
    value: list = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(ActionParseError, match="deeper"):
        parse_action({"tool_calls": [{"name": "get", "arguments": {"x": value}}]})
