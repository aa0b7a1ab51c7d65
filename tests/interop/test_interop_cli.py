"""The interop commands are registered in the `trace` CLI with their documented flags."""

from trace_train.cli import build_parser


def test_commands_are_registered():
    parser = build_parser()
    serve = parser.parse_args(["env-serve", "trace/retail-v2", "--port", "0", "--session-timeout", "5"])
    assert serve.port == 0 and serve.session_timeout == 5.0 and serve.max_sessions == 256
    policy = parser.parse_args(["serve", "compose:runs/moe", "--served-model-name", "m", "--max-batch", "4"])
    assert policy.policy == "compose:runs/moe" and policy.served_model_name == "m" and policy.max_batch == 4
    export = parser.parse_args(["export", "a.jsonl", "--format", "parquet", "--out", "a.parquet"])
    assert export.format == "parquet" and export.min_reward == 1.0
