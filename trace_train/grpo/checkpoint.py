"""Atomic, exactly-resumable checkpoints: adapter (PEFT format), optimiser, RNG states, step counters."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file

# Settings that must match for a resume to be meaningful (everything else, e.g. --steps, may change).
RESUME_KEYS = (
    "env_id",
    "model",
    "lora_rank",
    "lora_alpha",
    "lora_target_modules",
    "group_size",
    "groups_per_step",
    "loss_type",
    # the training signal (issue 29): a resumed run with another curriculum, reward or mixing is another run
    "curriculum",
    "reward",
    "rescue_fraction",
    "target_share",
    "target_env_id",
)


class CheckpointError(RuntimeError):
    pass


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    root: Path,
    step: int,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    config: dict[str, Any],
    rank: int = 0,
    world_size: int = 1,
    is_main: bool = True,
    barrier=lambda: None,
) -> Path:
    """Write ``root/step-XXXXXXX`` via a temp dir + rename, then point ``root/latest`` at it (also atomic)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:07d}"
    staging = root / f".staging-step-{step:07d}"
    if is_main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    barrier()
    # every rank writes its own RNG state (ranks sample differently)
    torch.save(rng_state(), staging / f"rng-rank{rank}.pt")
    if is_main:
        model.save_pretrained(staging / "adapter")
        torch.save(
            {"optimizer": optimizer.state_dict(), "trainer_state": trainer_state, "world_size": world_size},
            staging / "trainer.pt",
        )
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    barrier()
    if is_main:
        (staging / "COMPLETE").write_text(str(step))
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".latest-")
        with os.fdopen(fd, "w") as f:
            f.write(final.name)
        os.replace(tmp, root / "latest")
    barrier()
    return final


def find_checkpoint(path: Path) -> Path:
    """Accept a checkpoint dir, a checkpoints root (uses ``latest``) or a run dir (``<run>/checkpoints``)."""
    if not path.exists():
        raise CheckpointError(
            f"--resume {path}: no such directory (give a run's --out, its checkpoints/ or one step-* directory)"
        )
    if (path / "checkpoints" / "latest").is_file():
        path = path / "checkpoints"
    if (path / "latest").is_file():
        path = path / (path / "latest").read_text().strip()
    if not (path / "COMPLETE").is_file():
        raise CheckpointError(
            f"{path} is not a complete trace checkpoint (no COMPLETE marker: a save cut short, or not a checkpoint "
            "directory; a run's --out, its checkpoints/ or one step-* directory is)"
        )
    return path


def saved_config(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's ``config.json``; CheckpointError when it is missing or torn."""
    try:
        return json.loads((ckpt / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{ckpt}: unreadable config.json ({e})") from e


def settings_mismatch(saved: dict[str, Any], now: dict[str, Any], keys, saved_as: str = "checkpoint") -> str:
    """``key: <saved_as>=old now=new`` for every key of ``keys`` whose values differ ("" when none do)."""
    return ", ".join(
        f"{k}: {saved_as}={saved.get(k)!r} now={now.get(k)!r}" for k in keys if saved.get(k) != now.get(k)
    )


def load_checkpoint(
    path: Path,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    config: dict[str, Any],
    rank: int = 0,
    world_size: int = 1,
    keys: tuple[str, ...] = RESUME_KEYS,
) -> dict[str, Any]:
    """Restore everything in place and return the trainer state; raise CheckpointError with the reason.
    ``keys``: the settings that must equal the checkpoint's (GRPO's by default)."""
    ckpt = find_checkpoint(path)
    detail = settings_mismatch(saved_config(ckpt), config, keys)
    if detail:
        raise CheckpointError(f"checkpoint {ckpt} does not match this run ({detail})")
    try:
        blob = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False)
        weights = load_file(str(ckpt / "adapter" / "adapter_model.safetensors"))
        rng = torch.load(ckpt / f"rng-rank{rank}.pt", map_location="cpu", weights_only=False)
    except Exception as e:  # truncated or garbled files
        raise CheckpointError(f"{ckpt}: corrupt checkpoint ({type(e).__name__}: {e})") from e
    if blob.get("world_size", 1) != world_size:
        raise CheckpointError(
            f"checkpoint {ckpt} was written by {blob.get('world_size')} processes, this run has {world_size}"
        )
    result = set_peft_model_state_dict(model, weights)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise CheckpointError(
            f"{ckpt}: adapter does not fit this model (unexpected keys {unexpected[:3]}...)"
        )
    try:
        optimizer.load_state_dict(blob["optimizer"])
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"{ckpt}: optimizer state does not fit ({e})") from e
    set_rng_state(rng)
    return blob["trainer_state"]
