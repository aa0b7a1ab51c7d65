"""The env commands of the ``trace`` CLI, run as a user would (subprocesses from the repo root)."""

import json
import pathlib
import subprocess
import sys

import gymnasium as gym

REPO = pathlib.Path(__file__).resolve().parents[1]


def trace(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trace_train.cli", *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


def test_envs_lists_registered_envs_with_capability_and_description():
    from trace_gym.registration import env_card, trace_env_ids

    result = trace("envs")
    assert result.returncode == 0, result.stderr
    for env_id in trace_env_ids():
        if env_id.startswith(("trace/test-", "trace/broken-")):
            continue
        card = env_card(env_id)
        assert env_id in result.stdout and card.description[:30] in result.stdout


def test_check_passes_on_a_sound_env_and_writes_json(tmp_path):
    out = tmp_path / "report.json"
    result = trace("check", "tests.toy_library:trace/test-library-v0", "--seeds", "10", "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    report = {r["name"]: r for r in json.loads(out.read_text())}
    assert f"all {len(report)} checks passed" in result.stdout and all(r["passed"] for r in report.values())
    assert {"oracle", "fuzz", "split_overlap", "adversarial/hedged_across_messages"} <= set(report)
    assert report["oracle"]["figure"] == "10/10 seeds at 1.0"


def test_check_fails_with_status_1_on_a_broken_env():
    result = trace("check", "tests.test_validation:trace/broken-wrongoracleenv-v0", "--seeds", "5")
    assert result.returncode == 1
    assert "FAIL" in result.stdout and "oracle" in result.stdout


def test_check_unknown_env_is_a_clear_error():
    result = trace("check", "trace/does-not-exist-v0")
    assert result.returncode == 2 and "does-not-exist" in result.stdout


def test_play_an_episode_from_stdin_to_the_reward():
    env = gym.make("trace/test-library-v0")
    env.reset(seed=5, options={"split": "train"})
    lines = [a["content"] if "tool_calls" not in a else json.dumps(a) for a in env.unwrapped.oracle_actions()]
    stdin = "/tools\nteleport me\n" + "\n".join(lines) + "\n"
    result = trace("play", "tests.toy_library:trace/test-library-v0", "--seed", "5", stdin=stdin)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reward 1.00" in result.stdout and "final_state" in result.stdout


def test_play_shorthand_call_and_invalid_action_feedback():
    stdin = '/call get_book {"book_id": 5}\n/quit\n'
    result = trace("play", "tests.toy_library:trace/test-library-v0", "--seed", "1", stdin=stdin)
    assert "invalid action: schema" in result.stdout and "5 is not of type 'string'" in result.stdout


def test_building_the_cli_imports_no_model_stack():
    """Every command module registers its flags without torch/transformers, so `trace --help` is instant."""
    code = (
        "import sys; from trace_train.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_check_refuses_nonsense_seeds_and_a_missing_json_folder_before_running(tmp_path):
    env = "tests.toy_library:trace/test-library-v0"
    for seeds in ("0", "-1"):
        result = trace("check", env, "--seeds", seeds)
        assert result.returncode == 2 and f"--seeds must be >= 1, got {seeds}" in result.stdout
        assert "unique" not in result.stdout  # the suite did not run
    missing = tmp_path / "nodir" / "r.json"
    result = trace("check", env, "--seeds", "5", "--json", str(missing))
    assert result.returncode == 2 and "does not exist" in result.stdout and "oracle" not in result.stdout


def test_a_busy_port_is_one_error_line_before_any_model_loads():
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        for command in (("env-serve", "tests.toy_library:trace/test-library-v0"), ("serve", "smollm2-135m")):
            result = trace(*command, "--port", port)
            out = result.stdout + result.stderr
            assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in out, out
            assert "Traceback" not in out and "Loading weights" not in out
