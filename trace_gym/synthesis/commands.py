"""CLI subcommands of step 2 (registered by the ``trace`` command): ``synthesize``, ``isolation``.

trace synthesize --capabilities selected_capabilities.json --target trace/retail-v2 --out generated_envs
    [--target-kwargs '{"difficulty": 1}']      derived envs of the capabilities the target declares
trace isolation ENV_ID [ENV_ID ...] --seeds 100   the "oracle minus one capability" matrix

``trace calibrate`` runs a model, so it lives in the training package, not here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.table import Table

from trace_gym.console import make_console

console = make_console()


def cmd_synthesize(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401 - registers the target
    from trace_gym.registration import resolve_env_id
    from trace_gym.synthesis.emit import SynthesisError, load_capabilities, new_plugin_package, synthesize
    from trace_gym.synthesis.sandbox import Limits

    project = Path(ns.out)
    # a --new-package this run creates is removed again when no env is registered into it
    fresh = bool(ns.new_package) and not (project / ns.new_package).exists()
    made = {
        "pyproject": fresh and not (project / "pyproject.toml").exists(),
        "project": fresh and not project.exists(),
    }
    outcomes: list = []
    try:
        records, selection_target = load_capabilities(ns.capabilities)
        target = resolve_env_id(ns.target or selection_target or "")
        out = project
        if ns.new_package:
            out = new_plugin_package(out, ns.new_package)
        generator = None
        if ns.model:
            from trace_gym.llm_agent import LLMAgent
            from trace_gym.openai_client import OpenAIClient
            from trace_gym.synthesis.generation_agent import GenerationAgent

            client = OpenAIClient(base_url=ns.base_url, api_key=ns.api_key)
            agent = LLMAgent(client, ns.model, max_attempts=ns.max_attempts, max_tokens=ns.max_tokens)
            generator = GenerationAgent(agent, seeds=ns.seeds)
        limits = Limits(
            cpu_seconds=ns.cpu_seconds, memory_bytes=int(ns.memory_gb * 1024**3), wall_seconds=ns.wall_seconds
        )
        target_kwargs = json.loads(ns.target_kwargs) if ns.target_kwargs else None
        if target_kwargs is not None and not isinstance(target_kwargs, dict):
            raise SynthesisError(f"--target-kwargs must be a JSON object, got {ns.target_kwargs!r}")
        outcomes = synthesize(
            records,
            target,
            out,
            target_kwargs=target_kwargs,
            seeds=ns.seeds,
            validate=not ns.no_validate,
            generator=generator,
            limits=limits,
            log=lambda line: console.print(line, markup=False),
        )
    except (SynthesisError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}", markup=True)
        return 2
    finally:
        if fresh and not any(o.accepted for o in outcomes):
            _remove_new_package(project, ns.new_package, made)
    table = Table(title=f"trace synthesize -> {out}")
    for column in ("env id", "generator", "result", "reason"):
        table.add_column(column)
    for o in outcomes:
        mark = "[green]registered[/green]" if o.accepted else "[red]rejected[/red]"
        table.add_row(o.env_id, o.generator, mark, o.reason)
    console.print(table)
    return 0 if all(o.accepted for o in outcomes) else 1


def _remove_new_package(project: Path, name: str, made: dict[str, bool]) -> None:
    """Remove what this run created: the package, and the project's pyproject and folder when it made them."""
    import shutil

    shutil.rmtree(project / name, ignore_errors=True)
    if made["pyproject"]:
        (project / "pyproject.toml").unlink(missing_ok=True)
    if made["project"] and project.is_dir() and not any(project.iterdir()):
        project.rmdir()
    console.print(f"no env was registered: the new package {name} in {project} was removed", markup=False)


def cmd_isolation(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401
    from trace_gym.registration import resolve_env_id
    from trace_gym.synthesis.isolation import isolation_matrix

    env_ids = [resolve_env_id(e) for e in ns.env_ids]
    matrix = isolation_matrix(env_ids, seeds=ns.seeds)
    print(matrix.markdown())
    if ns.json:
        Path(ns.json).write_text(json.dumps(matrix.to_json(), indent=2) + "\n")
    problems = matrix.problems()
    for problem in problems:
        console.print(f"[red]{problem}[/red]")
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    sy = subparsers.add_parser("synthesize", help="step 2: emit capability envs into a plugin package")
    sy.add_argument("--capabilities", required=True, help="selected_capabilities.json of trace analyze")
    sy.add_argument("--target", default=None, help="target env id (default: the selection's target)")
    sy.add_argument(
        "--target-kwargs",
        default=None,
        help="JSON object of the target's keyword arguments for derived envs, e.g. '{\"difficulty\": 1}'",
    )
    sy.add_argument(
        "--out",
        required=True,
        help="plugin package dir (e.g. generated_envs) or, with --new-package, a project dir",
    )
    sy.add_argument(
        "--new-package", default=None, help="create an installable plugin package of this name in --out"
    )
    sy.add_argument("--seeds", type=int, default=50, help="seeds of the sandboxed trace check")
    sy.add_argument("--no-validate", action="store_true", help="render only (keeps existing validation.json)")
    sy.add_argument(
        "--model", default=None, help="LLM generation agent for capabilities the target does not declare"
    )
    sy.add_argument("--base-url", default=None, help="its OpenAI-compatible endpoint ($OPENAI_BASE_URL)")
    sy.add_argument("--api-key", default=None, help="its key ($OPENAI_API_KEY)")
    sy.add_argument("--max-attempts", type=int, default=3, help="generation attempts, errors fed back")
    sy.add_argument("--max-tokens", type=int, default=6000)
    sy.add_argument("--cpu-seconds", type=int, default=120, help="sandbox CPU-time limit")
    sy.add_argument("--memory-gb", type=float, default=3.0, help="sandbox address-space limit")
    sy.add_argument("--wall-seconds", type=float, default=600.0, help="sandbox wall-clock limit")
    sy.set_defaults(func=cmd_synthesize)

    iso = subparsers.add_parser(
        "isolation", help="step 2: isolation matrix of oracle-minus-one-capability agents"
    )
    iso.add_argument(
        "env_ids", nargs="+", help="env ids whose oracle_actions(without=...) ablates capabilities"
    )
    iso.add_argument("--seeds", type=int, default=100)
    iso.add_argument("--json", default=None, help="also write the matrix as JSON")
    iso.set_defaults(func=cmd_isolation)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the trace command: trace synthesize / isolation")
