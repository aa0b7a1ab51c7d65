"""Stage ``base``: the base agent, optionally warm-started by SFT on train-split oracle trajectories.

Output: ``result["model"]``, the model every later stage starts from (the merged warm-started model, the
configured model itself, or the smoke-test tiny model), and ``result["trained_on"]``, which the report quotes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from trace_gym.seeds import train_seeds
from trace_train.pipeline.runner import StageContext
from trace_train.pipeline.stages.common import TINY_MODEL, build_tiny_model, set_threads


def run(ctx: StageContext) -> dict[str, Any]:
    cfg, base, warm = ctx.config, ctx.config.base, ctx.config.base.warm_start
    set_threads(cfg.threads)
    envs = list(warm.envs) or [cfg.target.env_id]
    # isolation first: refuse before any model is loaded
    plans = (
        {env_id: train_seeds("base", env_id, warm.seed_offset, warm.episodes) for env_id in envs}
        if warm.enabled
        else {}
    )

    model = base.model
    if model == TINY_MODEL:
        model = str(build_tiny_model(ctx.dir / "tiny-model", cfg.seed))
        ctx.log(f"smoke-test model: random 2-layer Llama with SmolLM2's tokenizer in {model}")
    if not warm.enabled:
        return {"model": model, "trained_on": [], "summary": f"base agent: {base.model} (no warm start)"}

    from trace_train.config import EngineArgs, SFTArgs, SFTSettings, settings_of
    from trace_train.sft import run_sft

    started = time.time()
    shipped = _shipped_base(ctx, envs, model) if warm.shipped else None
    if shipped is not None:
        return _use_shipped(ctx, shipped, plans[envs[0]], started)
    trained_on = []
    for i, env_id in enumerate(envs):
        seeds = plans[env_id]
        ctx.log(
            f"warm start {i + 1}/{len(envs)}: SFT on {len(seeds)} oracle episodes of {env_id} (train split)"
        )
        out = ctx.dir / f"sft-{i}"
        done = out / "sft_summary.json"
        if done.is_file() and (out / "merged").is_dir():  # a resumed stage keeps the fits it finished
            summary = json.loads(done.read_text())
        else:
            summary = run_sft(
                SFTArgs(
                    **settings_of(warm, SFTSettings),
                    **settings_of(base, EngineArgs),
                    env_id=env_id,
                    model=model,
                    out=str(out),
                    seed=warm.seed,
                    merge=True,
                    lora_rank=base.lora_rank,
                    lora_alpha=base.lora_alpha,
                    dtype=base.dtype,
                    resume=True,  # an interrupted stage continues the fit from its last checkpoint
                )
            )
        model = summary["merged"]
        trained_on.append(
            {
                "env_id": env_id,
                "split": "train",
                "task_indices": [warm.seed_offset, warm.seed_offset + warm.episodes - 1],
                "seeds": [seeds[0], seeds[-1]],
                "oracle_episodes_kept": summary.get("episodes", summary.get("trajectories")),
                "first_loss": summary.get("first_loss"),
                "final_loss": summary.get("final_loss"),
                "epochs": warm.epochs,
            }
        )
    what = ", ".join(
        f"{t['env_id']} train tasks {t['task_indices'][0]}-{t['task_indices'][1]}" for t in trained_on
    )
    return {
        "model": model,
        "trained_on": trained_on,
        "wall_s": round(time.time() - started, 1),
        "summary": f"base agent: {base.model} + SFT on {what}",
    }


def _shipped_base(ctx: StageContext, envs: list[str], model: str) -> Any:
    """The shipped base whose recipe is exactly this run's warm start (one env, same model, rendering, LoRA shape,
    seed and fit settings), or None: then the stage fits it here."""
    from trace_train.bases import find_shipped, recipe_key
    from trace_train.config import SFTSettings, settings_of

    base = ctx.config.base
    if len(envs) != 1 or model != base.model:  # several envs, or the smoke test's tiny model
        return None
    sft = settings_of(base.warm_start, SFTSettings)
    key = recipe_key(
        envs[0], model, base.tool_format, base.lora_rank, base.lora_alpha, base.warm_start.seed, sft
    )
    return find_shipped(key)


def _use_shipped(ctx: StageContext, shipped: Any, seeds: range, started: float) -> dict[str, Any]:
    from trace_train.bases import materialise

    cfg = ctx.config
    ctx.log(f"using the {shipped.describe()}; base.warm_start.shipped = false fits it here instead")
    merged = materialise(shipped, ctx.dir / "sft-0", dtype=cfg.base.dtype)
    recipe, sft = shipped.recipe, shipped.recipe["sft"]
    first = sft["seed_offset"]
    trained_on = [
        {
            "env_id": sft["env_id"],
            "split": "train",
            "task_indices": [first, first + sft["episodes"] - 1],
            "seeds": [seeds[0], seeds[-1]],
            "oracle_episodes_kept": recipe.get("made", {}).get("trajectories"),
            "first_loss": recipe.get("made", {}).get("first_loss"),
            "final_loss": recipe.get("made", {}).get("final_loss"),
            "epochs": sft["epochs"],
            "shipped": shipped.name,
        }
    ]
    return {
        "model": str(merged),
        "trained_on": trained_on,
        "shipped": {"name": shipped.name, "sha256": recipe["sha256"], "made": recipe.get("made", {})},
        "wall_s": round(time.time() - started, 1),
        "summary": f"base agent: the {shipped.describe()}",
    }
