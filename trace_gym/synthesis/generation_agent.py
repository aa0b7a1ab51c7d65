"""The LLM generation agent: an env module for a capability the target cannot derive itself.

The prompt (``prompts/synthesis/generate_env.md``) gives the capability and example failures, the target's
system prompt and tool schemas verbatim with the instruction to keep them (issue 26: the env is built on the
target, declares it as ``target_id`` and names each instance's source task), the env API and a complete
example module (``example_target_env.py``). The answer is a JSON object ``{"module": source}``;
:class:`~trace_gym.llm_agent.LLMAgent` parses it and runs the check, which is the whole "trust nothing"
validation: the module must declare the target (:func:`target_problem`, before anything runs), then the
static check and ``trace check`` in the sandbox, whose format-conformity results
(:mod:`trace_gym.core.conformity`) must all be there and pass; their reasons come first in a rejection. A
rejected module's reason goes back to the model for the next attempt, up to ``max_attempts`` in all; then
synthesis reports the capability as rejected with every attempt, and registers nothing. Works with any
OpenAI-compatible endpoint.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from trace_gym.llm_agent import LLMAgent, LLMAgentError, render_prompt
from trace_gym.synthesis.emit import GeneratedModule, SynthesisError, validate_module
from trace_gym.synthesis.sandbox import Limits
from trace_gym.synthesis.static_check import static_check

PROMPT = "synthesis/generate_env.md"
EXAMPLE = "example_target_env.py"
EXAMPLE_CLASS = "ProductLookupV0"
ANSWER_SCHEMA = {
    "type": "object",
    "required": ["module"],
    "properties": {"module": {"type": "string", "minLength": 50}},
}


def target_context(target: str) -> tuple[list[dict[str, Any]], str]:
    """The target env's tool schemas and its system prompt (seed 0, train split)."""
    env = gym.make(target)
    obs, info = env.reset(seed=0, options={"split": "train"})
    tools = list(info.get("tools") or env.unwrapped.tools)
    policy = obs[0]["content"] if obs and obs[0].get("role") == "system" else ""
    env.close()
    return tools, policy


def target_problem(source: str, class_name: str, target: str) -> str | None:
    """Why the module does not declare a target (None: its class assigns ``target_id``). Read from the syntax
    tree, so nothing runs; which target it declares is read off the sandbox's conformity results."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # the static check names the syntax error
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for statement in node.body:
                names = statement.targets if isinstance(statement, ast.Assign) else []
                if isinstance(statement, ast.AnnAssign):
                    names = [statement.target]
                if any(isinstance(name, ast.Name) and name.id == "target_id" for name in names):
                    return None
            return f'the env does not declare its target: {class_name} needs target_id = "{target}"'
    return None  # the sandbox names the missing class


def conformity_problems(checks: list[dict[str, Any]], target: str) -> list[str]:
    """The format-conformity failures of a sandbox report: not checked (no target declared), another target
    declared, or each aspect that differs with its reason."""
    results = [c for c in checks if c["name"].startswith("conformity")]
    if not results or any(c["name"] == "conformity" for c in results):
        return ["format conformity was not checked (the env declares no target)"]
    if any(f"{target}'s" not in c["figure"] for c in results):
        return [f"the env declares another target than {target}: {results[0]['figure']}"]
    return [
        f"format conformity: {c['name']}: {c['detail'].splitlines()[0] if c['detail'] else c['figure']}"
        for c in results
        if not c["passed"]
    ]


def failure_lines(record: dict[str, Any], limit: int = 5) -> list[str]:
    lines = []
    for example in record.get("examples", [])[:limit]:
        where = f"seed {example.get('seed')}"
        lines.append(f"{where}: {example.get('reason') or 'failed with the capability lacking'}")
    return lines


@dataclass
class GenerationAgent:
    """Callable as synthesis's generator: ``agent(record, target, class_name) -> GeneratedModule``."""

    agent: LLMAgent
    seeds: int = 30
    limits: Limits | None = None
    prompts_dir: str | Path | None = None

    def prompt(self, record: dict[str, Any], target: str, class_name: str) -> str:
        tools, policy = target_context(target)
        example = Path(__file__).with_name(EXAMPLE).read_text()
        return render_prompt(
            PROMPT,
            self.prompts_dir,
            capability=record,
            failures=failure_lines(record),
            target=target,
            tools_json=json.dumps(tools, indent=1),
            n_tools=len(tools),
            policy=policy,
            class_name=class_name,
            example=example.replace(EXAMPLE_CLASS, class_name),
        )

    def __call__(self, record: dict[str, Any], target: str, class_name: str) -> GeneratedModule:
        def check(value: Any) -> list[str]:
            # the static check's problems first (what must never run), then the declared target, then the sandbox
            problem = (
                None if static_check(value["module"]) else target_problem(value["module"], class_name, target)
            )
            if problem:
                return [f"the module was rejected: {problem}"]
            verdict = validate_module(
                value["module"], class_name, seeds=self.seeds, difficulty=None, limits=self.limits
            )
            conformity = conformity_problems(verdict.checks, target) if verdict.checks else []
            if verdict.passed and not conformity:
                return []
            return [f"the module was rejected: {'; '.join([*conformity, verdict.reason])}"]

        try:
            result = self.agent.ask(self.prompt(record, target, class_name), ANSWER_SCHEMA, check=check)
        except LLMAgentError as err:
            reasons = [attempt.error for attempt in err.attempts]
            raise SynthesisError(
                f"the generation agent gave no valid env for {record['name']!r} in {len(err.attempts)} attempts: "
                + " | ".join(str(r) for r in reasons)
            ) from None
        return GeneratedModule(result.value["module"], [a.to_json() for a in result.attempts])
