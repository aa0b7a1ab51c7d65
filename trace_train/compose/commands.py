"""CLI subcommands ``trace compose`` (train the gates, write the artefact), ``trace compare`` and ``trace explain``.

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


def cmd_explain(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from trace_train.compose import explain
    from trace_train.compose.artefact import load_composition
    from trace_train.compose.baselines import MoEPolicy
    from trace_train.compose.model import CompositionError

    if Path(ns.composition).is_file() and Path(ns.episodes).is_dir():
        print(
            f"error: the arguments look swapped: {ns.composition} is a file and {ns.episodes} a directory; "
            f"the composition artefact (a directory) comes first: trace explain {ns.episodes} {ns.composition} "
            f"--seed {ns.seed}",
            file=sys.stderr,
        )
        return 2
    try:
        record = explain.read_episode(ns.episodes, ns.seed)
        turn = ns.turn
        if ns.against:
            other = explain.read_episode(ns.against, ns.seed)
            turn = explain.first_divergence(record, other)
            if turn is None:
                print(f"the two episodes of seed {ns.seed} have the same assistant turns: nothing to explain")
                return 0
        comp, tokenizer, _ = load_composition(ns.composition, dtype=ns.dtype)
        comp.model.eval()
        policy = MoEPolicy(comp, tokenizer).configure(tool_format=ns.tool_format)
        result = explain.explain_turn(comp, policy, record, turn)
    except (CompositionError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(explain.to_markdown(result) if ns.full else explain.summary(result))
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps(explain.to_json(result), indent=1) + "\n", encoding="utf-8")
        print(f"written to {ns.json_out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from trace_train.compose.config import CompareArgs, ComposeArgs
    from trace_train.config import TOOL_FORMATS, add_dataclass_flags

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

    exp = subparsers.add_parser(
        "explain",
        help="which slot each layer's gate chose for every token of one recorded turn, and what each slot "
        "alone would have written there",
    )
    exp.add_argument(
        "composition", help="artefact directory written by `trace compose` (or a run's 07-gates)"
    )
    exp.add_argument("episodes", help="JSONL episode records (e.g. a run's 08-evaluation/base.jsonl)")
    exp.add_argument("--seed", type=int, required=True, help="the task's seed in the episode file")
    exp.add_argument("--turn", type=int, default=0, help="assistant turn to replay (0 = the first)")
    exp.add_argument(
        "--against",
        default=None,
        help="a second episode file: replay the first assistant turn where its episode of --seed differs",
    )
    exp.add_argument("--dtype", default=None, help="model dtype (default: the artefact's)")
    exp.add_argument(
        "--tool-format", default="json", choices=list(TOOL_FORMATS), help="as the episodes were played"
    )
    exp.add_argument("--full", action="store_true", help="print the per-token table, not only the summary")
    exp.add_argument("--json-out", default=None, help="write every token's figures to this JSON file")
    exp.set_defaults(func=cmd_explain)
