"""``trace env-serve``: serve a trace env over HTTP (see :mod:`trace_gym.interop.server`)."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_env_serve(args: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401 - registers built-ins and plugins
    from trace_gym.interop.server import EnvServer, serve_until_stopped
    from trace_gym.registration import resolve_env_id

    env_id = resolve_env_id(args.env_id)
    try:
        make_kwargs = json.loads(args.make_kwargs)
    except json.JSONDecodeError as err:
        raise ValueError(f"--make-kwargs must be a JSON object: {err}") from None
    if not isinstance(make_kwargs, dict):
        raise ValueError(f"--make-kwargs must be a JSON object, got {args.make_kwargs!r}")
    server = EnvServer(
        env_id,
        make_kwargs=make_kwargs,
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        session_timeout=args.session_timeout,
    )
    serve_until_stopped(server, f"serving {env_id} on {server.address}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "env-serve", help="serve an env over HTTP: reset/step/state with many sessions (docs/interop.md)"
    )
    serve.add_argument(
        "env_id", help="a registered id, e.g. trace/retail-v2 (module:id imports module first)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0 for other machines)")
    serve.add_argument("--port", type=int, default=8080, help="port (0: any free port, printed at start)")
    serve.add_argument("--max-sessions", type=int, default=256, help="concurrent sessions at most")
    serve.add_argument(
        "--session-timeout", type=float, default=300.0, help="seconds idle before a session is closed"
    )
    serve.add_argument(
        "--make-kwargs", default="{}", help="JSON kwargs of gym.make, e.g. '{\"difficulty\": 2}'"
    )
    serve.set_defaults(func=cmd_env_serve)


def main(argv: list[str] | None = None) -> int:
    """``python -m trace_gym.interop.commands env-serve ...``: this command alone, without importing the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="trace")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
