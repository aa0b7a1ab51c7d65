"""Step 4 renders tools as the run does: gate data, ``trace compare``'s models and the pipeline's MoE and router
all take the tool format (and engine) the adapters were trained with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from toy_envs import LOOKUP_TOOL  # tests/train, on the path from conftest

from tests.compose.helpers import randomise_gates
from trace_train.chat import tools_system_text


def _formats_in(text: str) -> set[str]:
    return {f for f in ("json", "compact") if tools_system_text([LOOKUP_TOOL], f) in text}


@pytest.mark.parametrize("tool_format", ["json", "compact"])
def test_gate_data_is_rendered_in_the_runs_tool_format(composition, tool_format):
    from tests.compose.helpers import lookup_gate_args
    from trace_train.compose.data import collect_gate_data

    args = lookup_gate_args(base_episodes_per_env=1, min_reward=0.0, tool_format=tool_format)
    envs = args.envs
    examples, _ = collect_gate_data(composition, composition.tokenizer, envs, args)
    assert {e.slot for e in examples} == {0, 1, 2, 3}
    for e in examples:
        assert _formats_in(composition.tokenizer.decode(e.input_ids)) == {tool_format}


def test_compare_builds_every_model_in_the_requested_format(composition):
    from trace_train.compose.compare import make_policy
    from trace_train.compose.config import CompareArgs

    args = CompareArgs(
        target="traintest/lookup-v0", composition="unused", tool_format="compact", engine="simple"
    )
    for name in ("base", "cap1", "moe", "router"):
        policy = make_policy(name, composition, composition.tokenizer, {}, args)
        assert (policy.renderer.tool_format, policy.engine) == ("compact", "simple"), name


@pytest.mark.parametrize("method", ["moe", "router"])
def test_the_pipelines_composed_rows_use_the_base_sections_format(
    composition, compose_base, adapters, tmp_path, method
):
    from trace_train.compose.artefact import save_composition
    from trace_train.pipeline.stages.evaluation import _composed_policy

    randomise_gates(composition, seed=1)
    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    cfg = SimpleNamespace(
        base=SimpleNamespace(dtype="float32", engine="cached", tool_format="compact"),
        target=SimpleNamespace(env_id="traintest/lookup-v0"),
    )
    policy, why = _composed_policy(
        method,
        str(compose_base),
        {f"cap{i}": {"adapter": str(p)} for i, p in enumerate(adapters)},
        {"artefact": str(art)},
        cfg,
    )
    assert why == "" and policy.renderer.tool_format == "compact"
