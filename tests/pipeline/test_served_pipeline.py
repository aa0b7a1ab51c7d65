"""The quick loop (bfcl-quick) with ``[generation]`` on ``trace serve`` (issue 51): every stage runs, and what is greedy equals
the local run's (slow: minutes on two cores; tests/train/test_served_generation.py covers the parts in the default
suite)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.interop.servers import ServerProcess
from trace_train.pipeline.config import builtin_config
from trace_train.pipeline.stages import STAGES


def _config(tmp_path, model_dir) -> str:
    # bfcl-quick: retail's quick loop trains nothing at present (trace check rejects its forced env)
    text = builtin_config("bfcl-quick").read_text()
    text = text.replace('model = "tiny-random"', f'model = "{model_dir}"')
    # vLLM serves [base] model itself: no warm start (its merged model would exist only after stage 1)
    text = text.replace("[base.warm_start]\nenabled = true", "[base.warm_start]\nenabled = false")
    # greedy calibration, so that the served run's must equal the local one's
    text = text.replace("[calibration]\nenabled = true", "[calibration]\nenabled = true\ntemperature = 0.0")
    path = tmp_path / "served.toml"
    path.write_text(text)
    return str(path)


def _run(config: str, out, *sets: str) -> str:
    cmd = [sys.executable, "-m", "trace_train.cli", "run", config, "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_the_quick_loop_on_trace_serve_runs_every_stage_and_equals_the_local_run(tmp_path):
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    from trace_train.pipeline.stages.common import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "model", 0)
    # perturbed: the plain random init answers newlines only, which would make the equality checks vacuous
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    model.save_pretrained(model_dir)
    config = _config(tmp_path, model_dir)
    local = tmp_path / "local"
    _run(config, local)

    served = tmp_path / "served"
    served.mkdir()
    for name in ("01-base", "03-analysis", "04-synthesis"):  # no generation in them: not run twice
        shutil.copytree(local / name, served / name)
    server = ServerProcess("serve", str(model_dir), "--port", "0")
    try:
        out = _run(config, served, f'generation.server_url="{server.url}"')
    finally:
        server.stop()
    for i, stage in enumerate(STAGES, 1):
        state = json.loads((served / f"{i:02d}-{stage.name}" / "stage.json").read_text())
        assert state["status"] == "done", stage.name
    # the served rollouts' files and result hash the same as the local ones: analysis's inputs are unchanged
    assert "== analysis: finished earlier, inputs unchanged: skipped" in out
    rollouts = _lines(served / "02-rollouts" / "trajectories.jsonl")
    assert len({json.dumps(r["actions"]) for r in rollouts}) > 1  # not one constant answer
    assert rollouts == _lines(local / "02-rollouts" / "trajectories.jsonl")
    calibration = "05-calibration/calibration.json"
    assert json.loads((served / calibration).read_text()) == json.loads((local / calibration).read_text())
    assert _lines(served / "08-evaluation" / "base.jsonl") == _lines(local / "08-evaluation" / "base.jsonl")
    # GRPO sampled on the server (not equal to the local samples): its adapter, evaluated locally, gives the
    # served evaluation's episodes
    from trace_train.config import EvalSettings
    from trace_train.evaluate import evaluate
    from trace_train.pipeline.config import load_config
    from trace_train.policies.hf import HFPolicy

    adapters = json.loads((served / "06-adapters" / "stage.json").read_text())["result"]["adapters"]
    assert adapters and all(Path(info["adapter"]).is_dir() for info in adapters.values())
    assert not any((served / "06-adapters").rglob("served_adapters/step-*"))  # released after training
    from trace_train.config import settings_of

    cfg = load_config(config)
    e = cfg.evaluation
    for cap, info in adapters.items():
        settings = EvalSettings(
            **{**settings_of(e, EvalSettings), "episodes": e.adapter_episodes or e.episodes}
        )
        policy = HFPolicy.from_pretrained(str(model_dir), adapter=info["adapter"])
        mine = evaluate(
            policy, cfg.target.env_id, settings, split="test", difficulty=cfg.target.difficulty
        ).trajectories
        theirs = _lines(served / "08-evaluation" / f"adapter-{cap}.jsonl")
        strip = lambda rs: [{k: v for k, v in r.items() if k != "model"} for r in rs]  # noqa: E731
        assert strip(theirs) == strip(mine)
    direct = HFPolicy.from_pretrained(
        str(model_dir), adapter=str(served / "08-evaluation/direct_grpo/adapter")
    )
    mine = evaluate(
        direct,
        cfg.target.env_id,
        EvalSettings(**settings_of(e, EvalSettings)),
        split="test",
        difficulty=cfg.target.difficulty,
    ).trajectories
    assert strip(_lines(served / "08-evaluation" / "direct_grpo-eval.jsonl")) == strip(mine)
