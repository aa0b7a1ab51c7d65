"""CLI subcommands ``trace train``, ``trace sft`` and ``trace evaluate`` (registered by ``trace_gym.cli``).

``train`` and ``sft`` flags are generated from the argument dataclasses (``GRPOArgs``, ``SFTArgs``) so that
the CLI and the Python API can never drift apart: ``--group-size 8`` is ``GRPOArgs.group_size = 8``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from typing import Any

from trace_train.config import DTYPES

CHOICES = {
    "loss_type": ["grpo", "dr_grpo", "dapo"],
    "dtype": list(DTYPES),
    "engine": ["cached", "simple"],  # rollout engine (issue 9)
    "tool_format": ["json", "compact"],
}


def _add_dataclass_flags(parser: argparse.ArgumentParser, cls: type, skip: set[str]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        tp = hints[f.name]
        args = typing.get_args(tp)
        base = next((a for a in args if a is not type(None)), tp) if args else tp
        if base is bool:
            if default:
                parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false")
            else:
                parser.add_argument(flag, dest=f.name, action="store_true")
        elif typing.get_origin(base) is list or base is list:
            parser.add_argument(flag, dest=f.name, nargs="+", default=default, help=f"default: {default}")
        else:
            conv = base if base in (int, float, str) else str
            parser.add_argument(
                flag,
                dest=f.name,
                type=conv,
                default=default,
                choices=CHOICES.get(f.name),
                help=f"default: {default}",
            )


def _build(cls: type, ns: argparse.Namespace) -> Any:
    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls) if hasattr(ns, f.name)}
    return cls(**values)


def cmd_train(ns: argparse.Namespace) -> int:
    from trace_gym.openai_client import OpenAIError
    from trace_train.grpo.checkpoint import CheckpointError
    from trace_train.grpo.trainer import GRPOArgs, train
    from trace_train.policies.remote_generation import RemoteGenerationError

    try:
        args = _build(GRPOArgs, ns)  # bad flag values are ValueErrors naming the flag
        result = train(args)
    except (CheckpointError, FileNotFoundError, RemoteGenerationError, OpenAIError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, int | float | str)}, indent=2))
    print(f"adapter written to {args.out}/adapter")
    return 0


def cmd_sft(ns: argparse.Namespace) -> int:
    from trace_train.sft import SFTArgs, run_sft

    try:
        summary = run_sft(_build(SFTArgs, ns))
    except (FileNotFoundError, RuntimeError, ValueError) as e:  # ValueError: bad flags, test seeds
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


def cmd_evaluate(ns: argparse.Namespace) -> int:
    from trace_train.evaluate import evaluate
    from trace_train.metrics import peak_rss_mb
    from trace_train.policies.base import SamplingConfig

    sampling = SamplingConfig(temperature=ns.temperature, max_new_tokens=ns.max_new_tokens)
    try:
        policy = _make_policy(ns)
    except (FileNotFoundError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = ns.out or f"runs/eval/{ns.env_id.replace('/', '_').replace(':', '_')}-{ns.split}.jsonl"
    try:
        result = evaluate(
            policy,
            ns.env_id,
            episodes=ns.episodes,
            split=ns.split,
            sampling=sampling,
            max_turns=ns.max_turns,
            batch_size=ns.batch_size,
            seed_offset=ns.seed_offset,
            difficulty=ns.difficulty,
            out_jsonl=out,
            max_total_tokens=ns.max_total_tokens,
            resume=ns.resume,
        )
    except ValueError as e:  # bad flag values, seeds outside the split
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(result.line())
    print(f"trajectories written to {out}")
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    if ns.json:
        print(json.dumps(result.summary()))
    return 0


def _make_policy(ns: argparse.Namespace):
    if ns.base_url:  # generation on an OpenAI-compatible server; --adapter names a hot-loaded LoRA there
        from trace_train.policies.openai_http import OpenAIHTTPPolicy

        return OpenAIHTTPPolicy(model=ns.model, base_url=ns.base_url, lora_name=ns.adapter)
    from trace_train.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(ns.model, adapter=ns.adapter, dtype=ns.dtype)
    return policy.configure(engine=getattr(ns, "engine", None), tool_format=getattr(ns, "tool_format", None))


def register(subparsers: argparse._SubParsersAction) -> None:
    from trace_train.config import GRPOArgs, SFTArgs

    train = subparsers.add_parser(
        "train", help="seed-grouped GRPO: train a LoRA adapter on any chat/text Gymnasium env"
    )
    train.add_argument("env_id", help="Gymnasium id, e.g. trace/retail-v1 or module:ns/name-v0")
    _add_dataclass_flags(train, GRPOArgs, skip={"env_id"})
    train.set_defaults(func=cmd_train)

    sft = subparsers.add_parser("sft", help="supervised warm start on oracle trajectories of the train split")
    sft.add_argument("env_id")
    _add_dataclass_flags(sft, SFTArgs, skip={"env_id"})
    sft.set_defaults(func=cmd_sft)

    ev = subparsers.add_parser(
        "evaluate", help="success rate and mean reward with 95%% CIs on held-out seeds"
    )
    ev.add_argument("env_id")
    ev.add_argument("--model", default="smollm2-135m", help="alias, local HF dir, or served model name")
    ev.add_argument(
        "--adapter",
        default=None,
        help="PEFT adapter directory (trace train/sft output); with --base-url, the served LoRA name",
    )
    ev.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (vLLM, llama.cpp) instead")
    ev.add_argument("--episodes", type=int, default=50)
    ev.add_argument("--split", default="test", choices=["train", "test"])
    ev.add_argument("--seed-offset", type=int, default=0)
    ev.add_argument("--difficulty", type=int, default=None)
    ev.add_argument("--max-turns", type=int, default=8)
    ev.add_argument("--max-new-tokens", type=int, default=256)
    ev.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ev.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="episodes decoded together; a finished episode's slot starts the next one at once (continuous "
        "batching; default: 32)",
    )
    ev.add_argument(
        "--max-total-tokens",
        type=int,
        default=32768,
        help="cut a conversation past this many tokens (default: 32768; the env's turn limit normally ends it)",
    )
    ev.add_argument("--dtype", default="float32", choices=CHOICES["dtype"])
    ev.add_argument(
        "--engine",
        default="cached",
        choices=CHOICES["engine"],
        help="cached: KV cache per conversation + shared prefix; simple: one generate call per turn",
    )
    ev.add_argument("--tool-format", default="json", choices=CHOICES["tool_format"])
    ev.add_argument("--out", default=None, help="trajectories JSONL (default runs/eval/<env>-<split>.jsonl)")
    ev.add_argument(
        "--resume",
        action="store_true",
        help="keep the episodes --out already holds for these tasks and run only the rest (each episode is "
        "appended as it finishes)",
    )
    ev.add_argument("--json", action="store_true", help="also print the summary as JSON")
    ev.set_defaults(func=cmd_evaluate)
    # `trace demo` is the pipeline's (trace_train.pipeline.commands); the learning demo is its configs/arith.toml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trace_train.commands")
    register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
