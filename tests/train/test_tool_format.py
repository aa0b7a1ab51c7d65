"""The compact tool rendering and the --engine / --tool-format flags of the commands."""

from __future__ import annotations

import pytest

from trace_train.chat import ChatRenderer, tools_system_text
from trace_train.models import build_tiny_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel a pending order.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "The order id, e.g. '#W1'."},
                    "reason": {"type": "string", "enum": ["no longer needed", "mistake"]},
                    "items": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": "string"},
                },
                "required": ["order_id", "reason"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Get an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "The order id, e.g. '#W1'."}},
                "required": ["order_id"],
            },
        },
    },
]


def test_compact_rendering_keeps_what_a_call_needs_in_fewer_tokens():
    text = tools_system_text(TOOLS, "compact")
    assert (
        '- cancel_order(order_id: str, reason: "no longer needed"|"mistake", items?: list[str], note?: str)'
        in text
    )
    assert "- get_order(order_id: str): Get an order." in text
    assert text.count("The order id, e.g. '#W1'.") == 1  # a shared parameter description is written once
    assert "<tool_call>" in text  # the call format is still taught
    tok = build_tiny_tokenizer()
    assert len(tok(text)["input_ids"]) < len(tok(tools_system_text(TOOLS, "json"))["input_ids"])
    with pytest.raises(ValueError, match="unknown tool format"):
        tools_system_text(TOOLS, "yaml")
    with pytest.raises(ValueError, match="unknown tool format"):
        ChatRenderer(tok, "yaml")


def test_renderer_uses_the_chosen_format():
    tok = build_tiny_tokenizer()
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    compact = ChatRenderer(tok, "compact").render(conv, TOOLS)
    assert "cancel_order(order_id: str" in compact and '"properties"' not in compact
    assert '"properties"' in ChatRenderer(tok).render(conv, TOOLS)


def test_evaluate_cli_engine_and_tool_format_flags(tiny_model_dir, capsys, tmp_path):
    from trace_train.commands import main

    for engine in ("simple", "cached"):
        args = ["evaluate", "traintest/lookup-v0", "--model", str(tiny_model_dir), "--episodes", "2"]
        args += ["--max-new-tokens", "4", "--max-turns", "2", "--engine", engine, "--tool-format", "compact"]
        args += ["--min-oracle-ceiling", "0"]  # 4 tokens cut the oracle's call: the flags are under test
        assert main([*args, "--out", str(tmp_path / f"{engine}.jsonl")]) == 0
        assert "peak RSS" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["evaluate", "traintest/lookup-v0", "--engine", "turbo"])
