"""Validation that trusts nothing: the static check, the sandbox, and the LLM generation agent's loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trace_gym.synthesis
from tests.openai_standin import StandinServer
from tests.synthesis.modules import BAD, CLASS, EXPECTED, GOOD, SNEAKY_WRITE
from trace_gym.llm_agent import LLMAgent
from trace_gym.openai_client import OpenAIClient
from trace_gym.synthesis.emit import SynthesisError, new_plugin_package, synthesize, validate_module
from trace_gym.synthesis.generation_agent import GenerationAgent
from trace_gym.synthesis.sandbox import Limits, check_in_sandbox
from trace_gym.synthesis.static_check import static_check

FAST = Limits(cpu_seconds=4, memory_bytes=3 * 1024**3, wall_seconds=90)


def test_the_example_module_is_clean_and_passes_the_sandbox():
    assert static_check(GOOD) == []
    verdict = validate_module(GOOD, CLASS, seeds=8, difficulty=None, limits=FAST)
    assert verdict.passed, verdict.reason
    assert {c["name"] for c in verdict.checks} >= {"check_env", "oracle", "determinism", "fuzz"}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_modules_are_rejected_with_a_clear_reason(name):
    verdict = validate_module(BAD[name], CLASS, seeds=8, difficulty=None, limits=FAST)
    assert not verdict.passed
    assert EXPECTED[name] in verdict.reason, verdict.reason


def test_the_runtime_guard_catches_what_the_static_check_misses(tmp_path):
    assert static_check(SNEAKY_WRITE) == []
    module = tmp_path / "sneaky.py"
    module.write_text(SNEAKY_WRITE)
    verdict = check_in_sandbox(module, CLASS, seeds=4, limits=FAST)
    assert not verdict.passed
    assert "open for writing" in verdict.reason and "trace-sneaky.npy" in verdict.reason
    assert not Path("/tmp/trace-sneaky.npy").exists()


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("x = ().__class__.__bases__[0].__subclasses__()", "dunder attribute '__class__'"),
        ("x = getattr(object, '__subclasses__')", "dunder attribute '__subclasses__'"),
        ("name = 'sys'\nx = getattr(object, name)", "computed attribute name"),
        ("import os", "import of 'os'"),
        ("from subprocess import run", "import from 'subprocess'"),
        ("from trace_gym.core.env import *", "star imports"),
        ("import numpy as np\nnp.save('x', [1])", "'save'"),
        ("x = __builtins__", "'__builtins__'"),
        ("x = compile('1', 'f', 'eval')", "'compile'"),
        ("from . import sibling", "relative imports"),
        ("def broken(:\n  pass", "syntax error"),
    ],
)
def test_static_check_names_the_problem_and_line(source, fragment):
    problems = static_check(source)
    assert problems and any(fragment in str(p) for p in problems), problems
    assert str(problems[0]).startswith("line ")


def _answers(*modules: str):
    queue = [json.dumps({"module": m}) for m in modules]

    def respond(request):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond


@pytest.mark.slow  # ~55 s: the conforming module's trace check runs retail itself
def test_generation_agent_feeds_the_rejection_back_and_retries():
    # the agent's modules must keep the target's format: the conforming example built on the target
    good = (Path(trace_gym.synthesis.__file__).parent / "example_target_env.py").read_text()
    bad = good + "\nLEAK = eval('1 + 1')\n"
    with StandinServer(respond=_answers(bad, good)) as server:
        agent = LLMAgent(OpenAIClient(base_url=server.base_url), "stand-in", max_attempts=3)
        module = GenerationAgent(agent, seeds=6, limits=Limits(cpu_seconds=120, wall_seconds=300))(
            {"name": "product-lookup", "description": "read the product a request needs before acting on it"},
            "trace/retail-v2",
            "ProductLookupV0",
        )
        assert module.source == good and len(module.attempts) == 2
        first_prompt = server.requests[0]["messages"][-1]["content"]
        assert "product-lookup" in first_prompt and "cancel_pending_order" in first_prompt
        retry = server.requests[1]["messages"][-1]["content"]
        assert "'eval' is not allowed" in retry


@pytest.mark.slow
def test_synthesize_a_capability_the_target_does_not_declare_registers_only_what_passes(tmp_path):
    package = new_plugin_package(tmp_path / "project", "my_trace_envs")
    records = [{"name": "order-status-lookup", "description": "tell an order's status after reading it"}]
    with StandinServer(respond=_answers(BAD["socket_import"])) as server:
        agent = LLMAgent(OpenAIClient(base_url=server.base_url), "stand-in", max_attempts=2)
        generator = GenerationAgent(agent, seeds=6, limits=FAST)
        [outcome] = synthesize(records, "trace/retail-v2", package, seeds=6, generator=generator, limits=FAST)
    assert not outcome.accepted and "import of 'socket'" in outcome.reason
    assert not (package / "order_status_lookup").exists()
    assert "socket" in (package / "_rejected" / "order_status_lookup.json").read_text()

    def fixed(record, target, class_name):  # a generator that returns a good module (no server needed)
        from trace_gym.synthesis.emit import GeneratedModule

        return GeneratedModule(GOOD.replace(CLASS, class_name))

    [outcome] = synthesize(records, "trace/retail-v2", package, seeds=6, generator=fixed, limits=FAST)
    assert outcome.accepted, outcome.reason
    files = sorted(p.name for p in (package / "order_status_lookup").iterdir())
    assert files == ["CARD.md", "__init__.py", "env.py", "spec.json", "validation.json"]
    spec = json.loads((package / "order_status_lookup" / "spec.json").read_text())
    assert spec["id"] == "trace/order-status-lookup-v0" and spec["generator"] == "llm"
    assert spec["tools"] == ["get_order_details", "get_product_details"]


def test_synthesize_refuses_an_output_that_is_not_a_package(tmp_path):
    with pytest.raises(SynthesisError, match="not a Python package"):
        synthesize([{"name": "precondition-checking"}], "trace/retail-v2", tmp_path, validate=False)


def test_the_static_check_allows_a_derived_env_and_nothing_around_it():
    ok = "from trace_gym.derived.env import DerivedCapabilityEnv\n"
    assert static_check(ok) == []
    assert static_check("from trace_gym.synthesis.emit import synthesize\n")  # not the emitter itself
    assert static_check("import trace_gym.synthesis.catalog\n")  # retired
