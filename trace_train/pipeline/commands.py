"""``trace run CONFIG`` and ``trace demo [--quick]`` (registered by ``trace_train.cli``); see docs/pipeline.md.

trace run CONFIG [--from STAGE] [--until STAGE] [--set section.key=value ...] [--out DIR]
trace run --schema                      print the published JSON Schema of the config
trace run --stages                      list the stages
trace demo [--quick] [--out DIR] ...    trace run with the built-in demo.toml / quick.toml
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from trace_train.pipeline.config import (
    ConfigError,
    builtin_config,
    load_config,
    parse_override,
    published_schema,
)


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_stage", metavar="STAGE", help="redo this stage and every later one")
    p.add_argument("--until", metavar="STAGE", help="stop after this stage")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set adapters.steps=5 (TOML value syntax)",
    )
    p.add_argument("--out", help="output folder (overrides the config's `out`)")


def _check_env_ids(config: Any) -> None:
    import gymnasium as gym

    import trace_gym  # noqa: F401 - registers the built-in envs and plugins
    from trace_gym.registration import resolve_env_id

    ids = [("target.env_id", config.target.env_id)]
    ids += [("base.warm_start.envs", e) for e in config.base.warm_start.envs]
    for key, env_id in ids:
        try:
            resolve_env_id(env_id)
        except gym.error.Error as err:
            raise ValueError(f"{key} = {env_id!r} is not a registered env: {err}") from None


def run_pipeline(config_path: Path, ns: argparse.Namespace) -> int:
    from trace_train.pipeline.runner import Pipeline, StageError, summary_lines
    from trace_train.pipeline.stages import stages_for

    try:
        overrides = dict(parse_override(o) for o in ns.overrides)
        if ns.out:
            overrides["out"] = ns.out
        config = load_config(config_path, overrides)
        _check_env_ids(config)  # an id that does not exist is refused here, not at the stage that makes it
        pipeline = Pipeline(stages_for(config.pipeline), config)
        ns.from_stage, ns.until = pipeline.stage_range(ns.from_stage, ns.until)  # refused before any work
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"trace run {config_path} -> {config.out} (stages: {', '.join(pipeline.stage_names())})", flush=True
    )
    started = time.time()
    try:
        records = pipeline.run(from_stage=ns.from_stage, until=ns.until)
    except (ValueError, StageError) as err:
        print(f"error: {err}", file=sys.stderr)
        cause = err.__cause__
        from trace_train.policies.remote_generation import RemoteGenerationError

        # a generation server's failure is said in that one line (no traceback): not a bug to debug here
        expected = (ValueError, FileNotFoundError, ImportError, RemoteGenerationError)
        if cause is not None and not isinstance(cause, expected):
            import traceback

            traceback.print_exception(cause, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    print()
    print("\n".join(summary_lines(records)))
    print(f"wall time of this invocation: {time.time() - started:.0f} s")
    report = next((r.result for r in records if r.name == "report"), None)
    if report:
        print(f"report: {report['report_md']} and {report['report_html']}")
    evaluation = next((r.result for r in records if r.name == "evaluation"), None)
    if evaluation:
        print(_final_table(evaluation))
    return 0


def _final_table(evaluation: dict) -> str:
    lines = [f"{'method':<30} success  95% CI       p vs base  rollouts"]
    for r in evaluation["rows"]:
        vs = r.get("vs_base")
        p = f"{vs['mcnemar_p']:.3g}" if vs else "-"
        lines.append(
            f"{r['method']:<30} {r['success_rate']:.3f}    {r['success_ci'][0]:.3f}-{r['success_ci'][1]:.3f}  "
            f"{p:>9}  {r['train_rollouts']:>8}"
        )
    lines += [f"{m}: not evaluated: {why}" for m, why in evaluation["not_run"].items()]
    return "\n".join(lines)


def cmd_run(ns: argparse.Namespace) -> int:
    if ns.schema:
        print(json.dumps(published_schema(), indent=2))
        return 0
    if ns.stages:
        from trace_train.pipeline.stages import STAGES

        for i, s in enumerate(STAGES, 1):
            print(f"{i:02d}-{s.name:<12} {s.doc}")
        return 0
    if not ns.config:
        print("error: trace run needs a CONFIG file (or --schema / --stages)", file=sys.stderr)
        return 2
    return run_pipeline(Path(ns.config), ns)


def cmd_demo(ns: argparse.Namespace) -> int:
    try:
        path = builtin_config("quick" if ns.quick else "demo")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return run_pipeline(path, ns)


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="the whole TRACE loop driven by one TOML config")
    run.add_argument("config", nargs="?", help="TOML config (schema: trace run --schema)")
    run.add_argument("--schema", action="store_true", help="print the config's JSON Schema and exit")
    run.add_argument("--stages", action="store_true", help="list the stages and exit")
    _add_run_flags(run)
    run.set_defaults(func=cmd_run)

    demo = subparsers.add_parser(
        "demo", help="trace run with the built-in config: SmolLM2-135M on this CPU, target retail"
    )
    demo.add_argument(
        "--quick", action="store_true", help="every stage at tiny budgets with a tiny model (smoke test, CI)"
    )
    _add_run_flags(demo)
    demo.set_defaults(func=cmd_demo)
