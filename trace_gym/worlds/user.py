"""User simulators for conversational envs.

The default is scripted and deterministic: it opens with its request, reveals a fact when the agent's message
asks for it (by keyword), answers confirmation questions as its task says, and ends the conversation when its
goal is met or when the agent keeps talking without progress. An LLM user behind an OpenAI-compatible
endpoint (``trace_gym.worlds.llm_user.LLMUser``) implements the same interface.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

STOP = "###STOP###"
CONFIRMATION_QUESTION = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|do you want|would you like|is that (ok|okay|correct|right))\b"
    r"|\(yes/no\)|\byes or no\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Fact:
    """Something the user knows and tells when asked: ``triggers`` are lower-case keywords of the question."""

    name: str
    value: str
    triggers: tuple[str, ...]

    def asked_in(self, message: str) -> bool:
        text = message.lower()
        return any(re.search(rf"\b{re.escape(t)}", text) for t in self.triggers)


@dataclass(frozen=True)
class UserReply:
    content: str
    done: bool = False


class UserSimulator(ABC):
    """The user side of a conversation. ``done`` in a reply ends the episode."""

    @abstractmethod
    def opening(self) -> str:
        """The user's first message."""

    @abstractmethod
    def reply(self, agent_message: str) -> UserReply:
        """Answer one message the agent addressed to the user."""


@dataclass
class ScriptedUser(UserSimulator):
    """Deterministic user driven by a task script.

    ``confirms`` decides the answer to confirmation questions (a callable gets the agent's message, so a task
    can confirm one action and refuse another). ``goal_met`` is checked on each agent message: once it holds,
    the user thanks the agent and stops. ``patience`` bounds the agent messages that neither ask for a fact
    nor a confirmation nor complete the goal; after that the user gives up.
    """

    request: str
    facts: Sequence[Fact] = ()
    confirms: bool | Callable[[str], bool] = True
    goal_met: Callable[[], bool] = lambda: False
    patience: int = 3
    told: set[str] = field(default_factory=set)
    _idle_turns: int = 0

    def opening(self) -> str:
        return self.request

    def reply(self, agent_message: str) -> UserReply:
        if self.goal_met():
            return UserReply(f"Thank you, that is all I needed. {STOP}", done=True)
        asked = [fact for fact in self.facts if fact.asked_in(agent_message)]
        if asked:
            self.told.update(fact.name for fact in asked)
            return UserReply(" ".join(fact.value for fact in asked))
        if CONFIRMATION_QUESTION.search(agent_message):
            agrees = self.confirms(agent_message) if callable(self.confirms) else self.confirms
            return UserReply("Yes, please go ahead." if agrees else "No, please do not do that.")
        self._idle_turns += 1
        if self._idle_turns > self.patience:
            return UserReply(f"This is not getting anywhere. Goodbye. {STOP}", done=True)
        return UserReply("Could you please help me with my request?")
