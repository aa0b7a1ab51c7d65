"""The LLM generation path keeps the target's format (issue 26): the prompt carries the target's system prompt
and tool schemas verbatim with the instruction to keep them; a generated env must declare its target, and one
that changes the target's format (a tool dropped, the prompt edited) is rejected by ``trace check``'s
conformity results with the reason. The generator is a stand-in OpenAI server (tests/openai_standin.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trace_gym.synthesis
from tests.openai_standin import StandinServer
from trace_gym.llm_agent import LLMAgent
from trace_gym.openai_client import OpenAIClient
from trace_gym.synthesis.emit import SynthesisError
from trace_gym.synthesis.generation_agent import (
    GenerationAgent,
    target_context,
    target_problem,
)
from trace_gym.synthesis.sandbox import Limits
from trace_gym.synthesis.static_check import static_check

TARGET = "trace/retail-v2"
CLASS = "ProductLookupV0"
RECORD = {"name": "product-lookup", "description": "read the product a request needs before acting on it"}
LIMITS = Limits(cpu_seconds=120, memory_bytes=3 * 1024**3, wall_seconds=300)
CONFORMING = (Path(trace_gym.synthesis.__file__).parent / "example_target_env.py").read_text()
TOOLS_ANCHOR = (
    "    @property\n    def tools(self) -> list[dict[str, Any]]:\n        return self.target.tools\n"
)
PROMPT_ANCHOR = '        return obs, {**info, "source": self.source_info()}\n'
NON_CONFORMING = {
    # the tool list without the target's last tool (a generated env that keeps "only the tools it needs")
    "dropped_tool": CONFORMING.replace(
        TOOLS_ANCHOR, TOOLS_ANCHOR.replace("self.target.tools", "self.target.tools[:-1]")
    ),
    # the system prompt with one sentence of the target's added (an env that "helps" the agent)
    "edited_prompt": CONFORMING.replace(
        PROMPT_ANCHOR,
        '        obs = [{**obs[0], "content": obs[0]["content"] + "\\nThe user is already authenticated."}, *obs[1:]]\n'
        + PROMPT_ANCHOR,
    ),
    "no_target": CONFORMING.replace("    target_id: ClassVar[str] = TARGET\n", ""),
}
REASONS = {
    "dropped_tool": "format conformity: conformity/tools: seed 0: tools: the env lacks the target's tool "
    "'respond_to_user' (13 tools, the target 14)",
    "edited_prompt": "format conformity: conformity/system_prompt: seed 0: line",
    "no_target": 'the env does not declare its target: ProductLookupV0 needs target_id = "trace/retail-v2"',
}


def answers(*modules: str):
    queue = [json.dumps({"module": m}) for m in modules]

    def respond(request):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond


def generate(*modules: str, attempts: int):
    with StandinServer(respond=answers(*modules)) as server:
        agent = LLMAgent(OpenAIClient(base_url=server.base_url), "stand-in", max_attempts=attempts)
        try:
            return GenerationAgent(agent, seeds=6, limits=LIMITS)(RECORD, TARGET, CLASS), server.requests
        except SynthesisError as err:
            return err, server.requests


def test_the_variants_are_what_they_say():
    assert all(static_check(source) == [] for source in [CONFORMING, *NON_CONFORMING.values()])
    assert all(source != CONFORMING for source in NON_CONFORMING.values())


def test_the_prompt_carries_the_targets_instructions_and_tools_verbatim():
    tools, policy = target_context(TARGET)
    with StandinServer(respond=answers(CONFORMING)) as server:
        agent = LLMAgent(OpenAIClient(base_url=server.base_url), "stand-in", max_attempts=1)
        prompt = GenerationAgent(agent).prompt(RECORD, TARGET, "HagglingV0")
    assert len(policy) > 1000 and policy in prompt
    assert json.dumps(tools, indent=1) in prompt and f"all {len(tools)} of the target's tools" in prompt
    assert "keep its format exactly" in prompt and "Any difference rejects the module" in prompt
    assert f'target_id = "{TARGET}"' in prompt and "class HagglingV0(gym.Env)" in prompt


def test_a_module_that_declares_no_target_is_refused_before_it_runs():
    assert target_problem(CONFORMING, CLASS, TARGET) is None
    assert target_problem(NON_CONFORMING["no_target"], CLASS, TARGET) == REASONS["no_target"]
    error, requests = generate(NON_CONFORMING["no_target"], attempts=1)
    assert isinstance(error, SynthesisError) and REASONS["no_target"] in str(error)
    # what must never run is named first: the static check's problems come before the missing target
    error, _ = generate(NON_CONFORMING["no_target"] + "\nx = eval('1')\n", attempts=1)
    assert "'eval' is not allowed" in str(error) and "does not declare its target" not in str(error)


@pytest.mark.slow
def test_a_conforming_module_is_accepted():
    module, requests = generate(CONFORMING, attempts=1)
    assert not isinstance(module, SynthesisError), module
    assert module.source == CONFORMING and len(requests) == 1


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["dropped_tool", "edited_prompt"])
def test_a_module_that_changes_the_targets_format_is_rejected_with_the_reason(variant):
    error, _ = generate(NON_CONFORMING[variant], attempts=1)
    assert isinstance(error, SynthesisError), "a non-conforming module was accepted"
    assert REASONS[variant] in str(error), str(error)


@pytest.mark.slow
def test_the_reason_goes_back_to_the_model_and_a_conforming_retry_passes():
    module, requests = generate(NON_CONFORMING["dropped_tool"], CONFORMING, attempts=2)
    assert not isinstance(module, SynthesisError), module
    assert module.source == CONFORMING and len(module.attempts) == 2
    retry = requests[1]["messages"][-1]["content"]
    assert "the env lacks the target's tool 'respond_to_user'" in retry
