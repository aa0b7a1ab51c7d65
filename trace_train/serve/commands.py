"""``trace serve``: a trace policy behind an OpenAI-compatible chat endpoint (see :mod:`trace_train.serve`)."""

from __future__ import annotations

import argparse
import sys


def cmd_serve(args: argparse.Namespace) -> int:
    from trace_gym.interop.server import check_port, serve_until_stopped
    from trace_train.policy_factory import make_policy
    from trace_train.serve.server import PolicyServer

    try:
        check_port(args.host, args.port)  # before the model loads
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    policy = make_policy(
        args.policy, adapter=args.adapter, dtype=args.dtype, device=args.device, engine=args.engine
    )
    server = PolicyServer(
        policy,
        model_name=args.served_model_name or args.policy,
        host=args.host,
        port=args.port,
        max_batch=args.max_batch,
        batch_window=args.batch_window,
    )
    serve_until_stopped(server, f"serving {server.model_name} on {server.address}/v1")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="serve a policy as an OpenAI-compatible server: /v1/chat/completions, and token-id /v1/completions "
        "with LoRA hot-loading (docs/interop.md, docs/pipeline.md)",
    )
    serve.add_argument(
        "policy",
        help="model alias or HF directory (smollm2-135m, ./runs/sft), compose:DIR (a composed model), "
        "or py:MODULE:NAME (a Policy object or factory)",
    )
    serve.add_argument("--adapter", default=None, help="PEFT LoRA adapter directory on top of the model")
    serve.add_argument(
        "--served-model-name", default=None, help="the 'model' clients send (default: the spec)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed at start)")
    serve.add_argument("--dtype", default="float32")
    serve.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    serve.add_argument(
        "--engine",
        default=None,
        choices=["cached", "simple"],
        help="a local model's engine for token-id completions (default cached; the one the local run uses)",
    )
    serve.add_argument("--max-batch", type=int, default=8, help="concurrent requests generated in one batch")
    serve.add_argument(
        "--batch-window", type=float, default=0.005, help="seconds to wait for a batch to fill"
    )
    serve.set_defaults(func=cmd_serve)


def main(argv: list[str] | None = None) -> int:
    """``python -m trace_train.serve.commands serve ...``: this command alone, without importing the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="trace")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
