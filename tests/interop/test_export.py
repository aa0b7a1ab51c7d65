"""Trajectory export: OpenAI fine-tuning JSONL, Parquet and HF datasets, from real env trajectories."""

import json

import gymnasium as gym
import pytest

from trace_train.export import openai_example, read_trajectories, rows, write_openai_jsonl

ENV_ID = "trace/test-library-v0"


def oracle_record(seed: int, truncate: int | None = None) -> dict:
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=seed)
    reward = 0.0
    actions = env.unwrapped.oracle_actions()[:truncate]
    for action in actions:
        obs, reward, *_ = env.step(action)
    return {
        "seed": seed,
        "split": "train",
        "reward": reward,
        "success": reward >= 1,
        "turns": len(actions),
        "messages": obs,
    }


@pytest.fixture
def trajectories(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    records = [oracle_record(0), oracle_record(1), oracle_record(2, truncate=2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, records


def test_openai_jsonl_is_the_fine_tuning_format(trajectories, tmp_path):
    path, records = trajectories
    tools = gym.make(ENV_ID).unwrapped.tools
    out = tmp_path / "ft.jsonl"
    assert (
        write_openai_jsonl(read_trajectories([path.parent]), out, tools=tools) == 2
    )  # the failed one is dropped
    for line in out.read_text().splitlines():
        example = json.loads(line)
        assert set(example) == {"messages", "tools"} and example["tools"] == tools
        messages = example["messages"]
        assert messages[0]["role"] == "system" and messages[-1]["role"] == "assistant"
        ids = set()
        for message in messages:
            allowed = {"system": {"role", "content", "name"}, "user": {"role", "content", "name"}}
            allowed |= {
                "assistant": {"role", "content", "tool_calls", "name"},
                "tool": {"role", "content", "tool_call_id"},
            }
            assert set(message) <= allowed[message["role"]]
            for call in message.get("tool_calls") or []:
                assert call["type"] == "function" and isinstance(
                    json.loads(call["function"]["arguments"]), dict
                )
                ids.add(call["id"])
            if message["role"] == "tool":
                assert message["tool_call_id"] in ids  # answers a call made before


def test_openai_example_without_assistant_turn_is_skipped():
    assert (
        openai_example({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})
        is None
    )


def test_parquet_and_hf_dataset_round_trip(trajectories, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the export extra (datasets, pyarrow) is not installed")
    from trace_train.export import to_dataset, write_parquet

    path, records = trajectories
    assert write_parquet(records, tmp_path / "t.parquet", env_id=ENV_ID) == 3
    loaded = datasets.Dataset.from_parquet(str(tmp_path / "t.parquet"))
    assert loaded.num_rows == 3 and loaded[2]["reward"] == 0.0 and loaded[0]["env_id"] == ENV_ID
    first = loaded[0]["messages"]
    assert [m["role"] for m in first] == [m["role"] for m in records[0]["messages"]]
    calls = [c for m in first for c in m["tool_calls"]]
    assert calls and all(json.loads(c["arguments"]) is not None for c in calls)
    dataset = to_dataset(records, min_reward=1.0)
    dataset.save_to_disk(str(tmp_path / "ds"))
    assert datasets.load_from_disk(str(tmp_path / "ds")).num_rows == 2
    assert rows(records)[0]["messages"][0] == {
        "role": "system",
        "content": records[0]["messages"][0]["content"],
        "tool_calls": [],
        "tool_call_id": "",
        "name": "",
    }


def test_bad_input_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = {"seed": 0, "split": "train", "reward": 0.0, "success": False, "messages": []}
    bad.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(ValueError, match="bad.jsonl:2 is not a JSON line"):
        read_trajectories([bad])
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "reward": "high"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:2 is not a trajectory record .reward: 'high' is not"):
        read_trajectories([bad])
    with pytest.raises(FileNotFoundError):
        read_trajectories([tmp_path / "missing"])


def test_export_command(trajectories, tmp_path, capsys):
    import argparse

    from trace_train.export import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())  # the `trace export` subcommand alone (the full CLI imports every part)
    path, _ = trajectories
    out = tmp_path / "ft.jsonl"
    args = parser.parse_args(["export", str(path), "--out", str(out), "--env", f"tests.toy_library:{ENV_ID}"])
    assert args.func(args) == 0
    assert "wrote 2 of 3 trajectories" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 2
