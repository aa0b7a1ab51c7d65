"""CLI subcommands that run a model: ``trace train``, ``sft``, ``evaluate``, ``rollout`` (registered by
``trace_train.cli``).

Flags are generated from the argument dataclasses (``GRPOArgs``, ``SFTArgs``, ``RolloutArgs``, ``EngineArgs``)
so that the CLI and the Python API can never drift apart: ``--group-size 8`` is ``GRPOArgs.group_size = 8``.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from trace_train.config import CHOICES, EngineArgs, add_dataclass_flags, from_namespace

console = Console()


def cmd_train(ns: argparse.Namespace) -> int:
    from trace_gym.openai_client import OpenAIError
    from trace_train.grpo.checkpoint import CheckpointError
    from trace_train.grpo.trainer import GRPOArgs, train
    from trace_train.policies.remote_generation import RemoteGenerationError

    try:
        args = from_namespace(GRPOArgs, ns)  # bad flag values are ValueErrors naming the flag
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
        summary = run_sft(from_namespace(SFTArgs, ns))
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
    from trace_train.policies.factory import make_policy

    return make_policy(
        ns.model,
        adapter=ns.adapter,
        base_url=ns.base_url,
        dtype=ns.dtype,
        engine=getattr(ns, "engine", None),
        tool_format=getattr(ns, "tool_format", None),
    )


def cmd_rollout(ns: argparse.Namespace) -> int:
    from trace_train.base_rollouts import RolloutArgs, rollout

    try:
        args = from_namespace(RolloutArgs, ns)
        with console.status(f"rolling out {args.model} on {args.env_id}") as status:
            summary = rollout(args, lambda done, total: status.update(f"{done}/{total} episodes written"))
    except (ValueError, FileNotFoundError) as err:  # RolloutError, refused splits and bad arguments
        print(f"error: {err}", file=sys.stderr)
        return 2
    rate = summary.passed / summary.written if summary.written else 0.0
    console.print(
        f"{summary.written} episodes written to {summary.path} ({summary.skipped} already there), "
        f"{summary.passed} passed ({rate:.1%}), {summary.seconds:.1f} s",
        markup=False,
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from trace_train.base_rollouts import RolloutArgs
    from trace_train.config import GRPOArgs, SFTArgs

    train = subparsers.add_parser(
        "train", help="seed-grouped GRPO: train a LoRA adapter on any chat/text Gymnasium env"
    )
    train.add_argument("env_id", help="Gymnasium id, e.g. trace/retail-v1 or module:ns/name-v0")
    add_dataclass_flags(train, GRPOArgs, skip={"env_id"})
    train.set_defaults(func=cmd_train)

    sft = subparsers.add_parser("sft", help="supervised warm start on oracle trajectories of the train split")
    sft.add_argument("env_id")
    add_dataclass_flags(sft, SFTArgs, skip={"env_id"})
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
    add_dataclass_flags(ev, EngineArgs)
    ev.add_argument("--out", default=None, help="trajectories JSONL (default runs/eval/<env>-<split>.jsonl)")
    ev.add_argument(
        "--resume",
        action="store_true",
        help="keep the episodes --out already holds for these tasks and run only the rest (each episode is "
        "appended as it finishes)",
    )
    ev.add_argument("--json", action="store_true", help="also print the summary as JSON")
    ev.set_defaults(func=cmd_evaluate)

    ro = subparsers.add_parser(
        "rollout", help="step 1: base-agent trajectories on a target's train split (JSONL)"
    )
    ro.add_argument("env_id", help="Gymnasium id, e.g. trace/retail-v1")
    ro.add_argument(
        "--model",
        required=True,
        help="local model path or alias (smollm2-135m), a served model name with --base-url, "
        "or a scripted agent: oracle, oracle-without:CAPABILITY",
    )
    ro.add_argument("--out", required=True, help="output dir (trajectories.jsonl, rollout.json)")
    add_dataclass_flags(ro, RolloutArgs, skip={"env_id", "model", "out"})
    ro.set_defaults(func=cmd_rollout)
    # `trace demo` is the pipeline's (trace_train.pipeline.commands); the learning demo is its configs/arith.toml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trace_train.commands")
    register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
