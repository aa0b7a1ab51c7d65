"""Trajectories out: rollouts to OpenAI fine-tuning JSONL, Hugging Face ``datasets`` and Parquet.

Input: trajectory records as ``trace evaluate --out`` / ``trace rollout`` write them (one JSON object per line
with ``messages`` and ``reward``, plus ``seed``, ``split``, ``success``, ...), as files or directories holding
``trajectories.jsonl``. The tools come from the record (``tools``) or from ``--env`` (the env's schemas).

* ``openai``: one ``{"messages": [...], "tools": [...]}`` line per trajectory, the chat fine-tuning format
  (assistant ``tool_calls`` with JSON-text arguments, ``tool`` messages with ``tool_call_id``, only the keys
  OpenAI defines per role, trailing non-assistant turns dropped). By default only successful trajectories
  (reward >= ``min_reward``, 1.0) are kept: fine-tuning copies what it is shown.
* ``parquet`` / ``hf``: one row per trajectory with a fixed message schema (``role``, ``content``,
  ``tool_calls``, ``tool_call_id``, ``name``), ``tools_json`` (schemas are arbitrary JSON Schema, so text), and
  the metadata columns; ``hf`` saves a ``datasets.Dataset`` directory (``datasets.load_from_disk``). Needs the
  ``export`` extra (``pip install 'trace-agentic[export]'``).

::

    trace export runs/eval/retail.jsonl --format openai --env trace/retail-v2 --out sft.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trace_gym.records import read_records
from trace_train.policies.openai_http import clean_message

META_COLUMNS = ("env_id", "seed", "split", "reward", "success", "turns")
FORMATS = ("openai", "parquet", "hf")


def read_trajectories(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every record of the given trajectory files (a directory means its ``trajectories.jsonl``), read and
    checked by :mod:`trace_gym.records` (the one reader: a bad line is an error naming the file and line)."""
    records = []
    for path in paths:
        for record in read_records(path, missing_ok=False):
            record.pop("_line")
            records.append(record)
    return records


def openai_example(
    record: dict[str, Any], tools: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """One fine-tuning line for a trajectory, or ``None`` when it has no assistant turn to learn from."""
    messages = [_openai_message(m) for m in record["messages"]]
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    if not messages:
        return None
    example: dict[str, Any] = {"messages": messages}
    tools = record.get("tools") or tools
    if tools:
        example["tools"] = tools
    return example


def _openai_message(message: dict[str, Any]) -> dict[str, Any]:
    out = clean_message(message)
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": str(call.get("id") or f"call_{i}"),
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": _arguments_text(call["function"].get("arguments", {})),
                },
            }
            for i, call in enumerate(out["tool_calls"])
        ]
    elif out.get("role") == "assistant":
        out.pop("tool_calls", None)
    if out.get("content") is None and out.get("role") != "assistant":
        out["content"] = ""
    return out


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def write_openai_jsonl(
    records: Iterable[dict[str, Any]],
    path: str | Path,
    tools: list[dict[str, Any]] | None = None,
    min_reward: float | None = 1.0,
) -> int:
    """Write the fine-tuning JSONL; returns the number of lines written."""
    written = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for record in records:
            if min_reward is not None and float(record.get("reward", 0.0)) < min_reward:
                continue
            example = openai_example(record, tools)
            if example is not None:
                f.write(json.dumps(example, ensure_ascii=False) + "\n")
                written += 1
    return written


def rows(
    records: Iterable[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    env_id: str | None = None,
    min_reward: float | None = None,
) -> list[dict[str, Any]]:
    """Table rows with a fixed schema (every message has every key), ready for Arrow."""
    out = []
    for record in records:
        if min_reward is not None and float(record.get("reward", 0.0)) < min_reward:
            continue
        row = {
            "env_id": record.get("env_id") or env_id or "",
            "seed": int(record["seed"]) if record.get("seed") is not None else -1,
            "split": str(record.get("split") or ""),
            "reward": float(record.get("reward", 0.0)),
            "success": bool(record.get("success", float(record.get("reward", 0.0)) >= 1.0)),
            "turns": int(record.get("turns", 0)),
            "messages": [_row_message(m) for m in record["messages"]],
            "tools_json": json.dumps(record.get("tools") or tools or [], ensure_ascii=False),
        }
        out.append(row)
    return out


def _row_message(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": str(message.get("role", "")),
        "content": str(message.get("content") or ""),
        "tool_calls": [
            {
                "id": str(call.get("id") or ""),
                "name": str(call.get("function", call).get("name", "")),
                "arguments": _arguments_text(call.get("function", call).get("arguments", {})),
            }
            for call in message.get("tool_calls") or []
        ],
        "tool_call_id": str(message.get("tool_call_id") or ""),
        "name": str(message.get("name") or ""),
    }


def to_dataset(records: Iterable[dict[str, Any]], **kwargs: Any):
    """A ``datasets.Dataset`` of :func:`rows` (needs the ``export`` extra)."""
    try:
        import datasets
    except ImportError as err:
        raise ImportError("exporting to datasets/Parquet needs: pip install 'trace-agentic[export]'") from err
    table = rows(records, **kwargs)
    features = datasets.Features(
        {
            "env_id": datasets.Value("string"),
            "seed": datasets.Value("int64"),
            "split": datasets.Value("string"),
            "reward": datasets.Value("float64"),
            "success": datasets.Value("bool"),
            "turns": datasets.Value("int64"),
            "messages": datasets.List(
                {
                    "role": datasets.Value("string"),
                    "content": datasets.Value("string"),
                    "tool_calls": datasets.List(
                        {
                            "id": datasets.Value("string"),
                            "name": datasets.Value("string"),
                            "arguments": datasets.Value("string"),
                        }
                    ),
                    "tool_call_id": datasets.Value("string"),
                    "name": datasets.Value("string"),
                }
            ),
            "tools_json": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_list(table, features=features)


def write_parquet(records: Iterable[dict[str, Any]], path: str | Path, **kwargs: Any) -> int:
    dataset = to_dataset(records, **kwargs)
    dataset.to_parquet(str(path))
    return len(dataset)


def _env_tools(env_id: str) -> list[dict[str, Any]]:
    import gymnasium as gym

    import trace_gym  # noqa: F401 - registers the envs
    from trace_gym.registration import resolve_env_id, tools_of

    env = gym.make(resolve_env_id(env_id))
    try:
        _obs, info = env.reset(seed=0)
        return tools_of(env, info)
    finally:
        env.close()


def cmd_export(args: argparse.Namespace) -> int:
    records = read_trajectories(args.trajectories)
    tools = _env_tools(args.env) if args.env else None
    min_reward = None if args.all else args.min_reward
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # as the other formats do
    if args.format == "openai":
        count = write_openai_jsonl(records, args.out, tools=tools, min_reward=min_reward)
    elif args.format == "parquet":
        count = write_parquet(records, args.out, tools=tools, env_id=args.env, min_reward=min_reward)
    else:
        dataset = to_dataset(records, tools=tools, env_id=args.env, min_reward=min_reward)
        dataset.save_to_disk(args.out)
        count = len(dataset)
    kept = "all" if min_reward is None else f"reward >= {min_reward:g}"
    print(f"wrote {count} of {len(records)} trajectories ({kept}) to {args.out} as {args.format}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export", help="trajectories to OpenAI fine-tuning JSONL, Parquet or a HF dataset (docs/interop.md)"
    )
    export.add_argument("trajectories", nargs="+", help="JSONL files or dirs with trajectories.jsonl")
    export.add_argument("--format", choices=FORMATS, default="openai")
    export.add_argument("--out", required=True, help="output file (openai, parquet) or directory (hf)")
    export.add_argument("--env", default=None, help="env id whose tool schemas go with each trajectory")
    export.add_argument("--min-reward", type=float, default=1.0, help="keep trajectories with reward >= this")
    export.add_argument("--all", action="store_true", help="keep every trajectory (no reward filter)")
    export.set_defaults(func=cmd_export)
