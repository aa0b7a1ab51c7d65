"""`trace synthesize --new-package` that registers no env leaves no half-written project behind."""

from __future__ import annotations

import json

from trace_gym.synthesis import emit
from trace_train.cli import main


def test_a_rejected_new_package_is_removed_and_an_existing_one_is_kept(tmp_path, monkeypatch, capsys):
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps([{"name": "policy-adherence", "description": "follows the policy"}]))

    def reject_all(records, target, out, **kwargs):
        assert (out / "__init__.py").is_file()  # the package existed while synthesis ran
        return [
            emit.Outcome(r["name"], "trace/x-v0", "x", False, "planted: probe failed", "derived")
            for r in records
        ]

    monkeypatch.setattr(emit, "synthesize", reject_all)
    project = tmp_path / "proj"
    args = ["synthesize", "--capabilities", str(caps), "--target", "trace/retail-v2", "--out", str(project)]
    assert main([*args, "--new-package", "my_envs"]) == 1
    assert not project.exists()
    assert "was removed" in capsys.readouterr().out

    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'mine'\n")  # the user's project: never removed
    assert main([*args, "--new-package", "my_envs"]) == 1
    assert (project / "pyproject.toml").read_text() == "[project]\nname = 'mine'\n"
    assert not (project / "my_envs").exists()
