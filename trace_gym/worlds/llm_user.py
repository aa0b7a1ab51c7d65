"""A user simulator played by an LLM behind an OpenAI-compatible endpoint (tau-bench style).

The LLM gets the user's instruction (who they are, what they want, what they know) as its system prompt and
keeps its own conversation with the roles flipped: the agent's messages are ``user`` messages to the LLM and
the LLM's answers are the simulated user's messages. The conversation ends when the LLM writes ``###STOP###``
(kept in the reply, as the scripted user does), or after ``max_replies`` replies.

Defaults are deterministic where the server allows it (temperature 0 and a fixed seed), so that an env using
it stays as reproducible as the server is. It is an option, never the default, of trace's envs: the scripted
user needs no server and is byte-for-byte deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_gym.openai_client import OpenAIClient
from trace_gym.worlds.user import STOP, UserReply, UserSimulator

SYSTEM_TEMPLATE = """You are a user interacting with a customer-service agent.

Instruction: {instruction}

Rules:
- Generate one line at a time to simulate the user's message.
- Do not give away all the instruction at once. Only provide the information necessary for the current step.
- Do not hallucinate information that is not provided in the instruction. If the agent asks for something \
the instruction does not say, say that you do not know or do not remember it.
- When the instruction goal is satisfied, or the agent cannot help any further, write '{stop}' on its own \
as your message to end the conversation.
- Try to make the conversation as natural as possible, and stick to the personality in the instruction."""

# The agent's greeting that the LLM answers with its opening request.
GREETING = "Hi! How can I help you today?"


@dataclass
class LLMUser(UserSimulator):
    """``instruction`` is the task from the user's side (goal, known facts, personality)."""

    instruction: str
    model: str
    client: OpenAIClient = field(default_factory=OpenAIClient)
    temperature: float = 0.0
    seed: int | None = 0
    max_tokens: int = 256
    max_replies: int = 30  # a runaway conversation ends here even if the LLM never stops
    system_template: str = SYSTEM_TEMPLATE
    greeting: str = GREETING
    messages: list[dict[str, Any]] = field(default_factory=list)  # the LLM's side, roles flipped
    replies: int = 0

    def opening(self) -> str:
        system = self.system_template.format(instruction=self.instruction, stop=STOP)
        self.messages = [{"role": "system", "content": system}]
        self.replies = 0
        return self._say(self.greeting)

    def reply(self, agent_message: str) -> UserReply:
        if not self.messages:
            self.opening()  # a reply before the opening still has the instruction in front of it
        text = self._say(agent_message)
        self.replies += 1
        if STOP in text:
            return UserReply(text, done=True)
        if self.replies >= self.max_replies:
            return UserReply(f"{text}\n{STOP}".strip(), done=True)
        return UserReply(text)

    def _say(self, agent_message: str) -> str:
        self.messages.append({"role": "user", "content": agent_message})
        answer = self.client.chat(
            self.model,
            self.messages,
            temperature=self.temperature,
            seed=self.seed,
            max_tokens=self.max_tokens,
        )
        text = (answer.content or "").strip()
        self.messages.append({"role": "assistant", "content": text})
        return text
