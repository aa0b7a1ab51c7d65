"""Stage ``calibration``: each capability env measured with the base agent; the difficulty closest to TRACE's
band (mean reward and success in [0.2, 0.6], informative groups >= 50%) is the one its adapter trains at.

Calls step 2's calibration (``trace calibrate``) on train-split seeds only.
"""

from __future__ import annotations

from typing import Any

from trace_gym.seeds import train_seeds
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import set_threads, use_run_envs, write_json


def run(ctx: StageContext) -> dict[str, Any]:
    cfg, c = ctx.config, ctx.config.calibration
    envs = ctx.upstream["synthesis"]["envs"]
    if not envs:
        return {"envs": [], "measured": False, "summary": "no capability env to calibrate"}
    if not c.enabled:
        out = [{"capability": e["capability"], "env_id": e["env_id"], "difficulty": None} for e in envs]
        return {"envs": out, "measured": False, "summary": "calibration disabled: default difficulties"}
    set_threads(cfg.threads)
    use_run_envs(cfg, [e["env_id"] for e in envs])
    for e in envs:
        train_seeds("calibration", e["env_id"], 0, c.seeds)
    from trace_train.pipeline.stages.common import base_policy
    from trace_train.policy_factory import release

    policy = base_policy(cfg, ctx.upstream["base"]["model"])
    try:
        out = _calibrate_all(ctx, policy, envs)
    finally:
        release(policy)
    write_json(ctx.dir / "calibration.json", out)
    return {
        "envs": out,
        "measured": True,
        "summary": ", ".join(f"{o['env_id']} level {o['difficulty']}" for o in out),
    }


def _calibrate_all(ctx: StageContext, policy: Any, envs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import json

    from trace_train.calibrate import calibrate
    from trace_train.config import CalibrationSettings, settings_of

    c = ctx.config.calibration
    out = []
    for e in envs:
        # each env's result is kept as it is measured: a resumed stage (after Ctrl-C or a server fault) measures
        # only the envs it had not finished (an env interrupted midway is measured again, whole)
        done = ctx.dir / f"calibration-{e['capability']}.json"
        if ctx.resume and done.is_file():
            out.append(json.loads(done.read_text()))
            ctx.log(f"{e['env_id']}: measured before the interruption, kept")
            continue
        ctx.log(f"{e['env_id']}: {c.seeds} seeds x {c.group_size} samples per difficulty level")
        result = calibrate(
            e["env_id"],
            policy,
            CalibrationSettings(**settings_of(c, CalibrationSettings)),
            model_name=ctx.upstream["base"]["model"],
        )
        chosen = result.chosen
        out.append(
            {
                "capability": e["capability"],
                "env_id": e["env_id"],
                "difficulty": chosen.level,
                "mean_reward": chosen.mean_reward,
                "success_rate": chosen.success,
                "informative_share": chosen.informative_share,
                "in_band": result.bands.distance(chosen) == 0,
                "prompt_tokens": result.prompt_tokens,
                "levels": result.to_spec()["levels"],
            }
        )
        write_json(done, out[-1])
        ctx.log(
            f"{e['env_id']}: level {chosen.level} (mean reward {chosen.mean_reward:.3f}, success "
            f"{chosen.success:.3f}, informative {chosen.informative_share:.2f})"
        )
    return out
