"""A numeric view of any trace env for classic RL libraries (stable-baselines3, CleanRL, ...).

Observation
    ``Box(0, 1, (dim,), float32)``: features of the conversation (turn, last speaker, whether the last tool
    answer was an error, hashed words of the last message) followed by one block of features per candidate
    slot (see :mod:`trace_gym.interop.candidates`): reply or call, how often the candidate's tool was called
    and whether this exact action was already taken, the share of its argument values the conversation has
    shown, its numbers mentioned so far, and hashed words of its text. Nothing says which candidate the
    reference solution would take.
Action
    ``Discrete(n)``: the index of a candidate slot; the slot's action goes to the wrapped env as is.
Reward, termination, truncation
    The wrapped env's, unchanged (terminal verifier reward in [0, 1]). ``info`` keeps the wrapped env's keys
    except the tool schemas, plus ``info["action"]`` (the action taken, as JSON text).

Works on any trace env and on stacks of the robustness wrappers::

    env = CandidateActionEnv(gym.make("trace_gym:trace/retail-v2"))
    model = stable_baselines3.PPO("MlpPolicy", env).learn(10_000)
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

import gymnasium as gym
import numpy as np

from trace_gym.interop.candidates import Candidate, CandidateGenerator, conversation_values, leaf_values

ROLES = ("system", "user", "assistant", "tool")
WORD = re.compile(r"[a-z]+")
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def hashed_words(text: str, dims: int) -> np.ndarray:
    """Bag of words hashed into ``dims`` buckets, as shares of the words (so in [0, 1])."""
    return _hashed_words(text, dims).copy()


@functools.lru_cache(maxsize=4096)
def _hashed_words(text: str, dims: int) -> np.ndarray:
    vector = np.zeros(dims, dtype=np.float32)
    for word in WORD.findall(text.lower()):
        bucket = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % dims
        vector[bucket] += 1.0
    total = vector.sum()
    return vector / total if total else vector


class CandidateActionEnv(gym.Env[np.ndarray, np.int64]):
    """Fixed-size float observation and ``Discrete`` candidate action over a trace env (see module doc)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        env: gym.Env | str,
        per_tool: int = 2,
        replies: int = 4,
        words: int = 16,
        candidate_words: int = 8,
        seed: int = 0,
        reset_options: dict[str, Any] | None = None,
    ):
        self.env = gym.make(env) if isinstance(env, str) else env
        self.generator = CandidateGenerator(self.env, per_tool=per_tool, replies=replies, seed=seed)
        self.words = words
        self.candidate_words = candidate_words
        self.reset_options = dict(reset_options or {})
        self.render_mode = getattr(self.env, "render_mode", None)
        self.slot_dim = 7 + candidate_words
        self.global_dim = 3 + len(ROLES) + words
        dim = self.global_dim + self.generator.size * self.slot_dim
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(dim,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(self.generator.size)
        self.messages: list[dict[str, Any]] = []
        self.current: list[Candidate] = []
        self.max_turns = int(getattr(self.env.unwrapped, "max_turns", 30))

    # ---- gymnasium API ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options={**self.reset_options, **(options or {})})
        self.generator.start_episode(obs)
        return self._observe(obs), self._info(info)

    def step(self, action: Any):
        if not self.action_space.contains(np.int64(action)):
            raise ValueError(f"action must be an int in [0, {self.action_space.n}), got {action!r}")
        chosen = self.current[int(action)]
        obs, reward, terminated, truncated, info = self.env.step(chosen.action)
        info = self._info(info)
        info["action"] = chosen.text
        return self._observe(obs), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def candidate_actions(self) -> list[dict[str, Any]]:
        """The actions behind the current slots (slot ``i`` is action ``i``)."""
        return [c.action for c in self.current]

    # ---- features -----------------------------------------------------------------------------------------------
    def _observe(self, messages: list[dict[str, Any]]) -> np.ndarray:
        self.messages = messages
        self.current = self.generator.candidates(messages)
        seen = conversation_values(messages)
        said = " ".join(str(m.get("content") or "") for m in messages if m.get("role") in ("user", "tool"))
        numbers_said = set(NUMBER.findall(said))
        calls = [
            (c["function"]["name"], _arguments_key(c["function"].get("arguments")))
            for m in messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ]
        replies = {
            m.get("content") for m in messages if m.get("role") == "assistant" and not m.get("tool_calls")
        }
        last = messages[-1] if messages else {}
        turn = sum(m.get("role") == "assistant" for m in messages)
        head = [
            min(turn / max(self.max_turns, 1), 1.0),
            min(len(messages) / 100.0, 1.0),
            float(last.get("role") == "tool" and str(last.get("content", "")).startswith("Error")),
            *(float(last.get("role") == role) for role in ROLES),
        ]
        parts = [np.asarray(head, dtype=np.float32), hashed_words(str(last.get("content") or ""), self.words)]
        for candidate in self.current:
            parts.append(self._slot_features(candidate, seen, numbers_said, calls, replies))
        return np.clip(np.concatenate(parts), 0.0, 1.0).astype(np.float32)

    def _slot_features(
        self,
        candidate: Candidate,
        seen: set[str],
        numbers_said: set[str],
        calls: list[tuple[str, str]],
        replies: set[Any],
    ) -> np.ndarray:
        action_calls = candidate.action.get("tool_calls") or []
        values = [v for c in action_calls for v in leaf_values(c["function"].get("arguments", {}))]
        numbers = NUMBER.findall(candidate.action.get("content") or "")
        repeated = any(
            (c["function"]["name"], _arguments_key(c["function"].get("arguments"))) in calls
            for c in action_calls
        ) or (not action_calls and candidate.action.get("content") in replies)
        features = [
            float(candidate.tool is None),
            min(sum(name == candidate.tool for name, _ in calls) / 3.0, 1.0),
            float(repeated),
            sum(v in seen for v in values) / len(values) if values else 1.0,
            sum(n in numbers_said for n in numbers) / len(numbers) if numbers else 0.0,
            float(bool(numbers)),
            min(len(action_calls) / 4.0, 1.0),
        ]
        text = (
            candidate.action.get("content") or ""
            if candidate.tool is None
            else candidate.tool.replace("_", " ")
        )
        return np.concatenate(
            [np.asarray(features, dtype=np.float32), hashed_words(text, self.candidate_words)]
        )

    @staticmethod
    def _info(info: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in info.items() if k != "tools"}


def _arguments_key(arguments: Any) -> str:
    """Arguments as canonical JSON, whether they come as a dict or as JSON text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, sort_keys=True)
