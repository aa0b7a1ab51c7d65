"""The LLM generation agent: an env module for a capability outside the catalog.

The prompt (``prompts/synthesis/generate_env.md``) gives the capability and example failures, the target's
tool schemas and policy, the env API and a complete example module. The answer is a JSON object
``{"module": source}``; :class:`~trace_gym.llm_agent.LLMAgent` parses it and runs the check, which is the
whole "trust nothing" validation (static check, then ``trace check`` in the sandbox). A rejected module's
reason goes back to the model for the next attempt, up to ``max_attempts`` in all; then synthesis reports the
capability as rejected with every attempt, and registers nothing. Works with any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from trace_gym.llm_agent import LLMAgent, LLMAgentError, render_prompt
from trace_gym.synthesis.emit import GeneratedModule, SynthesisError, validate_module
from trace_gym.synthesis.sandbox import Limits

PROMPT = "synthesis/generate_env.md"
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
        example = Path(__file__).with_name("example_env.py").read_text()
        return render_prompt(
            PROMPT,
            self.prompts_dir,
            capability=record,
            failures=failure_lines(record),
            target=target,
            tools_json=json.dumps(tools, indent=1),
            policy=policy,
            class_name=class_name,
            example=example.replace("StatusLookupV0", class_name),
        )

    def __call__(self, record: dict[str, Any], target: str, class_name: str) -> GeneratedModule:
        def check(value: Any) -> list[str]:
            verdict = validate_module(
                value["module"], class_name, seeds=self.seeds, difficulty=None, limits=self.limits
            )
            return [] if verdict.passed else [f"the module was rejected: {verdict.reason}"]

        try:
            result = self.agent.ask(self.prompt(record, target, class_name), ANSWER_SCHEMA, check=check)
        except LLMAgentError as err:
            reasons = [attempt.error for attempt in err.attempts]
            raise SynthesisError(
                f"the generation agent gave no valid env for {record['name']!r} in {len(err.attempts)} attempts: "
                + " | ".join(str(r) for r in reasons)
            ) from None
        return GeneratedModule(result.value["module"], [a.to_json() for a in result.attempts])
