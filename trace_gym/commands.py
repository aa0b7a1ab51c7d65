"""CLI subcommands of the environments (registered by the ``trace`` command): ``envs``, ``check``, ``play``.

trace envs                               registered trace envs: id, capability, description
trace check ENV_ID --seeds 500           the validation suite
trace play ENV_ID --seed 3               play the agent's side in the terminal
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from trace_gym.console import make_console

console = make_console()


def cmd_envs(args: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401 - registers built-ins and plugins
    from trace_gym.registration import env_card, trace_env_ids

    table = Table(title="Registered trace environments")
    for column in ("id", "capability", "description"):
        table.add_column(column)
    for env_id in trace_env_ids():
        try:
            card = env_card(env_id)
            table.add_row(card.id, card.capability, card.description)
        except Exception as err:  # noqa: BLE001 - one broken env must not hide the table
            table.add_row(env_id, "?", f"[red]cannot load: {err}[/red]")
    console.print(table)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401
    from trace_gym.core.validation import ValidationConfig, validate_env
    from trace_gym.registration import resolve_env_id

    args.env_id = resolve_env_id(args.env_id)
    for flag, value in (("--seeds", args.seeds), ("--degenerate-seeds", args.degenerate_seeds)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.json and not Path(args.json).resolve().parent.is_dir():  # refused before the suite runs
        raise FileNotFoundError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")

    config = ValidationConfig(
        seeds=args.seeds,
        split=None if args.split == "none" else args.split,
        min_unique_share=args.min_unique,
        degenerate_seeds=min(args.seeds, args.degenerate_seeds),
        degenerate_max_mean=args.degenerate_max,
    )
    make_kwargs = {"difficulty": args.difficulty} if args.difficulty is not None else {}
    with console.status(f"checking {args.env_id} on {args.seeds} seeds"):
        results = validate_env(args.env_id, config, **make_kwargs)
    table = Table(title=f"trace check {args.env_id} ({args.seeds} seeds, split {args.split})")
    for column in ("check", "result", "figure"):
        table.add_column(column)
    for result in results:
        mark = "[green]pass[/green]" if result.passed else "[red]FAIL[/red]"
        if getattr(result, "skipped", False):
            mark = "[yellow]skip[/yellow]"
        table.add_row(result.name, mark, result.figure)
    console.print(table)
    for result in results:
        if not result.passed and result.detail:
            console.print(f"[red]{result.name}[/red]: {result.detail}", markup=False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in results], f, indent=2)
    failed = [r.name for r in results if not r.passed]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed: {', '.join(failed)}[/red]")
        return 1
    skipped = [r.name for r in results if getattr(r, "skipped", False)]
    if skipped:  # a skipped check is not a pass: say which
        console.print(
            f"[green]all {len(results)} checks passed or skipped[/green] ({len(skipped)} skipped: {', '.join(skipped)})"
        )
        return 0
    console.print(f"[green]all {len(results)} checks passed[/green]")
    return 0


PLAY_HELP = """Type a reply to the user, or a tool call in any accepted form:
  /call TOOL {"arg": "value"}        (shorthand)
  <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>
Commands: /tools (list tools), /oracle (show the reference solution), /reset [SEED] (a new episode),
/help, /quit. A line starting with "/" is never sent to the user (use "//" to send one that starts with "/")."""
PLAY_COMMANDS = ("/call", "/tools", "/oracle", "/reset", "/help", "/quit", "/exit")


def cmd_play(args: argparse.Namespace) -> int:
    import gymnasium as gym
    from rich.markup import escape

    import trace_gym  # noqa: F401
    from trace_gym.core.env import render_conversation
    from trace_gym.registration import resolve_env_id

    args.env_id = resolve_env_id(args.env_id)
    env = gym.make(args.env_id, **({"difficulty": args.difficulty} if args.difficulty is not None else {}))
    options: dict[str, Any] = {"hint": args.hint}
    if args.split != "none":
        options["split"] = args.split

    def start(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        obs, info = env.reset(seed=seed, options=options)
        console.print(render_conversation(obs), markup=False)
        return obs, info

    console.print(f"[bold]{escape(args.env_id)}[/bold] seed {args.seed} ({args.split} split)")
    console.print(PLAY_HELP + "\n", markup=False)
    obs, info = env.reset(seed=args.seed, options=options)
    _print_tools(info["tools"])
    console.print(render_conversation(obs), markup=False)
    shown, over, finished = len(obs), False, False
    while True:
        try:
            line = input("agent> ").strip()
        except EOFError:
            if not finished:
                console.print("\n(end of input: leaving the episode unfinished)")
            return 0 if finished else 1
        command, _, rest = line.partition(" ")
        if line.startswith("//"):
            line, command = line[1:], ""
        elif line.startswith("/") and command not in PLAY_COMMANDS:
            console.print(f"unknown command {command!r}; commands: {', '.join(PLAY_COMMANDS)}", markup=False)
            continue
        if command in ("/quit", "/exit"):
            return 0 if finished else 1
        if command == "/help":
            console.print(PLAY_HELP, markup=False)
            continue
        if command == "/tools":
            _print_tools(info["tools"])
            continue
        if command == "/oracle":
            for action in env.unwrapped.oracle_actions():
                console.print(json.dumps(action), markup=False)
            continue
        if command == "/reset":
            try:
                seed = int(rest) if rest.strip() else args.seed
            except ValueError:
                console.print(f"/reset takes a seed (an integer), got {rest!r}", markup=False)
                continue
            obs, info = start(seed)
            shown, over = len(obs), False
            continue
        if over:
            console.print("the episode is over: /reset [SEED] plays another one, /quit leaves", markup=False)
            continue
        action: Any = line
        if command == "/call":
            name, _, arguments = rest.partition(" ")
            action = f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments.strip() or "{}"}}}</tool_call>'
        obs, reward, terminated, truncated, info = env.step(action)
        console.print(render_conversation(obs[shown:]), markup=False)
        shown = len(obs)
        if info.get("invalid_action"):
            console.print(f"[yellow]invalid action: {escape(str(info['invalid_action']))}[/yellow]")
        if terminated or truncated:
            over = finished = True
            console.print(
                f"[bold]episode {'terminated' if terminated else 'truncated'}; reward {reward:.2f}[/bold]"
            )
            console.print(f"reward components: {info.get('reward_components')}", markup=False)
            console.print(f"requirements: {info.get('requirements')}", markup=False)
            console.print("/reset [SEED] plays another episode, /quit leaves", markup=False)


def _print_tools(tools: list[dict[str, Any]]) -> None:
    from rich.markup import escape

    table = Table(title="tools")
    table.add_column("name")
    table.add_column("parameters")
    table.add_column("description")
    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters", {}).get("properties", {})
        # escape: descriptions such as "item_ids[i]" are text, not rich markup
        table.add_row(escape(fn["name"]), escape(", ".join(params)), escape(fn.get("description", "")))
    console.print(table)


def register(subparsers: argparse._SubParsersAction) -> None:
    envs = subparsers.add_parser("envs", help="list registered trace environments")
    envs.set_defaults(func=cmd_envs)

    check = subparsers.add_parser("check", help="run the validation suite on an env")
    check.add_argument("env_id")
    check.add_argument("--seeds", type=int, default=100, help="seeds for uniqueness and oracle checks")
    check.add_argument("--degenerate-seeds", type=int, default=100, help="seeds per degenerate policy")
    check.add_argument(
        "--degenerate-max", type=float, default=0.05, help="max mean reward of a degenerate policy"
    )
    check.add_argument("--min-unique", type=float, default=0.99, help="min share of unique instances")
    check.add_argument("--split", default="train", choices=["train", "test", "none"])
    check.add_argument("--difficulty", type=int, default=None)
    check.add_argument("--json", help="also write the results to this JSON file")
    check.set_defaults(func=cmd_check)

    play = subparsers.add_parser("play", help="play the agent in the terminal")
    play.add_argument("env_id")
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--split", default="train", choices=["train", "test", "none"])
    play.add_argument("--difficulty", type=int, default=None)
    play.add_argument("--hint", action="store_true", help="show the expert hint in the system prompt")
    play.set_defaults(func=cmd_play)
