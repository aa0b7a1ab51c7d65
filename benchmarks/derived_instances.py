"""Instances per derived env and level: unique source tasks against instances (issue 52).

    python benchmarks/derived_instances.py --label before          # the table, and its JSON under "before"
    python benchmarks/derived_instances.py --label after --verify test

A derived env's reset is a function of the source task (the target's train seed) and the prefix length
(how many oracle actions are replayed): the decision point only picks the prefix. Two sources of one task
whose prefixes are equal at a level are one instance twice: same start state, same remaining task. Per env,
split and level the table shows

* ``tasks``: distinct source tasks (target seeds) the split draws from;
* ``instances``: how many instances one cycle of seeds goes through (``seed % instances`` picks one);
* ``distinct``: distinct (task, prefix) pairs among them; ``dup`` = instances - distinct.

``--verify SPLIT`` resets every instance of SPLIT at every level through the env itself and counts distinct
episodes (``verified``): the source task's whole content (the target's ``render_instance()``, hidden state
included), the observation, the tools offered and the oracle continuation; the counts do not rest on the
(task, prefix) argument alone. ``visible`` counts them without the hidden state: BFCL's ``base_N`` and
``long_context_N`` ask the same questions with the same ground truth over different initial states (the
long-context variant's is much larger), so they open alike and are still two tasks. The JSON keeps one entry
per label, so the before and after tables sit side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym  # noqa: E402

import trace_gym  # noqa: E402, F401 - registers the ids
from trace_gym.derived import pool as pool_module  # noqa: E402
from trace_gym.derived.levels import DEFAULT_LADDER, ladder_levels, prefix_length  # noqa: E402
from trace_gym.worlds.world import canonical_json  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "derived_instances.json"


def derived_ids() -> list[str]:
    """Every registered derived env (its spec names a target and a capability)."""
    return sorted(
        env_id
        for env_id, spec in gym.registry.items()
        if env_id.startswith("trace/") and {"target_id", "capability"} <= set(spec.kwargs or {})
    )


def level_instances(env: Any, split: str, level: int) -> tuple[Any, ...]:
    """The instances one cycle of ``split``'s seeds goes through at ``level``; before issue 52's fix every
    level cycled through the whole pool (one source per decision point)."""
    raw = pool_module.sources(env.target_id, env.target_kwargs, env.capability, env.window)[split]
    per_level = getattr(pool_module, "level_sources", None)
    if per_level is None:
        return raw
    return per_level(env.target_id, env.target_kwargs, env.capability, env.window, level, env.ladder)[split]


def episode_digests(env: Any, seed: int, split: str, level: int) -> tuple[str, str]:
    """(the whole episode's digest, the digest of what the agent sees at reset and must do)."""
    obs, info = env.reset(seed=seed, options={"split": split, "difficulty": level})
    seen = {"obs": obs, "tools": info.get("tools"), "continuation": env.oracle_actions()}
    whole = {**seen, "task": env.target.render_instance()}
    return tuple(hashlib.sha256(canonical_json(d).encode()).hexdigest() for d in (whole, seen))  # type: ignore[return-value]


def measure(env_id: str, verify: tuple[str, ...]) -> dict[str, Any]:
    env = gym.make(env_id, disable_env_checker=True).unwrapped
    rows: dict[str, Any] = {}
    for split in ("train", "test"):
        for level in ladder_levels(env.ladder):
            items = level_instances(env, split, level)
            starts = {(s.target_seed, prefix_length(s.decision_point, level, env.ladder)) for s in items}
            row = {
                "tasks": len({s.target_seed for s in items}),
                "instances": len(items),
                "distinct": len(starts),
                "dup": len(items) - len(starts),
            }
            if split in verify:
                started = time.perf_counter()
                digests = [episode_digests(env, i, split, level) for i in range(len(items))]
                row["verified"] = len({whole for whole, _ in digests})
                row["visible"] = len({seen for _, seen in digests})
                row["verify_s"] = round(time.perf_counter() - started, 1)
            rows[f"{split}/{level}"] = row
    env.close()
    return rows


def table(results: dict[str, Any]) -> str:
    lines = [
        f"{'env':52} {'split':5} {'lvl':>3} {'tasks':>6} {'instances':>9} {'distinct':>8} {'dup':>5} {'verified':>8} {'visible':>7}"
    ]
    for env_id, rows in results.items():
        for key, row in rows.items():
            split, level = key.split("/")
            lines.append(
                f"{env_id:52} {split:5} {level:>3} {row['tasks']:>6} {row['instances']:>9} "
                f"{row['distinct']:>8} {row['dup']:>5} {row.get('verified', '')!s:>8} {row.get('visible', '')!s:>7}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--label", required=True, help="the JSON key these counts go under (before, after)")
    parser.add_argument("--ids", default="", help="comma-separated env ids (default: every derived env)")
    parser.add_argument(
        "--verify", default="", help="comma-separated splits whose instances are all reset and compared"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    ids = [i for i in args.ids.split(",") if i] or derived_ids()
    verify = tuple(s for s in args.verify.split(",") if s)
    started = time.perf_counter()
    results = {env_id: measure(env_id, verify) for env_id in ids}
    print(table(results))
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    data[args.label] = {
        "ladder": DEFAULT_LADDER,
        "window": pool_module.DEFAULT_WINDOW,
        "verified_splits": list(verify),
        "seconds": round(time.perf_counter() - started, 1),
        "envs": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out} [{args.label}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
