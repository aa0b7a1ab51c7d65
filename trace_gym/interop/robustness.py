"""Robustness wrappers: the same task behind a different tool surface.

Each wrapper presents the inner env's tools under a *view* and translates both ways, so any trace env (and any
stack of these wrappers) keeps working and its verifier still sees the original calls:

* :class:`RenameTools`: consistent, seeded renaming of tool names and argument names (schemas, ``required``,
  descriptions, the system prompt's mentions, error messages, the conversation's past calls);
* :class:`DistractorTools`: extra plausible tools that do nothing for the task;
* :class:`ShuffleTools`: a new tool order in ``info["tools"]`` every episode (seeded by the instance);
* :class:`PerturbDescriptions`: meaning-preserving rewording of tool and parameter descriptions.

All are seeded and deterministic (same wrapper seed and env seed, same view, byte for byte) and rename-aware:
``wrapper.oracle_actions()`` (or ``env.get_wrapper_attr("oracle_actions")()`` on the outermost wrapper)
returns the inner env's reference solution in the view's names, and replaying it still scores 1.0.

Translation rules
    Actions: calls are parsed with the env's own parser and forwarded as an OpenAI message with inner names;
    a name the view does not show (an original name hidden by a rename) is forwarded escaped as ``?name``, so
    the inner env rejects it exactly like any unknown tool or argument (a renamed env cannot be solved with the
    old names). Text that does not parse, and plain replies, are forwarded unchanged.
    Observations: past assistant calls and tool messages are shown with the view's names; tool-name mentions
    in the system prompt, and tool and argument names in error messages, are translated. Successful tool
    outputs are data and stay as they are.
Distractor calls
    reach the base env as calls of an unknown tool, so they change nothing and count towards its
    ``max_invalid_turns`` (a policy cannot stall on them forever); the wrapper answers them with the distractor's
    own neutral output, reports ``info["invalid_action"] = None`` for them and counts them in
    ``info["distractor_calls"]``.
"""

from __future__ import annotations

import copy
import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from trace_gym.core.parsing import ActionParseError, parse_action
from trace_gym.core.spaces import AssistantTurnSpace

ESCAPE = "?"  # prefix of a hidden original name forwarded to the inner env (which then rejects it)
# A name with the character before it: prose words ("zip code") are translated only where they read as names.
IDENTIFIER = re.compile(r"(?P<before>^|.)(?P<name>\?[A-Za-z_]\w*|\b[A-Za-z_]\w*\b)", re.DOTALL)
NAME_MARKS = ("'", '"', "`", "(")
ERROR_PREFIXES = ("Error", "[environment]")


def env_tools(env: gym.Env) -> list[dict[str, Any]]:
    """The tool schemas an env (or wrapper stack) shows: the nearest ``tools`` attribute, else none."""
    try:
        return copy.deepcopy(list(env.get_wrapper_attr("tools")))
    except AttributeError:
        return []


class ToolViewWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Base class: a renamed/extended/reworded view of the inner env's tools, translated both ways.

    Subclasses set ``tool_names`` / ``arg_names`` (inner -> view, bijective) and override :meth:`view_tools`
    (the fixed tool list), :meth:`episode_tools` (per-episode order) and :meth:`tool_output`.
    """

    def __init__(
        self,
        env: gym.Env,
        tool_names: Mapping[str, str] | None = None,
        arg_names: Mapping[str, str] | None = None,
    ):
        gym.Wrapper.__init__(self, env)
        self.inner_tools = env_tools(env)
        inner_names = [t["function"]["name"] for t in self.inner_tools]
        self.inner_args = sorted(
            {a for t in self.inner_tools for a in t["function"].get("parameters", {}).get("properties", {})}
        )
        self.tool_out = {name: (tool_names or {}).get(name, name) for name in inner_names}
        self.arg_out = {name: (arg_names or {}).get(name, name) for name in self.inner_args}
        for label, mapping in (("tool", self.tool_out), ("argument", self.arg_out)):
            if len(set(mapping.values())) != len(mapping):
                raise ValueError(f"{type(self).__name__}: {label} renaming is not one-to-one: {mapping}")
        self.tool_in = {v: k for k, v in self.tool_out.items()}
        self.arg_in = {v: k for k, v in self.arg_out.items()}
        # Original names the view hides: forwarded escaped (unknown inside), unescaped on the way back.
        self.hidden = (set(self.tool_out) - set(self.tool_in)) | (set(self.arg_out) - set(self.arg_in))
        self.tools = self.view_tools([self._rename_schema(t) for t in self.inner_tools])
        self.action_space = AssistantTurnSpace(self.tools)
        self._episode_tools: list[dict[str, Any]] = self.tools
        self._shown: list[dict[str, Any]] = []  # translated messages of this episode (append-only)

    # ---- hooks ------------------------------------------------------------------------------------------------
    def view_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The fixed tool list of the view, given the inner tools under their view names."""
        return tools

    def episode_tools(self, first_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools as ``info["tools"]`` shows them this episode (e.g. reordered)."""
        return self.tools

    def tool_output(self, name: str, content: str) -> str | None:
        """Replace the inner answer to a call of ``name`` (view name); ``None`` keeps the translated answer."""
        return None

    # ---- gymnasium API ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._shown = []
        shown = self._observation(obs)
        self._episode_tools = self.episode_tools(shown)
        self._sync_value_pool()
        return shown, self._info(info, [])

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(self.inner_action(action))
        before = len(self._shown)
        shown = self._observation(obs)
        return shown, reward, terminated, truncated, self._info(info, shown[before:])

    def oracle_actions(self) -> list[dict[str, Any]]:
        """The inner env's reference solution in this view's names."""
        return [self.outer_message(a) for a in self.env.get_wrapper_attr("oracle_actions")()]

    # ---- view -> inner -----------------------------------------------------------------------------------------
    def inner_action(self, action: Any) -> Any:
        try:
            turn = parse_action(action)
        except ActionParseError:
            return action  # the inner env reports the same parse error
        if not turn.tool_calls:
            return action
        calls = []
        for i, call in enumerate(turn.tool_calls):
            arguments = {self._inner_name(k, self.arg_in, self.arg_out): v for k, v in call.arguments.items()}
            name = self._inner_name(call.name, self.tool_in, self.tool_out)
            calls.append(
                {
                    "id": call.id or f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
                }
            )
        return {"content": turn.content, "tool_calls": calls}

    @staticmethod
    def _inner_name(name: str, inward: dict[str, str], outward: dict[str, str]) -> str:
        if name in inward:
            return inward[name]
        return ESCAPE + name if name in outward else name  # a hidden original name must stay unknown

    # ---- inner -> view -----------------------------------------------------------------------------------------
    def outer_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        message = dict(message)
        role = message.get("role", "assistant")
        content = message.get("content")
        if isinstance(content, str):
            if role == "system":
                message["content"] = self._translate_text(content, args=False)
            elif role in ("user", "tool") and content.startswith(ERROR_PREFIXES):
                message["content"] = self._translate_text(content, bare_tools=True)
        if message.get("tool_calls"):
            message["tool_calls"] = [self._outer_call(c) for c in message["tool_calls"]]
        if role == "tool" and isinstance(message.get("name"), str):
            message["name"] = self._outer_name(message["name"], self.tool_out)
            replaced = self.tool_output(message["name"], message.get("content") or "")
            if replaced is not None:
                message["content"] = replaced
        return message

    def _outer_call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        call = dict(call)
        fn = dict(call.get("function", {}))
        if isinstance(fn.get("name"), str):
            fn["name"] = self._outer_name(fn["name"], self.tool_out)
        arguments = fn.get("arguments")
        decoded = arguments
        if isinstance(arguments, str):
            try:
                decoded = json.loads(arguments)
            except json.JSONDecodeError:
                decoded = None
        if isinstance(decoded, dict):
            renamed = {self._outer_name(k, self.arg_out): v for k, v in decoded.items()}
            fn["arguments"] = (
                json.dumps(renamed, ensure_ascii=False) if isinstance(arguments, str) else renamed
            )
        call["function"] = fn
        return call

    def _outer_name(self, name: str, outward: dict[str, str]) -> str:
        if name.startswith(ESCAPE):  # escaped by this wrapper (else by an outer one, which unescapes it)
            return name[len(ESCAPE) :] if name[len(ESCAPE) :] in self.hidden else name
        return outward.get(name, name)

    def _translate_text(self, text: str, args: bool = True, bare_tools: bool = False) -> str:
        """Tool (and argument) names in free text, in view names: a name counts where it reads as one
        (contains ``_``, or follows a quote, backtick or parenthesis), so "the zip code" stays prose;
        ``bare_tools``: every tool name counts (error messages, where tool names are the subject)."""

        def sub(match: re.Match[str]) -> str:
            before, name = match.group("before"), match.group("name")
            marked = "_" in name or before in NAME_MARKS or (bare_tools and name in self.tool_out)
            if not marked:
                return match.group(0)
            outward = {**self.arg_out, **self.tool_out} if args else self.tool_out
            return before + self._outer_name(name, outward)

        return IDENTIFIER.sub(sub, text)

    def _rename_schema(self, tool: dict[str, Any]) -> dict[str, Any]:
        tool = copy.deepcopy(tool)
        fn = tool["function"]
        fn["name"] = self.tool_out[fn["name"]]
        fn["description"] = self._translate_text(fn.get("description", ""))
        params = fn.get("parameters", {})
        if "properties" in params:
            params["properties"] = {self.arg_out[k]: v for k, v in params["properties"].items()}
            for spec in params["properties"].values():
                if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                    spec["description"] = self._translate_text(spec["description"])
        if "required" in params:
            params["required"] = [self.arg_out.get(k, k) for k in params["required"]]
        return tool

    def _observation(self, obs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Inner conversations only grow, so each message is translated once per episode.
        for message in obs[len(self._shown) :]:
            self._shown.append(self.outer_message(message))
        return [copy.deepcopy(m) for m in self._shown[: len(obs)]]

    def _info(self, info: dict[str, Any], new_messages: list[dict[str, Any]]) -> dict[str, Any]:
        info = dict(info)
        info["tools"] = copy.deepcopy(self._episode_tools)
        if isinstance(info.get("base_system_prompt"), str):
            info["base_system_prompt"] = self._translate_text(info["base_system_prompt"], args=False)
        return info

    def _sync_value_pool(self) -> None:
        # The view's action space samples arguments from the instance's values, under the view's names.
        pool = getattr(self.env.action_space, "value_pool", {})
        self.action_space.set_value_pool({self.arg_out.get(k, k): v for k, v in pool.items()})


# ---- renaming -------------------------------------------------------------------------------------------------
SYNONYMS: dict[str, tuple[str, ...]] = {
    "get": ("fetch", "retrieve", "read", "load"),
    "find": ("lookup", "search", "locate", "resolve"),
    "list": ("enumerate", "show", "browse"),
    "cancel": ("void", "abort", "revoke"),
    "modify": ("update", "change", "edit", "amend"),
    "return": ("refund", "send_back"),
    "exchange": ("swap", "trade"),
    "transfer": ("handoff", "escalate"),
    "respond": ("reply", "answer", "message"),
    "calculate": ("compute", "evaluate"),
    "details": ("info", "record", "data"),
    "id": ("key", "ref", "identifier"),
    "ids": ("keys", "refs", "identifiers"),
    "user": ("customer", "client", "account"),
    "order": ("purchase",),
    "product": ("article", "catalog_item"),
    "email": ("email_address", "mail"),
    "message": ("text", "body"),
    "new": ("replacement", "target"),
}
STYLES = ("snake", "camel", "prefixed", "suffixed")


class RenameTools(ToolViewWrapper):
    """Consistent, seeded renaming of every tool and argument (``get_order_details`` -> ``fetchPurchaseInfo``).

    Words are swapped for synonyms and the name is restyled (snake, camel, ``fn_`` prefix, ``_tool`` suffix);
    one seed gives one renaming, fixed for the wrapper's life (so its action space is fixed). Every new name
    differs from every original one, so the old names are unknown in the view.
    """

    def __init__(self, env: gym.Env, seed: int = 0, rename_tools: bool = True, rename_args: bool = True):
        gym.utils.RecordConstructorArgs.__init__(
            self, seed=seed, rename_tools=rename_tools, rename_args=rename_args
        )
        rng = np.random.default_rng([seed, 1])
        tools = env_tools(env)
        tool_names = [t["function"]["name"] for t in tools]
        arg_names = sorted(
            {a for t in tools for a in t["function"].get("parameters", {}).get("properties", {})}
        )
        taken = set(tool_names) | set(arg_names)
        style = STYLES[int(rng.integers(len(STYLES)))]
        tool_map = _rename_all(tool_names, rng, style, taken, ("fn_", "_tool")) if rename_tools else {}
        taken |= set(tool_map.values())
        arg_map = _rename_all(arg_names, rng, "snake", taken, ("the_", "_value")) if rename_args else {}
        self.seed = seed
        super().__init__(env, tool_names=tool_map, arg_names=arg_map)


def _rename_all(
    names: list[str], rng: np.random.Generator, style: str, taken: set[str], marks: tuple[str, str]
) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for name in names:
        words = [w for w in name.split("_") if w]
        # Synonyms in the wrapper's style first; a name without synonyms gets a marker style instead.
        styles = [style] * 20 + ["prefixed", "suffixed"] * 10 + ["numbered"] * 100
        for attempt, how in enumerate(styles):
            swapped = [_synonym(w, rng) for w in words]
            new = (
                _style(swapped, how, marks)
                if how != "numbered"
                else f"{_style(swapped, style, marks)}_{attempt}"
            )
            if new not in taken and new not in mapping.values():
                break
        else:  # pragma: no cover - numbered names always find a free one
            raise ValueError(f"cannot find a fresh name for {name!r}")
        mapping[name] = new
    return mapping


def _synonym(word: str, rng: np.random.Generator) -> str:
    options = SYNONYMS.get(word.lower())
    return options[int(rng.integers(len(options)))] if options else word


def _style(words: list[str], style: str, marks: tuple[str, str]) -> str:
    parts = [p for w in words for p in w.split("_")]
    if style == "camel":
        return parts[0].lower() + "".join(p.capitalize() for p in parts[1:])
    if style == "prefixed":
        return marks[0] + "_".join(parts)
    if style == "suffixed":
        return "_".join(parts) + marks[1]
    return "_".join(parts)


# ---- distractors ----------------------------------------------------------------------------------------------
def _schema(properties: dict[str, str], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": d} for k, d in properties.items()},
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


# (name, description, parameters, neutral output): plausible tools of unrelated back-office systems.
DISTRACTORS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "get_weather_forecast",
        "Get the weather forecast for a city for the next three days.",
        _schema({"city": "city name"}),
        '{"forecast": "unavailable for this region"}',
    ),
    (
        "search_knowledge_base",
        "Search the internal knowledge base for articles about a topic.",
        _schema({"query": "search terms"}),
        '{"articles": []}',
    ),
    (
        "send_internal_memo",
        "Send a memo to another department. Does not reach customers.",
        _schema({"department": "department name", "text": "memo text"}),
        '{"status": "queued"}',
    ),
    (
        "get_exchange_rate",
        "Get the exchange rate between two currencies.",
        _schema({"base": "currency code, like USD", "quote": "currency code, like EUR"}),
        '{"rate": null, "note": "rates are not available"}',
    ),
    (
        "log_agent_note",
        "Write a private note into the agent's scratch log.",
        _schema({"note": "the note"}),
        '{"logged": true}',
    ),
    (
        "check_store_hours",
        "Return the opening hours of a physical store.",
        _schema({"store": "store name or city"}),
        '{"hours": "no physical store found"}',
    ),
    (
        "create_calendar_event",
        "Create an event in the agent's calendar.",
        _schema({"title": "event title", "date": "YYYY-MM-DD"}),
        '{"created": true}',
    ),
    (
        "translate_text",
        "Translate text into another language.",
        _schema({"text": "text to translate", "language": "target language"}),
        '{"translation": ""}',
    ),
)


class DistractorTools(ToolViewWrapper):
    """Adds ``count`` plausible tools (seeded choice from :data:`DISTRACTORS`) that do nothing for the task.

    Their calls are answered with a neutral output and change nothing (see the module docstring). The
    distractors sit at seeded positions among the real tools.
    """

    def __init__(self, env: gym.Env, count: int = 3, seed: int = 0):
        gym.utils.RecordConstructorArgs.__init__(self, count=count, seed=seed)
        if not 0 <= count <= len(DISTRACTORS):
            raise ValueError(f"count must be in 0..{len(DISTRACTORS)}, got {count}")
        self.seed = seed
        rng = np.random.default_rng([seed, 2])
        real = {t["function"]["name"] for t in env_tools(env)}
        pool = [d for d in DISTRACTORS if d[0] not in real]
        chosen = [pool[int(i)] for i in rng.choice(len(pool), size=min(count, len(pool)), replace=False)]
        self.distractors = {name: output for name, _, _, output in chosen}
        self._specs = [
            {"type": "function", "function": {"name": n, "description": d, "parameters": p}}
            for n, d, p, _ in chosen
        ]
        self._positions = rng.integers(0, 1 + len(real), size=len(chosen)).tolist() if chosen else []
        super().__init__(env)

    def view_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        tools = list(tools)
        for spec, position in zip(self._specs, self._positions, strict=True):
            tools.insert(min(position, len(tools)), copy.deepcopy(spec))
        return tools

    def tool_output(self, name: str, content: str) -> str | None:
        if name in self.distractors and content.startswith("Error: unknown tool"):
            return self.distractors[name]
        if content.startswith("Error: unknown tool") and "Available tools: " in content:
            head, _, names = content.partition("Available tools: ")
            listed = {n.strip() for n in names.rstrip(".").split(",") if n.strip()}
            return f"{head}Available tools: {', '.join(sorted(listed | set(self.distractors)))}."
        return None

    def _info(self, info: dict[str, Any], new_messages: list[dict[str, Any]]) -> dict[str, Any]:
        info = super()._info(info, new_messages)
        tool_messages = [m for m in new_messages if m.get("role") == "tool"]
        distractor = [m for m in tool_messages if m.get("name") in self.distractors]
        info["distractor_calls"] = len(distractor)
        if distractor and info.get("invalid_action") == "unknown_tool":
            # The inner env saw the distractor calls as unknown tools; report the first real error, if any.
            info["invalid_action"] = next(
                (_error_kind(m["content"]) for m in tool_messages if m not in distractor and _is_error(m)),
                None,
            )
        return info


def _is_error(message: dict[str, Any]) -> bool:
    return str(message.get("content", "")).startswith("Error")


def _error_kind(content: str) -> str:
    if content.startswith("Error: unknown tool"):
        return "unknown_tool"
    if content.startswith("Error: invalid arguments"):
        return "schema"
    return "precondition"


# ---- order and wording ----------------------------------------------------------------------------------------
class ShuffleTools(ToolViewWrapper):
    """A different tool order in ``info["tools"]`` every episode, drawn from the wrapper seed and the instance.

    The action space keeps the fixed order (a space must not change between episodes).
    """

    def __init__(self, env: gym.Env, seed: int = 0):
        gym.utils.RecordConstructorArgs.__init__(self, seed=seed)
        self.seed = seed
        super().__init__(env)

    def episode_tools(self, first_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        instance = zlib.crc32(json.dumps(first_messages, sort_keys=True).encode())
        order = np.random.default_rng([self.seed, 3, instance]).permutation(len(self.tools))
        return [self.tools[int(i)] for i in order]


REWORDINGS: tuple[tuple[str, str], ...] = (
    (r"\bGet\b", "Retrieve"),
    (r"\bFind\b", "Look up"),
    (r"\bList\b", "Return a list of"),
    (r"\bSend\b", "Deliver"),
    (r"\bReplace\b", "Swap"),
    (r"\bRequest\b", "Ask for"),
    (r"\bEvaluate\b", "Compute"),
    (r"\bChange\b", "Update"),
    (r"\bNeeds\b", "Requires"),
    (r"\bOnly for\b", "Reserved for"),
    (r"\bUse it to\b", "It serves to"),
)
PREFIXES = ("", "Tool: ", "Purpose: ", "Use this to: ")


class PerturbDescriptions(ToolViewWrapper):
    """Meaning-preserving rewording of tool and parameter descriptions, fixed per seed.

    Per description (seeded): verbs swapped for synonyms, sentences after the first shuffled, an optional
    neutral prefix. Names, schemas and types stay as they are.
    """

    def __init__(self, env: gym.Env, seed: int = 0):
        gym.utils.RecordConstructorArgs.__init__(self, seed=seed)
        self.seed = seed
        self._rng = np.random.default_rng([seed, 4])
        super().__init__(env)

    def view_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        tools = copy.deepcopy(tools)
        for tool in tools:
            fn = tool["function"]
            fn["description"] = self._reword(fn.get("description", ""))
            for spec in fn.get("parameters", {}).get("properties", {}).values():
                if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                    spec["description"] = self._reword(spec["description"])
        return tools

    def _reword(self, text: str) -> str:
        rng = self._rng
        for pattern, replacement in REWORDINGS:
            if rng.random() < 0.7:
                text = re.sub(pattern, replacement, text)
        sentences = re.split(r"(?<=[.!?])\s+", text.strip())
        if len(sentences) > 2:
            rest = sentences[1:]
            sentences = [sentences[0]] + [rest[int(i)] for i in rng.permutation(len(rest))]
        prefix = PREFIXES[int(rng.integers(len(PREFIXES)))]
        text = " ".join(s for s in sentences if s)
        return prefix + (text[:1].lower() + text[1:] if prefix and text else text)


def robust(
    env: gym.Env,
    seed: int = 0,
    distractors: int = 3,
    rename: bool = True,
    shuffle: bool = True,
    perturb: bool = True,
) -> gym.Env:
    """All four wrappers, in the order distractors -> descriptions -> renaming -> shuffle."""
    if distractors:
        env = DistractorTools(env, count=distractors, seed=seed)
    if perturb:
        env = PerturbDescriptions(env, seed=seed)
    if rename:
        env = RenameTools(env, seed=seed)
    if shuffle:
        env = ShuffleTools(env, seed=seed)
    return env
