"""`trace run` / `trace demo` argument handling (no stage runs here)."""

from __future__ import annotations

import json

from trace_train.cli import main


def test_stages_and_schema(capsys):
    assert main(["run", "--stages"]) == 0
    out = capsys.readouterr().out
    assert "01-base" in out and "09-report" in out
    assert main(["run", "--schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "trace run configuration"


def test_bad_inputs_are_clear_errors(tmp_path, capsys):
    assert main(["run"]) == 2
    assert "needs a CONFIG file" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[adapters]\nstep = 3\n")
    assert main(["run", str(bad)]) == 2
    assert "did you mean 'steps'?" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["demo", "--quick", "--from", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "--from 'nope' is not a stage" in capsys.readouterr().err
    assert main(["demo", "--set", "adapters.steps=0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--set adapters.steps: 0 is less than the minimum of 1" in err and "demo.toml" not in err
    assert main(["demo", "--set", "target.env_id=trace/retail-v9", "--out", str(tmp_path / "o")]) == 2
    assert "target.env_id = 'trace/retail-v9' is not a registered env" in capsys.readouterr().err
    assert (
        main(
            ["demo", "--quick", "--from", "adapters", "--until", "03-analysis", "--out", str(tmp_path / "o")]
        )
        == 2
    )
    assert "--from adapters comes after --until analysis" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing was started
