"""CLI subcommands of step 2 (registered by ``trace_gym.cli``): ``synthesize``, ``isolation``, ``calibrate``.

trace synthesize --capabilities selected_capabilities.json --target trace/retail-v1 --out generated_envs
trace isolation [ENV_ID ...] --seeds 100          the "oracle minus one capability" matrix
trace calibrate ENV_ID --model smollm2-135m       difficulty against TRACE's bands, written into spec.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()


def cmd_synthesize(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401 - registers the target
    from trace_gym.registration import resolve_env_id
    from trace_gym.synthesis.emit import SynthesisError, load_capabilities, new_plugin_package, synthesize
    from trace_gym.synthesis.sandbox import Limits

    try:
        records, selection_target = load_capabilities(ns.capabilities)
        target = resolve_env_id(ns.target or selection_target or "")
        out = Path(ns.out)
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
        outcomes = synthesize(
            records,
            target,
            out,
            seeds=ns.seeds,
            validate=not ns.no_validate,
            generator=generator,
            limits=limits,
            log=lambda line: console.print(line, markup=False),
        )
    except (SynthesisError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}", markup=True)
        return 2
    table = Table(title=f"trace synthesize -> {out}")
    for column in ("env id", "generator", "result", "reason"):
        table.add_column(column)
    for o in outcomes:
        mark = "[green]registered[/green]" if o.accepted else "[red]rejected[/red]"
        table.add_row(o.env_id, o.generator, mark, o.reason)
    console.print(table)
    return 0 if all(o.accepted for o in outcomes) else 1


def cmd_isolation(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401
    from trace_gym.registration import resolve_env_id
    from trace_gym.synthesis.catalog import FAMILIES
    from trace_gym.synthesis.emit import env_id_of
    from trace_gym.synthesis.isolation import isolation_matrix

    env_ids = [resolve_env_id(e) for e in ns.env_ids] or [env_id_of(c) for c in FAMILIES]
    matrix = isolation_matrix(env_ids, seeds=ns.seeds)
    print(matrix.markdown())
    if ns.json:
        Path(ns.json).write_text(json.dumps(matrix.to_json(), indent=2) + "\n")
    problems = matrix.problems()
    for problem in problems:
        console.print(f"[red]{problem}[/red]")
    return 1 if problems else 0


def cmd_calibrate(ns: argparse.Namespace) -> int:
    import trace_gym  # noqa: F401
    from trace_gym.registration import resolve_env_id
    from trace_gym.synthesis.calibration import Bands, calibrate, spec_path, write_calibration

    env_id = resolve_env_id(ns.env_id)
    if ns.threads:
        import torch

        torch.set_num_threads(ns.threads)
    if ns.base_url:
        from trace_train.policies.openai_http import OpenAIHTTPPolicy

        policy = OpenAIHTTPPolicy(model=ns.model, base_url=ns.base_url, lora_name=ns.adapter)
    else:
        from trace_train.policies.hf import HFPolicy

        policy = HFPolicy.from_pretrained(ns.model, adapter=ns.adapter, dtype=ns.dtype)
    result = calibrate(
        env_id,
        policy,
        model_name=ns.model + (f"+{ns.adapter}" if ns.adapter else ""),
        seeds=ns.seeds,
        group_size=ns.group_size,
        levels=ns.levels,
        temperature=ns.temperature,
        max_new_tokens=ns.max_new_tokens,
        max_turns=ns.max_turns,
        batch_size=ns.batch_size,
        bands=Bands(ns.band_low, ns.band_high, ns.informative),
    )
    table = Table(title=f"trace calibrate {env_id} ({ns.seeds} seeds x {ns.group_size} samples per level)")
    for column in (
        "level",
        "mean reward",
        "success",
        f"pass@{ns.group_size}",
        "all-success",
        "all-zero",
        "informative",
        "distance",
    ):
        table.add_column(column)
    for s in result.levels:
        chosen = " *" if s.level == result.chosen.level else ""
        table.add_row(
            f"{s.level}{chosen}",
            f"{s.mean_reward:.3f}",
            f"{s.success:.3f}",
            f"{s.pass_at_k[str(ns.group_size)]:.3f}",
            f"{s.all_success_share:.2f}",
            f"{s.all_zero_share:.2f}",
            f"{s.informative_share:.2f}",
            f"{result.bands.distance(s):.3f}",
        )
    console.print(table)
    console.print(
        f"chosen level {result.chosen.level}; prompt tokens (system + tools): {result.prompt_tokens}"
    )
    if ns.json:
        Path(ns.json).write_text(json.dumps(result.to_spec(), indent=2) + "\n")
    if not ns.no_write:
        path = spec_path(env_id)
        if path is None:
            console.print(f"{env_id} has no spec.json (not a synthesised env): nothing written")
        else:
            write_calibration(path, result)
            console.print(f"calibration written to {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    sy = subparsers.add_parser("synthesize", help="step 2: emit capability envs into a plugin package")
    sy.add_argument("--capabilities", required=True, help="selected_capabilities.json of trace analyze")
    sy.add_argument("--target", default=None, help="target env id (default: the selection's target)")
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
    sy.add_argument("--model", default=None, help="LLM generation agent for capabilities outside the catalog")
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
    iso.add_argument("env_ids", nargs="*", help="env ids (default: the seven catalog envs)")
    iso.add_argument("--seeds", type=int, default=100)
    iso.add_argument("--json", default=None, help="also write the matrix as JSON")
    iso.set_defaults(func=cmd_isolation)

    ca = subparsers.add_parser("calibrate", help="step 2: pick an env's difficulty against TRACE's bands")
    ca.add_argument("env_id")
    ca.add_argument(
        "--model", default="smollm2-135m", help="alias, local HF dir, or served model (--base-url)"
    )
    ca.add_argument("--adapter", default=None, help="PEFT adapter (e.g. the warm-started base agent)")
    ca.add_argument("--base-url", default=None)
    ca.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16", "float16"])
    ca.add_argument("--seeds", type=int, default=8, help="S: train seeds per level")
    ca.add_argument("--group-size", type=int, default=4, help="G: samples per seed")
    ca.add_argument("--levels", type=int, nargs="*", default=None, help="default: every level of the env")
    ca.add_argument("--temperature", type=float, default=1.0)
    ca.add_argument("--max-new-tokens", type=int, default=256)
    ca.add_argument("--max-turns", type=int, default=10)
    ca.add_argument("--batch-size", type=int, default=16)
    ca.add_argument("--band-low", type=float, default=0.2)
    ca.add_argument("--band-high", type=float, default=0.6)
    ca.add_argument("--informative", type=float, default=0.5)
    ca.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ca.add_argument("--json", default=None)
    ca.add_argument("--no-write", action="store_true", help="do not write the chosen level into spec.json")
    ca.set_defaults(func=cmd_calibrate)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the trace command: trace synthesize / isolation / calibrate")
