"""``trace play`` on retail-v2: rich markup does not eat "[i]", a mistyped /command is not sent to the user,
and the session stays open after the episode ends (``/reset`` plays another)."""

import argparse
import json

import gymnasium as gym

from trace_gym import commands as cli


def test_play_keeps_text_commands_and_the_session(monkeypatch, capsys):
    env = gym.make("trace/retail-v2").unwrapped
    env.reset(seed=3, options={"split": "train"})
    lines = [a["content"] if not a.get("tool_calls") else json.dumps(a) for a in env.oracle_actions()]
    typed = iter(["/tool", *lines, "hello again", "/reset 4", "/quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    monkeypatch.setattr(cli.console, "width", 400)  # one line per table row
    args = argparse.Namespace(env_id="trace/retail-v2", seed=3, split="train", difficulty=None, hint=False)
    assert cli.cmd_play(args) == 0  # (cli.main would import every pipeline command first: seconds)
    out = capsys.readouterr().out
    assert "(item_ids[i] becomes new_item_ids[i])" in out  # not eaten as rich markup
    assert "unknown command '/tool'" in out and "[assistant] /tool" not in out
    assert "reward 1.00" in out
    assert "the episode is over" in out and "[assistant] hello again" not in out
    assert out.count("[system]") == 2  # /reset 4 started a second episode
