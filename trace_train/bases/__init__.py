"""Shipped base agents: warm-start LoRA adapters that live inside the package, each with the recipe that made it.

A shipped base is a cache of one exact fit. Its directory holds the adapter in PEFT's format
(``adapter_config.json``, ``adapter_model.safetensors``) and ``recipe.json``: the target, model, rendering,
LoRA shape and every ``trace sft`` setting of the fit (so the train task indices), plus the CPU, dtype and time it
took and the sha256 of each adapter file. The pipeline's base stage uses it in place of fitting when the run asks
for exactly that fit (:func:`find_shipped`), and refuses it when a file's hash differs from the recipe's
(:func:`verify`). ``trace base build NAME`` refits it from its recipe (resumable) and ``trace base verify`` checks
every shipped base.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASES_DIR = Path(__file__).parent
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# the warm start's settings a recipe fixes: the data (tasks, difficulty, turns), its order and the updates. The
# memory knobs (micro_batch_tokens, gradient_checkpointing) and checkpointing (save_every) change neither
MATCHED_SFT_KEYS = (
    "episodes",
    "epochs",
    "lr",
    "batch_size",
    "seed_offset",
    "max_turns",
    "difficulty",
    "levels",
    "teacher",
)
# recipes written before a setting existed were made with its default
SFT_KEY_DEFAULTS = {"teacher": "oracle"}


class ShippedBaseError(ValueError):
    """A shipped base whose files do not match its recipe (a changed or corrupt adapter), or no such base."""


@dataclass(frozen=True)
class ShippedBase:
    name: str
    directory: Path
    recipe: dict[str, Any]

    @property
    def adapter(self) -> Path:
        return self.directory

    def describe(self) -> str:
        sft, made = self.recipe["sft"], self.recipe.get("made", {})
        first = sft["seed_offset"]
        return (
            f"shipped base {self.name}: {sft['model']} + LoRA r{sft['lora_rank']} fitted on {sft['env_id']} train "
            f"tasks {first}-{first + sft['episodes'] - 1} ({sft['epochs']} epoch(s), lr {sft['lr']}, "
            f"{sft['tool_format']} rendering; {made.get('dtype', '?')} on {made.get('cpu', '?')}, "
            f"{made.get('train_seconds', 0) / 60:.0f} min; sha256 "
            f"{self.recipe['sha256']['adapter_model.safetensors'][:12]})"
        )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_bases(root: Path | None = None) -> list[ShippedBase]:
    """Every base shipped under ``root`` (default: the package's; a directory with a recipe.json), by name."""
    bases = []
    for recipe_path in sorted((root or BASES_DIR).glob("*/recipe.json")):
        try:
            recipe = json.loads(recipe_path.read_text())
        except ValueError as exc:
            raise ShippedBaseError(f"{recipe_path} is not valid JSON ({exc})") from exc
        bases.append(ShippedBase(recipe_path.parent.name, recipe_path.parent, recipe))
    return bases


def by_name(name: str, root: Path | None = None) -> ShippedBase:
    bases = {b.name: b for b in shipped_bases(root)}
    if name not in bases:
        raise ShippedBaseError(f"no shipped base named {name!r} (shipped: {', '.join(bases) or 'none'})")
    return bases[name]


def verify(base: ShippedBase) -> None:
    """Refuse a base whose adapter files are missing or differ from the sha256 its recipe records."""
    for file in ADAPTER_FILES:
        path = base.directory / file
        if not path.is_file():
            raise ShippedBaseError(f"shipped base {base.name}: {path} is missing")
        want, got = base.recipe["sha256"].get(file), sha256_of(path)
        if got != want:
            raise ShippedBaseError(
                f"shipped base {base.name}: {file} has sha256 {got[:16]}.., its recipe says {str(want)[:16]}..: "
                f"the file changed since the fit (rebuild it with `trace base build {base.name}`, or run the "
                "warm start here with base.warm_start.shipped = false)"
            )


def recipe_key(
    env_id: str, model: str, tool_format: str, lora_rank: int, lora_alpha: int, seed: int, sft: dict[str, Any]
) -> dict[str, Any]:
    """What a run must share with a recipe for its warm start to be that fit (JSON round trip: tuples = lists)."""
    key = {
        "env_id": env_id,
        "model": model,
        "tool_format": tool_format,
        "lora": [lora_rank, lora_alpha],
        "seed": seed,
        "sft": {k: sft[k] if k in sft else SFT_KEY_DEFAULTS[k] for k in MATCHED_SFT_KEYS},
    }
    return json.loads(json.dumps(key))


def key_of_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """:func:`recipe_key` of the fit a recipe records (its ``sft``: every ``trace sft`` setting of that fit)."""
    sft = recipe["sft"]
    return recipe_key(
        sft["env_id"], sft["model"], sft["tool_format"], sft["lora_rank"], sft["lora_alpha"], sft["seed"], sft
    )


def find_shipped(key: dict[str, Any], root: Path | None = None) -> ShippedBase | None:
    """The shipped base whose recipe is exactly the fit ``key`` (from :func:`recipe_key`) asks for, if any."""
    for base in shipped_bases(root):
        if key_of_recipe(base.recipe) == key:
            return base
    return None


def materialise(base: ShippedBase, out: Path, dtype: str = "auto") -> Path:
    """Verify ``base``, load its model with the adapter, merge, and save the plain model to OUT/merged (what
    the pipeline's later stages load); returns that directory. A finished OUT/merged of the same hash is kept."""
    verify(base)
    merged = out / "merged"
    stamp = out / "shipped.json"
    sha = base.recipe["sha256"]["adapter_model.safetensors"]
    if (
        (merged / "config.json").is_file()
        and stamp.is_file()
        and json.loads(stamp.read_text()).get("sha256") == sha
    ):
        return merged
    from trace_train.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(
        base.recipe["sft"]["model"], adapter=base.adapter, dtype=dtype, device="cpu"
    )
    model = policy.model.merge_and_unload()
    model.save_pretrained(merged)
    policy.tokenizer.save_pretrained(merged)
    stamp.write_text(json.dumps({"name": base.name, "sha256": sha}, indent=2))
    return merged
