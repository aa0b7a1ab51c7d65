"""Layer figures of issue 25: upward imports, package 2-cycles, and the walk of a target env id through step 1.

    pip install import-linter            # brings grimp
    python benchmarks/layers.py          # import graph of this checkout
    python benchmarks/layers.py --walk   # also profile `trace rollout` (oracle) + `trace analyze` on retail

The walk counts the distinct caller -> callee edges between project functions that cross the trace_gym /
trace_train boundary while the env id travels through step 1; upward ones (trace_gym calling trace_train) break
the layering.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def import_graph() -> None:
    import grimp

    graph = grimp.build_graph("trace_gym", "trace_train", "generated_envs", include_external_packages=False)
    up = [
        (m, i)
        for m in sorted(graph.modules)
        if m.startswith("trace_gym")
        for i in sorted(graph.find_modules_directly_imported_by(m))
        if i.startswith("trace_train")
    ]
    print(f"upward imports trace_gym -> trace_train: {len(up)}")
    for m, i in up:
        print(f"  {m} -> {i}")

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for m in graph.modules:
        for i in graph.find_modules_directly_imported_by(m):
            if package(m) != package(i):
                edges.setdefault(package(m), set()).add(package(i))
    cycles = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
    print(f"2-cycles between subpackages: {len(cycles)}")
    for a, b in cycles:
        print(f"  {a} <-> {b}")


def walk(env_id: str) -> None:
    from trace_train.cli import main

    edges: set[tuple[str, str, str, str]] = set()

    def layer(filename: str) -> str | None:
        top = os.path.relpath(filename, ROOT).split(os.sep)[0]
        return top if top in ("trace_gym", "trace_train") else None

    def profile(frame, event, _arg):
        caller = frame.f_back
        if event != "call" or caller is None:
            return
        a, b = layer(caller.f_code.co_filename), layer(frame.f_code.co_filename)
        if a and b and a != b:
            edges.add((a, caller.f_code.co_name, b, frame.f_code.co_name))

    out = tempfile.mkdtemp()
    sys.setprofile(profile)
    try:
        main(["rollout", env_id, "--model", "oracle", "--episodes", "4", "--out", f"{out}/rollouts"])
        main(["analyze", f"{out}/rollouts", "--out", f"{out}/analysis"])
    finally:
        sys.setprofile(None)
    up = sorted(e for e in edges if e[0] == "trace_gym")
    print(f"walk of {env_id} through step 1: {len(edges)} distinct crossing edges, {len(up)} upward")
    for e in up:
        print("  upward:", *e)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", action="store_true")
    parser.add_argument("--env-id", default="trace/retail-v2")
    args = parser.parse_args()
    import_graph()
    if args.walk:
        walk(args.env_id)
