"""A finite set of sensible candidate actions for the current state of any trace env.

Classic RL libraries need a fixed, finite action space; a chat/tool env has an unbounded one. The candidate set
is built in *slots*, so that a slot keeps its meaning from episode to episode:

* ``per_tool`` slots per tool, each holding one call of that tool (or one whole turn that starts with it):
  first the reference solution's calls of the tool not made yet (the instance's oracle) *whose ids and numbers
  the conversation has already shown*, then calls whose arguments are instance values already seen (the
  env's value pool, filtered by what the user said and the tools answered), then calls with arguments drawn
  from the schema and the value pool (guesses);
* ``replies`` slots of messages to the user: the oracle's replies not sent yet whose ids and numbers are
  known, then generic replies.

The "known" filter keeps the candidates honest: an oracle call or reply is offered only once an agent could
have written it from the conversation (every token with a digit, ``@`` or ``#`` in it occurs in what the
system, the user or the tools said, or is an enum value of the schema), so a policy cannot skip the lookups
that reveal an id or a count. Plain words and money amounts (which agents compute) are always writable.

Inside a tool's slots (and among the replies) candidates are ordered by a hash of their text, so the oracle's
call is not always in the same slot: a policy has to tell candidates apart by their features (see
:mod:`trace_gym.interop.sb3`), not by position. An env can define ``candidate_actions()`` (returning a list
of actions) to replace all of this; the list is then cut or padded (with generic replies) to the same size.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from trace_gym.core.parsing import ActionParseError, parse_action
from trace_gym.core.spaces import AssistantTurnSpace

GENERIC_REPLIES = (
    "Could you give me more details about your request?",
    "Could you please confirm (yes/no)?",
    "Is there anything else I can help you with?",
    "I'm sorry, I cannot help with that.",
)
VALUE = re.compile(r"[#\w.@+-]+")
# Tokens an agent cannot make up before it has seen them: anything with a digit (ids, counts, days), an email
# "@" or an id "#". Money amounts (digits with two decimals, like "30.12" or "$1,026.71") are the exception:
# agents compute totals and differences themselves, and a reply that states one also names the order or items
# it is about, whose ids are gated.
TOKEN = re.compile(r"[#\w.@+-]+")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
DIGIT = re.compile(r"\d")
AMOUNT = re.compile(r"\d+\.\d{2}")


def id_like(text: str) -> list[str]:
    tokens = (t.strip(".-+") for t in TOKEN.findall(THOUSANDS.sub("", text)))
    return [t for t in tokens if ("@" in t or "#" in t or DIGIT.search(t)) and not AMOUNT.fullmatch(t)]


@dataclass(frozen=True)
class Candidate:
    """One candidate action with what the numeric view needs to describe it."""

    action: dict[str, Any]
    tool: str | None  # first called tool, None for a reply
    text: str  # canonical JSON of the action (hash, features)
    from_oracle: bool  # for diagnostics only; never shown to a policy


def canonical(action: dict[str, Any]) -> str:
    return json.dumps(action, sort_keys=True, ensure_ascii=False)


def conversation_values(messages: list[dict[str, Any]]) -> set[str]:
    """Every value-like token the user said or a tool answered (ids, emails, numbers, words)."""
    seen: set[str] = set()
    for message in messages:
        if message.get("role") in ("user", "tool") and isinstance(message.get("content"), str):
            seen.update(VALUE.findall(message["content"]))
    return seen


def leaf_values(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [v for item in value.values() for v in leaf_values(item)]
    if isinstance(value, list):
        return [v for item in value for v in leaf_values(item)]
    return [str(value)]


class CandidateGenerator:
    """Candidate actions of the current state of ``env`` (a trace env or a stack of trace wrappers)."""

    def __init__(self, env: gym.Env, per_tool: int = 2, replies: int = 4, seed: int = 0):
        self.env = env
        self.tools = _tools(env)
        self.tool_names = [t["function"]["name"] for t in self.tools]
        self._schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in self.tools}
        self.per_tool = per_tool
        self.replies = replies
        self.size = per_tool * len(self.tool_names) + replies
        self.seed = seed
        self.plan: list[Candidate] = []
        self.rng = np.random.default_rng(seed)
        self._done: Counter[str] = Counter()  # canonical texts of the assistant turns taken so far
        self._read = 0  # messages of the episode already scanned for them

    def start_episode(self, messages: list[dict[str, Any]] | None = None) -> None:
        """Read the instance's reference solution (once per episode) and reseed the argument draws.

        ``messages``, the observation after reset, may already hold assistant turns (a derived env's prefix,
        played by the target's oracle): they are not the agent's, and the reference solution (the
        continuation) does not include them, so they count as read."""
        try:
            plan = list(self.env.get_wrapper_attr("oracle_actions")())
        except (AttributeError, NotImplementedError):
            plan = []
        # One call per candidate: a multi-call oracle turn may use ids its own first call reveals.
        self.plan = [self._candidate(a, True) for action in plan for a in _single_calls(action)]
        self._done, self._read = Counter(), len(messages or [])
        digest = hashlib.sha256(canonical({"plan": [c.text for c in self.plan]}).encode()).digest()
        self.rng = np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])

    def candidates(self, messages: list[dict[str, Any]]) -> list[Candidate]:
        """Exactly :attr:`size` candidates for the conversation ``messages`` of the current episode."""
        custom = _custom_candidates(self.env)
        if custom is not None:
            return self._fixed_size([self._candidate(a, False) for a in custom])
        if len(messages) < self._read:
            raise ValueError("the conversation is shorter than before: call start_episode() after reset()")
        for message in messages[self._read :]:
            if message.get("role") == "assistant":
                for single in _single_calls(message):
                    self._done[canonical(_normal(single))] += 1
        self._read = len(messages)
        # An oracle action that occurs k times in the plan is pending until it was taken k times.
        occurrence: Counter[str] = Counter()
        pending = []
        for candidate in self.plan:
            if self._done[candidate.text] <= occurrence[candidate.text]:
                pending.append(candidate)
            occurrence[candidate.text] += 1
        seen = conversation_values(messages)
        said = "\n".join(
            str(m.get("content") or "") for m in messages if m.get("role") in ("system", "user", "tool")
        )
        pending = [c for c in pending if self._known(c, said)]
        slots: list[Candidate] = []
        for name in self.tool_names:
            slots += self._tool_slots(name, pending, seen)
        slots += self._reply_slots(pending)
        return slots

    def _known(self, candidate: Candidate, said: str) -> bool:
        """Whether every id-like token of the candidate occurs in ``said`` or is an enum value of its tool."""
        enums: set[str] = set()
        for call in candidate.action.get("tool_calls") or []:
            schema = self._schemas.get(call["function"]["name"], {})
            for spec in schema.get("properties", {}).values():
                enums.update(str(v) for v in spec.get("enum", []) if isinstance(spec, dict))
        values = [candidate.action.get("content") or ""]
        values += [
            v
            for c in candidate.action.get("tool_calls") or []
            for v in leaf_values(c["function"]["arguments"])
        ]
        for value in values:
            if value in enums:
                continue
            if any(token not in said for token in id_like(value)):
                return False
        return True

    # ---- slots --------------------------------------------------------------------------------------------------
    def _tool_slots(self, name: str, pending: list[Candidate], seen: set[str]) -> list[Candidate]:
        chosen: dict[str, Candidate] = {}
        for candidate in pending:
            if candidate.tool == name and len(chosen) < self.per_tool:
                chosen.setdefault(candidate.text, candidate)
        schema = next(t["function"] for t in self.tools if t["function"]["name"] == name)
        for attempt in range(4 * self.per_tool):
            if len(chosen) >= self.per_tool:
                break
            arguments = self._arguments(
                schema.get("parameters", {}), seen, prefer_seen=attempt < 2 * self.per_tool
            )
            candidate = self._candidate(_call(name, arguments), False, normal=True)
            chosen.setdefault(candidate.text, candidate)
        while len(chosen) < self.per_tool:  # tools without parameters have one distinct call: repeat it
            extra = self._candidate(_call(name, {}), False, normal=True)
            chosen[f"{extra.text}#{len(chosen)}"] = extra
        return sorted(chosen.values(), key=self._order)

    def _reply_slots(self, pending: list[Candidate]) -> list[Candidate]:
        chosen: dict[str, Candidate] = {}
        for candidate in pending:
            if candidate.tool is None and len(chosen) < self.replies:
                chosen.setdefault(candidate.text, candidate)
        for text in GENERIC_REPLIES:
            if len(chosen) >= self.replies:
                break
            candidate = self._candidate({"content": text}, False, normal=True)
            chosen.setdefault(candidate.text, candidate)
        while len(chosen) < self.replies:
            text = GENERIC_REPLIES[len(chosen) % len(GENERIC_REPLIES)]
            candidate = self._candidate({"content": text}, False, normal=True)
            chosen[f"{candidate.text}#{len(chosen)}"] = candidate
        return sorted(chosen.values(), key=self._order)

    def _arguments(self, schema: dict[str, Any], seen: set[str], prefer_seen: bool) -> dict[str, Any]:
        space: AssistantTurnSpace = self._space()
        properties = schema.get("properties", {})
        required = set(schema.get("required", properties))
        arguments: dict[str, Any] = {}
        for key, sub in properties.items():
            if key not in required:
                continue
            pool = [v for v in space.value_pool.get(key, []) if str(v) in seen] if prefer_seen else []
            if pool and sub.get("type") in ("string", "integer", "number"):
                arguments[key] = pool[int(self.rng.integers(len(pool)))]
            elif pool and sub.get("type") == "array":
                arguments[key] = [pool[int(self.rng.integers(len(pool)))]]
            else:
                arguments[key] = space.sample_arguments(sub, self.rng, key)
        return arguments

    def _space(self) -> AssistantTurnSpace:
        space = self.env.action_space
        return space if isinstance(space, AssistantTurnSpace) else AssistantTurnSpace(self.tools)

    def _candidate(self, action: Any, from_oracle: bool, normal: bool = False) -> Candidate:
        action = action if normal else _normal(action)
        calls = action.get("tool_calls") or []
        tool = calls[0]["function"]["name"] if calls else None
        return Candidate(action, tool, canonical(action), from_oracle)

    def _order(self, candidate: Candidate) -> bytes:
        return hashlib.sha256(f"{self.seed}:{candidate.text}".encode()).digest()

    def _fixed_size(self, candidates: list[Candidate]) -> list[Candidate]:
        candidates = candidates[: self.size]
        while len(candidates) < self.size:
            text = GENERIC_REPLIES[len(candidates) % len(GENERIC_REPLIES)]
            candidates.append(self._candidate({"content": text}, False))
        return candidates


def _tools(env: gym.Env) -> list[dict[str, Any]]:
    try:
        return list(env.get_wrapper_attr("tools"))
    except AttributeError:
        return []


def _custom_candidates(env: gym.Env) -> list[Any] | None:
    try:
        method = env.get_wrapper_attr("candidate_actions")
    except AttributeError:
        return None
    return list(method())


def _single_calls(action: Any) -> list[dict[str, Any]]:
    """A turn as one action per tool call (content on the first), or the reply itself."""
    normal = _normal(action)
    calls = normal.get("tool_calls") or []
    if len(calls) <= 1:
        return [normal]
    return [
        {"content": normal["content"] if i == 0 else "", "tool_calls": [call]} for i, call in enumerate(calls)
    ]


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}


def _normal(action: Any) -> dict[str, Any]:
    """An action as ``{"content", "tool_calls": [{"function": {"name", "arguments": dict}}]}`` (ids dropped),
    so an oracle action and the assistant message it produced compare equal."""
    try:
        turn = parse_action(action)
    except ActionParseError:
        return {"content": action if isinstance(action, str) else json.dumps(action, default=repr)}
    calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in turn.tool_calls]
    return {"content": turn.content, "tool_calls": calls} if calls else {"content": turn.content}
