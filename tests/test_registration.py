"""Registration in a fresh interpreter: built-ins through ``trace_gym:``, plugins through entry points."""

import subprocess
import sys
import textwrap

import gymnasium as gym

from trace_gym.registration import trace_env_ids


def run_fresh(code: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = None
    if pythonpath is not None:
        import os

        env = {**os.environ, "PYTHONPATH": pythonpath}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )


def test_builtin_envs_make_from_a_fresh_interpreter_with_only_gymnasium():
    builtins = [
        e for e in trace_env_ids() if not e.startswith("trace/test-") and not e.startswith("trace/broken-")
    ]
    assert builtins, "no built-in trace env registered"
    # Every env is made; a target-derived env's first reset scans 1,000 target tasks (up to ~50 s cold on one
    # core), so one per target is reset here (the others' resets are the env contract tests')
    by_target: dict[str, str] = {}
    for env_id in builtins:
        by_target.setdefault(gym.spec(env_id).kwargs.get("target_id", env_id), env_id)
    reset = sorted(by_target.values())
    assert len(reset) < len(builtins), "no target-derived env registered"
    result = run_fresh(
        f"""
        import sys
        import gymnasium as gym
        assert "trace_gym" not in sys.modules
        for env_id in {builtins!r}:
            env = gym.make("trace_gym:" + env_id)
            if env_id in {reset!r}:
                obs, info = env.reset(seed=0)
                assert obs[0]["role"] == "system"
        print("ok", len({builtins!r}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")


def test_entry_point_plugins_are_registered(tmp_path):
    package = tmp_path / "demo_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from trace_gym.registration import register_env

            def register_envs():
                register_env("trace/plugin-demo-v0", entry_point="tests.toy_library:LibraryEnv")
            """
        )
    )
    dist = tmp_path / "demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[trace_gym.envs]\ndemo = demo_plugin:register_envs\n")
    import pathlib

    repo = pathlib.Path(__file__).resolve().parents[1]
    result = run_fresh(
        """
        import gymnasium as gym
        env = gym.make("trace_gym:trace/plugin-demo-v0")
        print(env.reset(seed=0)[0][1]["content"])
        """,
        pythonpath=f"{tmp_path}:{repo}",
    )
    assert result.returncode == 0, result.stderr
    assert "borrow" in result.stdout


def test_a_broken_plugin_warns_but_does_not_break_the_import(tmp_path):
    dist = tmp_path / "bad_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[trace_gym.envs]\nbad = no_such_module:register\n")
    result = run_fresh("import trace_gym; print('imported')", pythonpath=str(tmp_path))
    assert result.returncode == 0 and "imported" in result.stdout
    assert "trace_gym plugin 'bad'" in result.stderr and "no_such_module" in result.stderr
