"""Issue 26's figure 5: does an adapter fitted on a target-derived env transfer to the target better than one
fitted the same way on the retired catalog env?

For each capability, two adapters from the same base, fitted the same way: the same number of oracle episodes
by SFT at level 1, then the same GRPO steps, groups and rollouts at level 1. One is fitted on
``trace/retail-<capability>-v0`` (this tree), one on the catalog's ``trace/<capability>-v0`` from the tree before
the catalog was retired (``--catalog-commit``, exported with ``git archive`` into a temporary directory). Both
fits run in a subprocess with their own tree first on ``PYTHONPATH``, so neither sees the other's code.

Then the base and every adapter play the same target test tasks that need the capability (greedy, this tree):
success, the paired difference to the base (exact McNemar), and the capability's milestone pass rate: among the
episodes that reached the capability's decision, the share whose requirement label for it is PRESENT (step 1's
labels by cause).

    python benchmarks/transfer_vs_catalog.py --policy runs/demo/01-base/sft-0/merged

Slow on a CPU (about half an hour per capability on two cores at the defaults); the CPU is printed with the
figures. Writes ``<out>/transfer.json`` (per task: success, label, outcome, turns, invalid actions) and every
episode, conversation included, to ``<out>/<capability>/episodes/<row>.jsonl``: the 2026-12 run kept only success
and labels, so why the precise-arguments adapters stopped short of the write could not be read back.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CATALOG_COMMIT = "9714355^"  # the last tree with the catalog envs (9714355 retired them)

# run in a subprocess whose PYTHONPATH starts with the tree to fit in: SFT, then GRPO from the SFT adapter
FIT = r"""
import json, sys
from trace_train.config import GRPOArgs, SFTArgs
from trace_train.grpo.trainer import GRPOTrainer
from trace_train.sft import run_sft

a = json.loads(sys.argv[1])
if a.get("derived"):  # the target-derived env on the target at the demo's difficulty (as the demo's step 2 makes it)
    from trace_gym.derived.registration import ENTRY_POINT
    from trace_gym.registration import register_env
    register_env(a["env_id"], entry_point=ENTRY_POINT, kwargs=a["derived"])
sft = run_sft(SFTArgs(env_id=a["env_id"], model=a["policy"], out=a["out"] + "/sft", episodes=a["sft_episodes"],
                      epochs=1, lr=1e-3, batch_size=2, seed_offset=a["sft_seed_offset"], max_turns=12,
                      difficulty=1, dtype=a["dtype"], micro_batch_tokens=a["sft_micro_batch_tokens"]))
# the catalog's tree predates the oracle-ceiling check (and its knob): both fits run at the same caps regardless
check = {"min_oracle_ceiling": a["min_oracle_ceiling"]} if "min_oracle_ceiling" in GRPOArgs.__dataclass_fields__ else {}
trainer = GRPOTrainer(GRPOArgs(env_id=a["env_id"], model=a["policy"], out=a["out"] + "/grpo",
                               init_adapter=sft["adapter"], steps=a["grpo_steps"], groups_per_step=2, group_size=4,
                               difficulty=1, max_turns=a["max_turns"], max_new_tokens=a["max_new_tokens"],
                               micro_batch_size=4, lr=1e-4, dtype=a["dtype"], save_every=0, seed=0,
                               tensorboard=False, progress=False, **check))
trainer.train()
trainer.policy.model.save_pretrained(a["out"] + "/adapter")
print(json.dumps({"sft_first_loss": sft.get("first_loss"), "sft_final_loss": sft.get("final_loss"),
                  "grpo_rollouts": trainer.state["rollouts"], "grpo_steps": trainer.state["step"]}))
"""


def export_tree(commit: str, into: Path) -> Path:
    """``git archive`` of ``commit`` unpacked under ``into`` (the repository's own history, no network)."""
    archive = into / "tree.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(REPO), "archive", commit], stdout=f, check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def fit(
    tree: Path, code: str, env_id: str, out: Path, ns: argparse.Namespace, derived: dict | None = None
) -> dict[str, Any]:
    """SFT then GRPO on ``env_id`` with ``tree``'s code (recorded as ``code``: a commit, not the temporary
    directory it was unpacked in); the adapter lands in ``out/adapter``. ``derived``: register ``env_id`` first
    as the target-derived env with these keyword arguments."""
    if (out / "fit.json").is_file() and (
        out / "adapter"
    ).is_dir():  # reused: a rerun evaluates the same adapters
        return json.loads((out / "fit.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    args = {
        "env_id": env_id,
        "policy": ns.policy,
        "out": str(out),
        "sft_episodes": ns.sft_episodes,
        "sft_seed_offset": ns.sft_seed_offset,
        "grpo_steps": ns.grpo_steps,
        "max_new_tokens": ns.max_new_tokens,
        "max_turns": ns.max_turns,
        "min_oracle_ceiling": ns.min_oracle_ceiling,
        "dtype": ns.dtype,
        "sft_micro_batch_tokens": ns.sft_micro_batch_tokens,
        "derived": derived,
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-c", FIT, json.dumps(args)], cwd=tree, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        why = f"exit status {done.returncode}"
        if done.returncode < 0:  # killed by a signal; SIGKILL with no traceback is the kernel's OOM killer
            why = f"killed by signal {-done.returncode}" + (
                " (out of memory?)" if done.returncode == -9 else ""
            )
        raise RuntimeError(f"fitting {env_id} ({code}) failed, {why}:\n{done.stderr[-4000:]}")
    result = {**json.loads(done.stdout.strip().splitlines()[-1]), "env_id": env_id, "code": code}
    result["wall_s"] = round(time.time() - started, 1)
    (out / "fit.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def play(
    policy_dir: str, adapter: str | None, target: str, specs: list[Any], ns: argparse.Namespace
) -> list[dict]:
    from trace_train.episodes import run_episodes
    from trace_train.policy_factory import make_policy
    from trace_train.rollout import SamplingConfig

    policy = make_policy(policy_dir, adapter=adapter, dtype=ns.dtype)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=ns.max_new_tokens)
    return run_episodes(policy, target, specs, sampling, max_turns=ns.max_turns, batch_size=16)


def summarise(records: list[dict], capability: str, keep: Path) -> dict[str, Any]:
    """Success per task, how each episode ended (outcome, turns, invalid actions: where an adapter stops short),
    and the capability's milestone pass rate (PRESENT among episodes that reached it). The whole episodes,
    conversations included, are written to ``keep`` (JSONL)."""
    from trace_gym.records import milestone_pass

    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {
        "success": [float(r["reward"]) >= 1.0 for r in records],
        "labels": [(r.get("requirements") or {}).get(capability, "NA") for r in records],
        "outcomes": [r.get("outcome") for r in records],
        "turns": [r.get("turns") for r in records],
        "invalid_actions": [r.get("invalid_actions") for r in records],
        "milestone_pass": milestone_pass(records, capability),
        "episodes": str(keep),
    }


def paired(base: list[bool], arm: list[bool]) -> dict[str, Any]:
    from trace_train.stats import mcnemar_exact

    test = mcnemar_exact(arm, base)
    gained = sum(1 for b, a in zip(base, arm, strict=True) if a and not b)
    lost = sum(1 for b, a in zip(base, arm, strict=True) if b and not a)
    return {
        "gained": gained,
        "lost": lost,
        "p_value": test["p_value"],
        "diff": (sum(arm) - sum(base)) / len(base),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", required=True, help="the base agent (the demo's warm-started model directory)")
    p.add_argument("--capabilities", default="policy-adherence,precondition-checking")
    p.add_argument("--target", default="trace/retail-v2")
    p.add_argument("--target-difficulty", type=int, default=1, help="the demo's target difficulty")
    p.add_argument("--catalog-commit", default=CATALOG_COMMIT)
    p.add_argument("--sft-episodes", type=int, default=24, help="oracle episodes of each env (the demo's 24)")
    p.add_argument("--sft-seed-offset", type=int, default=100_000, help="first train task of the SFT fit")
    p.add_argument("--grpo-steps", type=int, default=2, help="GRPO steps of 2 groups x 4 (the demo's 2)")
    p.add_argument("--eval", type=int, default=32, help="target test tasks that need the capability")
    # caps the retail oracle fits (trace_train/ceiling.py: writes up to 159 SmolLM2 tokens, up to 10 turns), for
    # the GRPO fits and the evaluation alike; 96 / 8 cut the oracle on a third to a half of the tasks
    p.add_argument("--max-new-tokens", type=int, default=192, help="tokens per turn (GRPO and evaluation)")
    p.add_argument("--max-turns", type=int, default=12, help="agent turns (GRPO and evaluation)")
    p.add_argument(
        "--min-oracle-ceiling", type=float, default=0.9, help="GRPO's refusal (0: off, e.g. tiny models)"
    )
    p.add_argument(
        "--sft-micro-batch-tokens",
        type=int,
        default=1024,
        help="SFT tokens per forward/backward (memory: ~1.2 GB per 1,000 in bf16; both fits alike)",
    )
    p.add_argument("--dtype", default="auto")
    p.add_argument("--out", default="benchmarks/results/transfer_vs_catalog")
    ns = p.parse_args(argv)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    from grpo_arms import cpu_name, target_test_specs  # the sibling benchmark (its folder is on sys.path)

    this_commit = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    started = time.time()
    document: dict[str, Any] = {"cpu": cpu_name(), "settings": vars(ns), "capabilities": {}}
    with tempfile.TemporaryDirectory(prefix="trace-catalog-") as tmp:
        catalog_tree = export_tree(ns.catalog_commit, Path(tmp))
        for capability in ns.capabilities.split(","):
            # the derived env on the target at the difficulty the adapters are evaluated at (the committed
            # trace/retail-<capability>-v0 uses the target's default difficulty 2; the demo's step 2 uses its own)
            derived = {
                "target_id": ns.target,
                "capability": capability,
                "target_kwargs": {"difficulty": ns.target_difficulty},
            }
            envs = {
                "derived": (
                    REPO,
                    this_commit,
                    f"trace/retail-{capability}-d{ns.target_difficulty}-v0",
                    derived,
                ),
                "catalog": (catalog_tree, ns.catalog_commit, f"trace/{capability}-v0", None),
            }
            fits = {
                name: fit(tree, code, env_id, out / capability / name, ns, kwargs)
                for name, (tree, code, env_id, kwargs) in envs.items()
            }
            specs = target_test_specs(ns.target, capability, ns.eval, ns.target_difficulty)
            rows: dict[str, dict[str, Any]] = {}
            for name in ("base", *envs):
                adapter = None if name == "base" else str(out / capability / name / "adapter")
                records = play(ns.policy, adapter, ns.target, specs, ns)
                rows[name] = summarise(records, capability, out / capability / "episodes" / f"{name}.jsonl")
                if name != "base":
                    rows[name]["paired_vs_base"] = paired(rows["base"]["success"], rows[name]["success"])
            document["capabilities"][capability] = {
                "fits": fits,
                "test_seeds": [s.seed for s in specs],
                "rows": rows,
            }
            print(f"\n{capability}: {len(specs)} target test tasks ({document['cpu']})")
            print("| adapter fitted on | success | paired vs base (+/-, McNemar p) | milestone pass |")
            print("|---|---|---|---|")
            for name, row in rows.items():
                vs = row.get("paired_vs_base")
                vs_text = f"+{vs['gained']}/-{vs['lost']} (p {vs['p_value']:.3f})" if vs else "-"
                passed, reached = row["milestone_pass"]
                print(
                    f"| {name} | {sum(row['success'])}/{len(specs)} | {vs_text} | {passed}/{reached} |",
                    flush=True,
                )
            # after each capability: a run stopped during the next one keeps this one's figures
            document["wall_s"] = round(time.time() - started, 1)
            (out / "transfer.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    document["wall_s"] = round(time.time() - started, 1)
    (out / "transfer.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"wrote {out / 'transfer.json'} ({document['wall_s']} s)")


if __name__ == "__main__":
    main()
