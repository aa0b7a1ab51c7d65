"""Records of episodes run through the engine carry step 1's diagnosis (issue 28), as the text loop's do."""

from __future__ import annotations

import pytest

from trace_train.episodes import run_episodes
from trace_train.rollout import ResetSpec, SamplingConfig


@pytest.mark.parametrize("engine", [True, False])
def test_records_carry_the_first_failure_and_the_outcome(tiny_policy, engine):
    from trace_train.policies.scripted import scripted_agent

    policy = tiny_policy if engine else scripted_agent("oracle-stop:1")
    specs = [ResetSpec(seed=i, group=i) for i in range(2)]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=4)
    records = run_episodes(
        policy, "trace/retail-v2", specs, sampling, max_turns=2, batch_size=2, env_turn_limit=True
    )
    for record in records:
        assert record["outcome"] in (
            "out_of_turns",
            "stopped",
            "failed",
            "invalid_action_limit",
            "malformed_output",
        )
        assert "first_failure" in record
