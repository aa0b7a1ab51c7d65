"""The ``trace`` command line. Each part of the pipeline registers its own subcommands:

trace envs | check | play                registered envs, the validation suite, playing the agent's side
                                         (trace_gym.commands, docs/environments.md)
trace rollout                            step 1's input: base-agent trajectories (trace_train.commands)
trace analyze                            step 1 (trace_gym.analysis.commands, docs/analysis.md)
trace synthesize | isolation             step 2 (trace_gym.synthesis.commands, docs/synthesis.md)
trace calibrate                          step 2, with the training agent (trace_train.calibrate)
trace train | sft | evaluate             step 3 and evaluation (trace_train.commands, docs/training.md)
trace compose | compare | explain        step 4 (trace_train.compose.commands, docs/composition.md)
trace base list | verify | build         the shipped base agents (trace_train.bases, docs/base.md)
trace run | demo                         the whole loop (trace_train.pipeline.commands, docs/pipeline.md)
trace env-serve | serve | export         interoperability (docs/interop.md)
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from gymnasium import error as gym_error

from trace_gym import commands as env_commands
from trace_gym.analysis import commands as analysis_commands
from trace_gym.console import make_console
from trace_gym.interop import commands as interop_commands
from trace_gym.synthesis import commands as synthesis_commands
from trace_train import calibrate, export
from trace_train import commands as train_commands
from trace_train.bases import commands as base_commands
from trace_train.compose import commands as compose_commands
from trace_train.pipeline import commands as pipeline_commands
from trace_train.serve import commands as serve_commands

console = make_console()

# In the order ``trace --help`` lists them: envs first, then the pipeline's steps, then interoperability.
COMMAND_MODULES = (
    env_commands,
    train_commands,
    analysis_commands,
    synthesis_commands,
    calibrate,
    base_commands,
    pipeline_commands,
    interop_commands,
    compose_commands,
    serve_commands,
    export,
)
# Errors a command may raise for bad input: printed as one line, exit status 2 (no traceback).
USER_ERRORS = (gym_error.Error, ValueError, FileNotFoundError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trace", description="Capability-targeted agentic training.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def quiet_libraries() -> None:
    """Library noise that is not the user's to fix: transformers' weight-loading and GGUF bars (set before it
    is imported; HF_HUB_DISABLE_PROGRESS_BARS=0 brings them back) and peft's call of a deprecated transformers
    API."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings(
        "ignore", message=".*is_gradient_checkpointing. is deprecated", category=FutureWarning
    )


def main(argv: Sequence[str] | None = None) -> int:
    quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as err:
        console.print(f"error: {err}", style="red", markup=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
