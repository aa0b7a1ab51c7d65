"""Hand-written mutants of the trainer, the engine, the splits and the reasoning-gym grader (issue 31).

Each mutant is a bug the fast suite claims to catch. The script copies the working tree (``git ls-files``) to
a temporary folder once per mutant, applies the edit there (the checkout is never touched), runs only the test
files that should catch it, and prints a table: a mutant is *killed* when those tests fail. Exit status 1 when
any mutant survives (or an edit no longer applies: the code it targets moved, so the list needs updating).

    python benchmarks/mutants.py            # every mutant
    python benchmarks/mutants.py -k advantage
    tox -e mutants

The copy is imported ahead of the editable install (pytest runs from its root), so the mutated modules are the
ones tested; each run checks that.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]  # (file, exact old text, new text); old must occur exactly once
    tests: tuple[str, ...]


MUTANTS = (
    Mutant(
        "advantage_sign",
        "GRPOTrainer.optimise passes -A to the loss",
        (
            (
                "trace_train/grpo/trainer.py",
                "logp, old_logp, adv[idx].to(logp.device), w, norm, cfg",
                "logp, old_logp, -adv[idx].to(logp.device), w, norm, cfg",
            ),
        ),
        ("tests/train/test_trainer_reference.py", "tests/train/test_trainer_correctness.py"),
    ),
    Mutant(
        "clip_min",
        "the clipped objective's min(unclipped, clipped) replaced by the clipped term",
        (
            (
                "trace_train/grpo/losses.py",
                "per_token = -torch.minimum(unclipped, clipped)",
                "per_token = -clipped",
            ),
        ),
        ("tests/train/test_grpo_math.py",),
    ),
    Mutant(
        "metrics_divisor",
        "the reported loss is sum(losses) / planned updates, not the mean over the minibatches run",
        (("trace_train/grpo/trainer.py", '"loss": _mean(losses),', '"loss": sum(losses) / n_updates,'),),
        ("tests/train/test_trainer_correctness.py",),
    ),
    Mutant(
        "prefill_positions",
        "the cached engine's prefill positions restart at 0 from turn 2 on",
        (
            (
                "trace_train/engine/cached.py",
                "        else:\n            self._follow(active, prompts)\n",
                "        else:\n            self._follow(active, prompts)\n            self.cache.restart = True\n",
            ),
            (
                "trace_train/engine/cached.py",
                "    start = cache.positions()\n",
                "    start = cache.positions() * 0 if getattr(cache, 'restart', False) else cache.positions()\n",
            ),
        ),
        ("tests/train/test_engine.py",),
    ),
    Mutant(
        "train_prefix_positions",
        "training log-probs: the tokens after the shared prefix get positions from 0 (not from the prefix end)",
        (
            (
                "trace_train/grpo/logprobs.py",
                "pos[r, col : col + n] = torch.arange(shared, shared + n)",
                "pos[r, col : col + n] = torch.arange(0, n)",
            ),
        ),
        ("tests/train/test_logprobs.py",),
    ),
    Mutant(
        "split_key",
        "reasoning-gym envs split by the raw question text instead of the canonical task key",
        (
            (
                "trace_gym/adapters/reasoning_gym.py",
                "draw, lambda drawn: self._key(drawn[2]), self.split, self.test_share",
                "draw, lambda drawn: str(drawn[2]['question']), self.split, self.test_share",
            ),
        ),
        ("tests/test_reasoning_gym_adapter.py", "tests/test_splits.py"),
    ),
    Mutant(
        "split_key_text",
        "arithmetic task keys back to the expression's text (v1): one task in two forms lands on both sides",
        (
            (
                "trace_gym/adapters/reasoning_gym.py",
                '"basic_arithmetic": lambda e: expression_key(str(e["metadata"]["expression"])),',
                '"basic_arithmetic": lambda e: " ".join(str(e["metadata"]["expression"]).split()),',
            ),
        ),
        ("tests/test_reasoning_gym_adapter.py", "tests/test_splits.py"),
    ),
    Mutant(
        "rg_partial_credit",
        "reasoning-gym answers graded by the dataset's partial-credit score_answer again",
        (
            (
                "trace_gym/adapters/reasoning_gym.py",
                "        return self._exact(answer)\n",
                "        return float(self.dataset.score_answer(answer, self.entry))\n",
            ),
        ),
        ("tests/test_reasoning_gym_adapter.py",),
    ),
)


def _copy_tree(dest: Path) -> None:
    if not (ROOT / ".git").exists():  # a plain copy of the tree (no git): everything but caches
        ignore = shutil.ignore_patterns("__pycache__", ".tox", ".pytest_cache", "*.egg-info", ".venv")
        shutil.copytree(ROOT, dest, ignore=ignore)
        return
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _apply(tree: Path, mutant: Mutant) -> str | None:
    for rel, old, new in mutant.edits:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            return f"{rel}: the text to mutate occurs {text.count(old)} times (expected once)"
        path.write_text(text.replace(old, new))
    return None


def _pytest(
    tree: Path, tests: tuple[str, ...], timeout: float, stop_early: bool = True
) -> tuple[int, str, float]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.setdefault("TRACE_CACHE", str(tree / ".trace-cache"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-m 'not slow'"]
    if stop_early:
        cmd.append("-x")
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [*cmd, *tests], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return 124, "timed out", time.perf_counter() - t0
    return out.returncode, out.stdout + out.stderr, time.perf_counter() - t0


def _failures(log: str) -> str:
    failed = [
        line.removeprefix("FAILED ").split(" - ")[0]
        for line in log.splitlines()
        if line.startswith("FAILED ")
    ]
    return "; ".join(failed)


def _check_import(tree: Path) -> None:
    code = "import trace_train, trace_gym, sys; print(trace_train.__file__)"
    got = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    if not got.stdout.strip().startswith(str(tree)):
        raise SystemExit(f"the copy is not what gets imported: {got.stdout}{got.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-k", default="", help="run only mutants whose name contains this")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's test run")
    parser.add_argument("--baseline", action="store_true", help="also run the tests on the unmutated copy")
    parser.add_argument(
        "--all-killers",
        action="store_true",
        help="run every listed test (not -x): name every test that fails",
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.k in m.name]
    rows = []
    with tempfile.TemporaryDirectory(prefix="trace-mutants-") as tmp:
        pristine = Path(tmp) / "pristine"
        _copy_tree(pristine)
        _check_import(pristine)
        if args.baseline:
            tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
            rc, log, secs = _pytest(pristine, tests, args.timeout)
            print(f"baseline (unmutated): {'pass' if rc == 0 else 'FAIL'} in {secs:.0f} s", flush=True)
            if rc != 0:
                print(log[-3000:])
                return 1
        for mutant in chosen:
            tree = Path(tmp) / mutant.name
            shutil.copytree(pristine, tree)
            problem = _apply(tree, mutant)
            if problem:
                rows.append((mutant, "NOT APPLIED", problem, 0.0))
                continue
            rc, log, secs = _pytest(tree, mutant.tests, args.timeout, stop_early=not args.all_killers)
            if rc == 1:
                rows.append((mutant, "killed", _failures(log), secs))
            elif rc == 0:
                rows.append((mutant, "SURVIVED", "", secs))
            else:
                rows.append(
                    (mutant, f"error rc={rc}", log.strip().splitlines()[-1] if log.strip() else "", secs)
                )
            print(f"{mutant.name}: {rows[-1][1]} ({secs:.0f} s) {rows[-1][2]}", flush=True)
            shutil.rmtree(tree, ignore_errors=True)
    print()
    print(
        f"| {'mutant':<22} | {'result':<11} | {'seconds':>7} | killed by (failing tests; the first only without --all-killers) |"
    )
    print(f"|{'-' * 24}|{'-' * 13}|{'-' * 9}|{'-' * 32}|")
    for mutant, result, by, secs in rows:
        print(f"| {mutant.name:<22} | {result:<11} | {secs:>7.0f} | {by} |")
    return 0 if all(r[1] == "killed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
