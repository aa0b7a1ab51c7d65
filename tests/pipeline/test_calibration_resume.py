"""A resumed calibration stage keeps each env it had measured and measures only the others."""

from __future__ import annotations

import dataclasses
import json

from tests.pipeline.test_isolation import ENV, MODEL, context
from trace_train.pipeline.stages import calibration


@dataclasses.dataclass
class _Level:
    level: int = 2
    mean_reward: float = 0.5
    success: float = 0.5
    informative_share: float = 1.0


class _Result:
    chosen = _Level()
    prompt_tokens = 10

    class bands:  # noqa: N801 - stands in for Bands
        @staticmethod
        def distance(_level) -> float:
            return 0.0

    @staticmethod
    def to_spec() -> dict:
        return {"levels": []}


def test_a_resumed_calibration_measures_only_the_envs_it_had_not_finished(tmp_path, monkeypatch):
    import trace_train.calibrate

    measured = []
    monkeypatch.setattr(
        trace_train.calibrate,
        "calibrate",
        lambda env_id, policy, settings, **kw: measured.append(env_id) or _Result(),
    )
    envs = [
        {"capability": "error-recovery", "env_id": ENV},
        {"capability": "policy-adherence", "env_id": ENV.replace("nosplit", "other")},
    ]
    ctx = context(tmp_path, {}, {**MODEL, "synthesis": {"envs": envs}})
    kept = {"capability": "error-recovery", "env_id": ENV, "difficulty": 3, "in_band": False}
    (ctx.dir / "calibration-error-recovery.json").write_text(json.dumps(kept))
    ctx.resume = True
    out = calibration._calibrate_all(ctx, policy=None, envs=envs)
    assert measured == [envs[1]["env_id"]]
    assert out[0] == kept and out[1]["difficulty"] == 2
    assert json.loads((ctx.dir / "calibration-policy-adherence.json").read_text()) == out[1]
    ctx.resume = False  # a fresh stage measures every env again
    measured.clear()
    calibration._calibrate_all(ctx, policy=None, envs=envs)
    assert measured == [e["env_id"] for e in envs]
