"""Issue 28's figures: scripted weak agents on 200 train tasks of trace/retail-v2, analysed by `trace analyze`.

    python benchmarks/bench_weak_agents.py [--episodes 200] [--out runs/weak_agents]

Prints the table of docs/analysis.md ("Scripted weak agents") and writes every rollout and analysis under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.analysis import weak_agents as w  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--out", default="runs/weak_agents")
    args = parser.parse_args()
    out = Path(args.out)
    rows = [w.ablated(c, args.episodes, out) for c in w.ABLATED]
    rows += [w.stopped(k, args.episodes, out) for k in w.STOPS]
    rows.append(w.wrong_id(args.episodes, out))
    rows += [w.mixture(parts, args.episodes, out) for parts in w.MIXTURES]
    print(w.table(rows))
    (out / "weak_agents.json").write_text(json.dumps([row.__dict__ for row in rows], indent=1) + "\n")


if __name__ == "__main__":
    main()
