"""CLI subcommands ``trace compose`` (train the gates, write the artefact) and ``trace compare``.

Flags come from the dataclasses (``ComposeArgs``, ``CompareArgs``): ``--balance-weight 0.02`` is
``ComposeArgs.balance_weight = 0.02``. Registered by ``trace_train.cli``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def cmd_compose(ns: argparse.Namespace) -> int:
    from trace_train.compose.config import ComposeArgs
    from trace_train.compose.model import CompositionError
    from trace_train.compose.train import compose
    from trace_train.grpo.checkpoint import CheckpointError

    args = ComposeArgs(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(ComposeArgs)})
    try:
        result = compose(args)
    except (CompositionError, CheckpointError, FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}, indent=2))
    print(f"composition written to {args.out} (manifest.json, gates.safetensors, adapters/)")
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    from trace_train.compose.compare import compare
    from trace_train.compose.config import CompareArgs
    from trace_train.compose.model import CompositionError

    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(CompareArgs)}
    values["models"] = [m.strip() for m in ns.models.split(",") if m.strip()]
    try:
        report = compare(CompareArgs(**values))
    except (CompositionError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from trace_train.compose.compare import markdown_table

    print(markdown_table(report))
    print(
        f"written to {ns.out}/compare.md, compare.html, compare.json"
        + (", gate_choices.png" if report.get("gate_chart") else "")
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from trace_train.compose.config import CompareArgs, ComposeArgs
    from trace_train.config import add_dataclass_flags

    comp = subparsers.add_parser(
        "compose",
        help="train token-level top-1 gates over capability LoRA adapters (backbone and adapters frozen)",
    )
    comp.add_argument(
        "--adapters", nargs="+", required=True, help="PEFT adapter dirs or `trace train` run dirs"
    )
    comp.add_argument(
        "--envs", nargs="+", required=True, help="the capability env of each adapter (same order)"
    )
    comp.add_argument("--names", nargs="+", default=[], help="slot names (default: the env ids' names)")
    add_dataclass_flags(comp, ComposeArgs, skip={"adapters", "envs", "names"})
    comp.set_defaults(func=cmd_compose)

    cmp = subparsers.add_parser(
        "compare", help="paired evaluation of base, adapters, task router and composed MoE on a target"
    )
    cmp.add_argument("target", help="target env id, e.g. trace/retail-v2")
    cmp.add_argument("--composition", required=True, help="artefact directory written by `trace compose`")
    cmp.add_argument(
        "--models",
        default="base,adapters,router,moe",
        help="comma-separated: base, adapters (all), an adapter's name, router, moe, uniform, arrow, xlora",
    )
    add_dataclass_flags(cmp, CompareArgs, skip={"target", "composition", "models"})
    cmp.set_defaults(func=cmd_compare)
