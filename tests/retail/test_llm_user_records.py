"""``user="llm"`` on trace/retail-v2, against the local OpenAI-compatible stand-in (127.0.0.1 only): the v1
verifier scores an LLM-played user's conversation (confirmations read off its replies, facts by their
markers) as it scores the scripted user's."""

from __future__ import annotations

import gymnasium as gym

from tests.openai_standin import standin_fixture  # noqa: F401 - the `standin` fixture
from tests.retail.conftest import play
from tests.retail.test_llm_user_option import user_like
from trace_gym.targets.retail.llm_user import RetailLLMUser


def test_oracle_scores_one_with_an_llm_played_user(standin):
    env = gym.make(
        "trace/retail-v2", user="llm", user_model="stand-in", user_base_url=standin.base_url
    ).unwrapped
    scored = 0
    for seed in range(12):
        scripted = gym.make("trace/retail-v2").unwrapped
        scripted.reset(seed=seed, options={"split": "train"})
        if len(scripted.task.requests) != 1 or scripted.task.requests[0].push:
            continue
        standin.respond = user_like(scripted.task)
        env.reset(seed=seed, options={"split": "train"})
        assert isinstance(env.episode.user, RetailLLMUser)
        reward, info, ended = play(env, env.oracle_actions())
        assert ended and reward == 1.0, (seed, info.get("reward_components"))
        scored += 1
    assert scored >= 3
