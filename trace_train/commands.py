"""CLI subcommands that run a model: ``trace train``, ``sft``, ``evaluate``, ``rollout`` (registered by
``trace_train.cli``).

Flags are generated from the argument dataclasses (``GRPOArgs``, ``SFTArgs``, ``RolloutArgs``, ``EngineArgs``)
so that the CLI and the Python API can never drift apart: ``--group-size 8`` is ``GRPOArgs.group_size = 8``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trace_gym.console import make_console
from trace_train.config import add_dataclass_flags, from_namespace

console = make_console()


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
        args = from_namespace(SFTArgs, ns)
        with console.status(f"trace sft {args.env_id}: loading {args.model}") as status:
            summary = run_sft(args, progress=lambda line: status.update(f"trace sft {args.env_id}: {line}"))
    except (FileNotFoundError, RuntimeError, ValueError) as e:  # ValueError: bad flags, test seeds
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


def cmd_evaluate(ns: argparse.Namespace) -> int:
    from trace_gym.openai_client import OpenAIError
    from trace_gym.registration import use_target_difficulty
    from trace_train.config import EvalSettings, EvaluateArgs, settings_of
    from trace_train.evaluate import evaluate
    from trace_train.metrics import peak_rss_mb
    from trace_train.policies.remote_generation import RemoteGenerationError
    from trace_train.policy_factory import policy_from_args, release
    from trace_train.roofline import format_account

    try:
        args = from_namespace(EvaluateArgs, ns)
        use_target_difficulty(args.env_id, args.target_difficulty)
        policy = policy_from_args(args)
    except (FileNotFoundError, ImportError, ValueError, RemoteGenerationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or f"runs/eval/{args.env_id.replace('/', '_').replace(':', '_')}-{args.split}.jsonl"
    existed, folder_existed = Path(out).exists(), Path(out).parent.exists()
    try:
        with console.status(f"evaluating {args.model} on {args.env_id} ({args.split})") as status:
            result = evaluate(
                policy,
                args.env_id,
                EvalSettings(**settings_of(args, EvalSettings)),
                split=args.split,
                difficulty=args.difficulty,
                out_jsonl=out,
                resume=args.resume,
                progress=lambda done, total, passed: status.update(
                    f"evaluating {args.model} on {args.env_id}: {done}/{total} episodes finished, {passed} passed"
                ),
            )
    except (ValueError, OpenAIError, RemoteGenerationError) as e:  # bad seeds or files; a server that fails
        release(policy)  # best effort: a hot-loaded adapter leaves the server
        if not existed and Path(out).is_file() and Path(out).stat().st_size == 0:
            Path(out).unlink()  # no episode finished: leave nothing behind
            if not folder_existed and not any(Path(out).parent.iterdir()):
                Path(out).parent.rmdir()
        print(f"error: {e}", file=sys.stderr)
        return 2
    release(policy)
    print(result.line())
    print(f"trajectories written to {out}")
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    if result.roofline is not None:
        print(format_account(result.roofline))
    if ns.json:
        print(json.dumps(result.summary()))
    return 0


def cmd_rollout(ns: argparse.Namespace) -> int:
    from trace_train.base_rollouts import RolloutArgs, rollout
    from trace_train.policies.remote_generation import RemoteGenerationError

    try:
        args = from_namespace(RolloutArgs, ns)
        with console.status(f"rolling out {args.model} on {args.env_id}") as status:
            summary = rollout(args, lambda done, total: status.update(f"{done}/{total} episodes written"))
    # RolloutError, refused splits and bad arguments; a generation server that is down or fails
    except (ValueError, FileNotFoundError, RemoteGenerationError) as err:
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
    from trace_train.config import EvaluateArgs, GRPOArgs, SFTArgs

    train = subparsers.add_parser(
        "train", help="seed-grouped GRPO: train a LoRA adapter on any chat/text Gymnasium env"
    )
    train.add_argument("env_id", help="Gymnasium id, e.g. trace/retail-v2 or module:ns/name-v0")
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
    add_dataclass_flags(ev, EvaluateArgs, skip={"env_id"})
    ev.add_argument("--json", action="store_true", help="also print the summary as JSON")
    ev.set_defaults(func=cmd_evaluate)

    ro = subparsers.add_parser(
        "rollout", help="step 1: base-agent trajectories on a target's train split (JSONL)"
    )
    ro.add_argument("env_id", help="Gymnasium id, e.g. trace/retail-v2")
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
