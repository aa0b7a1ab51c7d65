"""Minimal chat/tool Gymnasium envs for the trainer tests (independent of trace_gym)."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up the value stored under a key.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    },
}
CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


class TextSpace(gym.Space):
    def __init__(self):
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str | dict | list)

    def sample(self, mask=None, probability=None):
        return "a"


class EchoEnv(gym.Env):
    """Single turn, plain-string observation (the third-party shape): say the secret letter."""

    def __init__(self):
        self.observation_space = TextSpace()
        self.action_space = TextSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.letter = "ab"[int(self.np_random.integers(2))]
        return f"Reply with the single letter {self.letter}.", {}

    def step(self, action):
        text = action if isinstance(action, str) else action.get("content", "")
        reward = 1.0 if self.letter in text else 0.0
        return "done", reward, True, False, {}


class ParityEnv(gym.Env):
    """Single turn: reward 1 when the reply's UTF-8 bytes sum to an even number. A tiny random model at
    temperature 1 earns it about half the time, so the rewards of a group differ (non-zero advantages)."""

    def __init__(self):
        self.observation_space = TextSpace()
        self.action_space = TextSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return f"Task {int(self.np_random.integers(1000))}: reply with an even byte sum.", {}

    def step(self, action):
        text = action if isinstance(action, str) else str(action.get("content") or "")
        reward = 1.0 if sum(text.encode("utf-8", "replace")) % 2 == 0 else 0.0
        return "done", reward, True, False, {}


class LookupEnv(gym.Env):
    """Multi-turn tool env: call lookup(key), then answer with the value. Hints and oracle supported."""

    BASE = "You answer questions using tools."

    def __init__(self):
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self.tools = [LOOKUP_TOOL]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        self.key = f"k{int(self.np_random.integers(100))}"
        self.value = str(int(self.np_random.integers(1000)))
        system = self.BASE + (" Hint: call lookup first." if options.get("hint") else "")
        self.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"What is stored under {self.key}?"},
        ]
        self.turn = 0
        return list(self.messages), {"tools": self.tools, "base_system_prompt": self.BASE}

    def oracle_actions(self):
        return [
            {
                "content": "",
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"key": self.key})},
                    }
                ],
            },
            {"content": f"The value is {self.value}."},
        ]

    def step(self, action):
        self.turn += 1
        if isinstance(action, dict):
            content = action.get("content") or ""
            calls = [
                (c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in action.get("tool_calls") or []
            ]
        else:
            content = CALL_RE.sub("", action).strip()
            calls = []
            for block in CALL_RE.findall(action):
                try:
                    obj = json.loads(block)
                    calls.append((obj["name"], obj.get("arguments", {})))
                except (json.JSONDecodeError, KeyError, TypeError):
                    calls.append(("?", {}))
        info: dict[str, Any] = {"tools": self.tools}
        if calls:
            tool_calls = [
                {
                    "id": f"c{self.turn}{i}",
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps(a)},
                }
                for i, (n, a) in enumerate(calls)
            ]
            self.messages.append({"role": "assistant", "content": content, "tool_calls": tool_calls})
            for tc, (n, a) in zip(tool_calls, calls, strict=True):
                if n == "lookup" and isinstance(a, dict) and a.get("key") == self.key:
                    out = self.value
                else:
                    out, info["invalid_action"] = "error: unknown key or tool", "schema"
                self.messages.append({"role": "tool", "tool_call_id": tc["id"], "content": out})
            return list(self.messages), 0.0, False, self.turn >= 4, info
        self.messages.append({"role": "assistant", "content": content})
        reward = 1.0 if self.value in content else 0.0
        return list(self.messages), reward, True, False, info


class ThreeTurnChatEnv(gym.Env):
    """Always three assistant turns, whatever the agent says (multi-turn masks with real generation)."""

    def __init__(self):
        self.observation_space = TextSpace()
        self.action_space = TextSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"Hi {seed}"},
        ]
        return list(self.messages), {"tools": [LOOKUP_TOOL]}

    def step(self, action):
        self.messages.append({"role": "assistant", "content": action if isinstance(action, str) else ""})
        done = sum(m["role"] == "assistant" for m in self.messages) >= 3
        if not done:
            self.messages.append({"role": "tool", "tool_call_id": "x", "content": "result é ✓"})
        return list(self.messages), float(done), done, False, {}


class LevelParityEnv(gym.Env):
    """Issue 29's declarations on a single-turn chat env: integer levels (``difficulty_levels``, reset option
    ``difficulty``; the level is in the prompt), a hint (``options={"hint": True}`` with
    ``info["base_system_prompt"]``) and a shaped reward (``shaped_reward_key`` naming an entry of
    ``info["reward_components"]``). Success as in :class:`ParityEnv` (about half the time for the tiny model);
    the milestones reward is the share of the reply's first two bytes that are even."""

    BASE = "Reply with an even byte sum."
    difficulty_levels = (1, 2, 3)
    shaped_reward_key = "milestones"

    def __init__(self):
        self.observation_space = TextSpace()
        self.action_space = TextSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        self.level = int(options.get("difficulty", 3))
        if self.level not in self.difficulty_levels:
            raise ValueError(f"difficulty must be one of {self.difficulty_levels}")
        system = self.BASE + (" Hint: end with a space if the sum is odd." if options.get("hint") else "")
        self.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Level {self.level}, task {int(self.np_random.integers(1000))}."},
        ]
        return list(self.messages), {"base_system_prompt": self.BASE}

    def step(self, action):
        text = action if isinstance(action, str) else str(action.get("content") or "")
        data = text.encode("utf-8", "replace")
        reward = 1.0 if sum(data) % 2 == 0 else 0.0
        milestones = sum(b % 2 == 0 for b in data[:2]) / 2
        self.messages.append({"role": "assistant", "content": text})
        info = {"reward_components": {"milestones": milestones, "success": reward}}
        return list(self.messages), reward, True, False, info


def register() -> None:
    envs = (
        ("traintest/echo-v0", EchoEnv),
        ("traintest/parity-v0", ParityEnv),
        ("traintest/lookup-v0", LookupEnv),
        ("traintest/chat3-v0", ThreeTurnChatEnv),
        ("traintest/levels-v0", LevelParityEnv),
    )
    for name, cls in envs:
        if name not in gym.registry:
            gym.register(name, entry_point=cls)


register()  # so that "tests.train.toy_envs:traintest/echo-v0" works from any process
