"""Stage ``gates``: step 4, token-level gates over the capability adapters (``trace compose``).

Calls :func:`trace_train.compose.train.compose`: gate data from each adapter's rollouts on its own capability
env (train split) plus base text (on those envs, and with ``base_target_episodes`` on the target's own train
tasks, labelled slot 0: do no harm), then only the gates train. The artefact (gates, adapters, manifest) is the
stage folder itself; an interrupted stage resumes from its gate data (kept once collected) and the compose checkpoint.
"""

from __future__ import annotations

import time
from typing import Any

from trace_gym.seeds import train_seeds
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import set_threads, use_run_envs


def run(ctx: StageContext) -> dict[str, Any]:
    cfg, g = ctx.config, ctx.config.gates
    adapters = ctx.upstream["adapters"]["adapters"]
    if not g.enabled:
        return {"artefact": None, "summary": "gates disabled by the config (gates.enabled = false)"}
    if not adapters:
        return {"artefact": None, "summary": "no adapter to compose"}
    set_threads(cfg.threads)
    use_run_envs(cfg, [info["env_id"] for info in adapters.values()])
    for info in adapters.values():  # gate data: train tasks 0 .. episodes + base episodes - 1 of each env
        train_seeds("gates", info["env_id"], 0, g.episodes_per_env + g.base_episodes_per_env)
        if g.oracle_episodes:
            train_seeds("gates", info["env_id"], g.oracle_seed_offset, g.oracle_episodes)
    if g.base_target_episodes:  # the base's own target contexts (slot 0)
        train_seeds("gates", cfg.target.env_id, g.base_target_seed_offset, g.base_target_episodes)
    from trace_train.compose.config import ComposeArgs, GateSettings
    from trace_train.compose.train import compose, step_status
    from trace_train.config import EngineArgs, GenerationSettings, settings_of

    names = list(adapters)
    args = ComposeArgs(
        **{**settings_of(g, GateSettings), "save_every": g.save_every or max(1, g.steps // 4)},
        **settings_of(cfg.base, EngineArgs),  # the gate data sees the tool text the adapters trained with
        # the gate data's rollouts on the [generation] server when there is one, each adapter hot-loaded
        **settings_of(cfg.generation, GenerationSettings),
        adapters=[adapters[n]["adapter"] for n in names],
        envs=[adapters[n]["env_id"] for n in names],
        out=str(ctx.dir),
        model=ctx.upstream["base"]["model"],
        names=names,
        dtype=cfg.base.dtype,
        seed=cfg.seed,
        difficulties=[adapters[n].get("difficulty") for n in names],  # the levels the adapters trained at
        target=cfg.target.env_id,
        target_difficulty=cfg.target.difficulty,
        # the gate data (minutes of rollouts) is kept even when the run stopped before the first checkpoint
        resume=ctx.resume and (ctx.dir / "gate_data.pt").is_file(),
        tensorboard=False,
    )
    from trace_train.roofline import LEDGER

    started, work_before = time.time(), LEDGER.snapshot()
    ctx.log(f"gate data from {len(names)} adapter env(s), then {g.steps} gate steps")
    try:
        with ctx.bar("gate steps", g.steps) as bar:  # plain lines in a log (the data collection comes first)
            last = compose(args, on_step=lambda step, m: bar.update(step, status=step_status(m)))
    except RuntimeError as err:
        if "no adapter produced a successful episode" not in str(err):
            raise
        # nothing to learn routing from: the run goes on without the MoE, and the report says why
        ctx.log(f"gates not trained: {err}")
        return {
            "artefact": None,
            "data_rollouts": len(names) * (g.episodes_per_env + g.base_episodes_per_env)
            + g.base_target_episodes,
            "wall_s": round(time.time() - started, 1),
            "summary": f"gates not trained: {err}",
        }
    work = LEDGER.since(work_before)
    return {
        "artefact": str(ctx.dir),
        "names": names,
        "final": {k: v for k, v in last.items() if isinstance(v, int | float)},
        "data": last.get("data"),  # per slot: episodes, kept, success (oracle stand-ins marked "(oracle)")
        "data_rollouts": len(names) * (g.episodes_per_env + g.base_episodes_per_env) + g.base_target_episodes,
        # the model compute the ledger saw (the gate data's rollouts; a resumed stage counts this process's part)
        "flops": sum(w.flops for w in work.values()),
        "tokens": sum(w.tokens for w in work.values()),
        "wall_s": round(time.time() - started, 1),
        "summary": f"gates over {names}: final loss {last.get('loss', float('nan')):.3f}",
    }
