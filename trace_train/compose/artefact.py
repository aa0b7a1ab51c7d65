"""Loading PEFT adapters into a composition, and the composed model as one artefact on disk.

Artefact layout (``trace compose --out DIR``)::

    DIR/manifest.json            format, base model + fingerprint, slots, adapters (with file hashes), gates
    DIR/gates.safetensors        the only trained weights
    DIR/adapters/<name>/         each capability adapter, copied in (PEFT format)

:func:`load_composition` checks every hash before using a file, so a truncated or edited artefact fails with
the file's name instead of producing a silently different model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trace_train.bases import sha256_of
from trace_train.compose.model import Composition, CompositionError, compose_lora_weights

FORMAT = "trace-composition"
VERSION = 1
ARCH_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
)


@dataclass
class AdapterSpec:
    """One capability adapter: where it is, and what it was trained for (shown to the task-level router)."""

    name: str
    path: str
    env_id: str | None = None
    capability: str | None = None
    description: str | None = None


# one file hashing for every artefact that records its sha256 (shipped bases too; that module is light to import)
sha256_file = sha256_of


def base_fingerprint(model: PreTrainedModel) -> str:
    """Hash of the architecture fields of the base config (an adapter's shapes depend on exactly these)."""
    cfg = model.config.to_dict()
    blob = json.dumps({k: cfg.get(k) for k in ARCH_KEYS}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def adapter_dir(path: str | os.PathLike) -> Path:
    """A PEFT adapter directory, given it or a ``trace train`` run directory (``<run>/adapter``)."""
    p = Path(path)
    for candidate in (p, p / "adapter"):
        if (candidate / "adapter_config.json").is_file():
            return candidate
    raise FileNotFoundError(
        f"{path} is not a PEFT adapter directory (no adapter_config.json) nor a run with adapter/"
    )


def _adapter_config(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / "adapter_config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CompositionError(f"{path}: unreadable adapter_config.json ({e})") from e
    if cfg.get("peft_type") != "LORA":
        raise CompositionError(f"{path}: a {cfg.get('peft_type')} adapter; only LoRA adapters compose")
    if cfg.get("use_dora"):
        raise CompositionError(f"{path}: DoRA adapters are not supported (their update is not a pure B·A)")
    if cfg.get("bias", "none") != "none" or cfg.get("modules_to_save"):
        raise CompositionError(
            f"{path}: adapters that train biases or whole modules cannot be routed per token"
        )
    return cfg


def _targets(cfg: dict[str, Any]) -> Any:
    t = cfg.get("target_modules")
    return sorted(t) if isinstance(t, list | tuple | set) else t


def _same_base(recorded: str | None, base_path: str | None) -> bool | None:
    """True/False when both paths exist locally and can be compared, None when it cannot be told."""
    if not recorded or not base_path:
        return None
    a, b = Path(recorded).expanduser(), Path(base_path).expanduser()
    if not (a / "config.json").is_file() or not (b / "config.json").is_file():
        return None
    if a.resolve() == b.resolve():
        return True
    wa, wb = sorted(a.glob("*.safetensors")), sorted(b.glob("*.safetensors"))
    if [w.name for w in wa] != [w.name for w in wb] or not wa:
        return False
    return all(
        x.stat().st_size == y.stat().st_size and sha256_file(x) == sha256_file(y)
        for x, y in zip(wa, wb, strict=True)
    )


def check_adapters(adapters: Sequence[AdapterSpec], base_path: str | None) -> list[dict[str, Any]]:
    """Configs of the adapters after checking they share target modules and were trained on this base."""
    if not adapters:
        raise CompositionError("no adapters given")
    names = [a.name for a in adapters]
    if len(set(names)) != len(names) or "base" in names:
        raise CompositionError(f"adapter names must be unique and not 'base': {names}")
    configs = [_adapter_config(Path(a.path)) for a in adapters]
    first = _targets(configs[0])
    for spec, cfg in zip(adapters, configs, strict=True):
        if _targets(cfg) != first:
            raise CompositionError(
                f"adapter '{spec.name}' targets {_targets(cfg)} but '{adapters[0].name}' targets {first}: "
                "composed adapters must share their target modules"
            )
        if _same_base(cfg.get("base_model_name_or_path"), base_path) is False:
            raise CompositionError(
                f"adapter '{spec.name}' was trained on base {cfg.get('base_model_name_or_path')}, "
                f"not on {base_path}"
            )
    return configs


def read_lora_weights(
    model: PreTrainedModel, adapters: Sequence[AdapterSpec]
) -> dict[str, list[tuple[torch.Tensor, torch.Tensor, float]]]:
    """Per LoRA-targeted module name, ``(A, B, scaling)`` of each adapter, read through PEFT's own loader
    (so rank/alpha patterns and rsLoRA scaling mean what PEFT says); ``model`` is left unwrapped."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    names = [a.name for a in adapters]
    try:
        peft_model = PeftModel.from_pretrained(model, adapters[0].path, adapter_name=names[0])
        for spec in adapters[1:]:
            peft_model.load_adapter(spec.path, adapter_name=spec.name)
    except (RuntimeError, ValueError, KeyError) as e:
        raise CompositionError(
            f"an adapter does not fit this base model ({type(e).__name__}: {e})"[:2000]
        ) from e
    weights: dict[str, list[tuple[torch.Tensor, torch.Tensor, float]]] = {}
    inner = peft_model.base_model.model
    for module_name, module in inner.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        missing = [n for n in names if n not in module.lora_A]
        if missing:
            raise CompositionError(f"adapters {missing} have no LoRA on {module_name}: other target modules")
        weights[module_name] = [
            (
                module.lora_A[n].weight.detach().clone(),
                module.lora_B[n].weight.detach().clone(),
                module.scaling[n],
            )
            for n in names
        ]
    peft_model.unload()  # puts the original Linear modules back into ``model``
    return weights


def build_composition(
    model: PreTrainedModel,
    adapters: Sequence[AdapterSpec],
    base_path: str | None = None,
    base_bias: float = 1.0,
) -> Composition:
    """Check the adapters, load them and install gates + routed linears in ``model``."""
    adapters = [AdapterSpec(**{**asdict(a), "path": str(adapter_dir(a.path))}) for a in adapters]
    check_adapters(adapters, base_path or getattr(model.config, "_name_or_path", None))
    weights = read_lora_weights(model, adapters)
    composition = compose_lora_weights(model, [a.name for a in adapters], weights, base_bias=base_bias)
    composition.adapters = list(adapters)
    return composition


def save_composition(
    composition: Composition,
    out: str | os.PathLike,
    base_model: str,
    training: dict[str, Any] | None = None,
) -> Path:
    """Write the artefact atomically (temp dir + rename of each file) and return the manifest path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    adapters: list[AdapterSpec] = composition.adapters
    entries = []
    for spec in adapters:
        dst = out / "adapters" / spec.name
        src = Path(spec.path)
        if src.resolve() != dst.resolve():
            tmp = Path(tempfile.mkdtemp(dir=out, prefix=".adapter-"))
            for f in ("adapter_config.json", "adapter_model.safetensors"):
                shutil.copy2(src / f, tmp / f)
            if dst.exists():
                shutil.rmtree(dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dst)
        files = {f.name: sha256_file(f) for f in sorted(dst.iterdir()) if f.is_file()}
        entries.append({**asdict(spec), "path": f"adapters/{spec.name}", "sha256": files})
    gates_tmp = out / ".gates.safetensors.tmp"
    save_file(composition.gate_state_dict(), str(gates_tmp))
    os.replace(gates_tmp, out / "gates.safetensors")
    gate0 = composition.gates[0].proj
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "base": {
            "model": base_model,
            "fingerprint": base_fingerprint(composition.model),
            "dtype": str(next(composition.model.parameters()).dtype).removeprefix("torch."),
        },
        "slots": composition.slot_names,
        "adapters": entries,
        "gates": {
            "file": "gates.safetensors",
            "sha256": sha256_file(out / "gates.safetensors"),
            "layers": len(composition.gates),
            "hidden_size": gate0.in_features,
            "base_bias": composition.gates[0].base_bias,  # initial value; trained ones are in the file
        },
        "training": training or {},
    }
    tmp = out / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(tmp, out / "manifest.json")
    return out / "manifest.json"


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    root = Path(path)
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{root} is not a composition artefact (no manifest.json)") from e
    except json.JSONDecodeError as e:
        raise CompositionError(f"{root}/manifest.json is not valid JSON ({e})") from e
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CompositionError(
            f"{root}: format {manifest.get('format')} v{manifest.get('version')}, expected {FORMAT} v{VERSION}"
        )
    return manifest


def verify_artefact(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest, after checking the hash of every file it names."""
    root = Path(path)
    manifest = read_manifest(root)
    checks = [(root / manifest["gates"]["file"], manifest["gates"]["sha256"])]
    for entry in manifest["adapters"]:
        checks += [(root / entry["path"] / f, h) for f, h in entry["sha256"].items()]
    for file, expected in checks:
        if not file.is_file():
            raise CompositionError(f"artefact file missing: {file}")
        if sha256_file(file) != expected:
            raise CompositionError(f"artefact file changed since it was saved (hash mismatch): {file}")
    return manifest


def load_composition(
    path: str | os.PathLike,
    model: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> tuple[Composition, PreTrainedTokenizerBase, dict[str, Any]]:
    """Restore a saved composition exactly: base (``model`` overrides the manifest's), adapters, gates."""
    from trace_train.models import load_model, resolve_model

    root = Path(path)
    manifest = verify_artefact(root)
    base_name = model or manifest["base"]["model"]
    base, tokenizer = load_model(
        base_name,
        dtype=dtype or manifest["base"].get("dtype", "float32"),
        device=torch.device(device).type if device is not None else "cpu",
    )
    if base_fingerprint(base) != manifest["base"]["fingerprint"]:
        raise CompositionError(
            f"{base_name} is not the base this composition was built on ({manifest['base']})"
        )
    specs = [
        AdapterSpec(
            **{
                **{k: e.get(k) for k in ("name", "env_id", "capability", "description")},
                "path": str(root / e["path"]),
            }
        )
        for e in manifest["adapters"]
    ]
    composition = build_composition(
        base, specs, base_path=str(resolve_model(base_name)), base_bias=manifest["gates"]["base_bias"]
    )
    composition.load_gate_state_dict(load_file(str(root / manifest["gates"]["file"])))
    if device is not None:
        composition.model.to(device)
    return composition, tokenizer, manifest
