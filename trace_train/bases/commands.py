"""``trace base list | verify | build``: the shipped base agents (trace_train/bases, docs/base.md)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trace_train.bases import ADAPTER_FILES, BASES_DIR, ShippedBase, by_name, sha256_of, shipped_bases, verify
from trace_train.metrics import cpu_name


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=BASES_DIR,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def install_fit(name: str, fit_dir: Path, root: Path | None = None, dtype: str | None = None) -> ShippedBase:
    """Copy a finished ``trace sft`` fit (its OUT directory) into the package as shipped base ``name``, with the
    recipe: every setting of the fit, how it was made, and each adapter file's sha256. An evaluation record a
    previous recipe of that name holds is kept only when the adapter did not change."""
    summary_path = fit_dir / "sft_summary.json"
    if not summary_path.is_file() or not (fit_dir / "adapter").is_dir():
        raise FileNotFoundError(f"{fit_dir} holds no finished fit (sft_summary.json and adapter/)")
    summary = json.loads(summary_path.read_text())
    if summary.get("settings") is None:
        raise ValueError(f"{summary_path} records no settings (an older fit): refit it with `trace sft`")
    target = (root or BASES_DIR) / name
    target.mkdir(parents=True, exist_ok=True)
    for file in ADAPTER_FILES:
        shutil.copyfile(fit_dir / "adapter" / file, target / file)
    sha = {file: sha256_of(target / file) for file in ADAPTER_FILES}
    old_path = target / "recipe.json"
    old = json.loads(old_path.read_text()) if old_path.is_file() else {}
    recipe: dict[str, Any] = {
        "name": name,
        "sft": summary["settings"],
        "made": {
            "command": "trace base build " + name,
            "dtype": dtype or summary.get("dtype") or summary["settings"].get("dtype"),
            "cpu": cpu_name(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "commit": _git_commit(),
            "trajectories": summary["trajectories"],
            "oracle_failures": summary["oracle_failures"],
            "steps": summary["steps"],
            "first_loss": summary["first_loss"],
            "final_loss": summary["final_loss"],
            "train_seconds": round(summary["train_seconds"], 1),
            "resumed_from_step": summary.get("resumed_from_step", 0),
            "peak_rss_mb": summary.get("peak_rss_mb"),
            "tokens_per_s": round(summary.get("tokens_per_s", 0.0), 1),
        },
        "sha256": sha,
    }
    if old.get("sha256") == sha and "evaluation" in old:
        recipe["evaluation"] = old["evaluation"]
    old_path.write_text(json.dumps(recipe, indent=2) + "\n")
    return ShippedBase(name, target, recipe)


def _list(_ns: argparse.Namespace) -> int:
    bases = shipped_bases()
    if not bases:
        print("no shipped base")
    for base in bases:
        print(base.describe())
        for row in base.recipe.get("evaluation", {}).get("rows", []):
            print(f"  {row['what']}: {row['successes']}/{row['episodes']} ({row['rate']:.1%})")
    return 0


def _verify(ns: argparse.Namespace) -> int:
    bases = [by_name(ns.name)] if ns.name else shipped_bases()
    for base in bases:
        verify(base)
        print(f"{base.name}: ok (sha256 {base.recipe['sha256']['adapter_model.safetensors']})")
    return 0


def _build(ns: argparse.Namespace) -> int:
    from trace_train.config import SFTArgs
    from trace_train.sft import run_sft

    base = by_name(ns.name)
    out = Path(ns.out or f"runs/base-build/{ns.name}")
    settings = dict(base.recipe["sft"])
    # a fit is resumable: an interrupted build continues from its last checkpoint, a finished one is reused
    args = SFTArgs(**settings, out=str(out), resume=True, save_every=1)
    summary = run_sft(args)
    new_sha = sha256_of(out / "adapter" / "adapter_model.safetensors")
    same = new_sha == base.recipe["sha256"]["adapter_model.safetensors"]
    print(
        f"{ns.name}: fit in {out} ({summary['steps']} steps, loss {summary['first_loss']:.3f} -> "
        f"{summary['final_loss']:.3f}); adapter sha256 {new_sha[:16]}.. "
        + ("equals the shipped one" if same else "differs from the shipped one (another CPU or dtype?)")
    )
    if ns.install:
        from trace_train.models import resolve_dtype

        installed = install_fit(
            ns.name, out, dtype=str(resolve_dtype(settings["dtype"])).removeprefix("torch.")
        )
        print(f"installed as {installed.directory}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    base = subparsers.add_parser("base", help="the shipped base agents: list, verify, rebuild (docs/base.md)")
    sub = base.add_subparsers(dest="base_command", required=True)
    listing = sub.add_parser("list", help="the shipped bases, their recipes and measured success")
    listing.set_defaults(func=_list)
    check = sub.add_parser("verify", help="check each shipped adapter file against its recipe's sha256")
    check.add_argument("name", nargs="?", help="one base (default: all)")
    check.set_defaults(func=_verify)
    build = sub.add_parser("build", help="refit a shipped base from its recipe (resumable)")
    build.add_argument("name", help="the shipped base, e.g. retail-v2-smollm2-135m")
    build.add_argument("--out", help="fit directory (default runs/base-build/NAME); rerun to resume")
    build.add_argument(
        "--install", action="store_true", help="replace the shipped adapter and recipe with the fit"
    )
    build.set_defaults(func=_build)
