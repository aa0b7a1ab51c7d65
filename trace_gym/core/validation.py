"""The validation suite behind ``trace check``; synthesis reuses it to vet generated envs.

Each check returns a :class:`CheckResult` with a figure (what it measured) so that reports show numbers, not
just ticks. The checks, in order:

* ``check_env``: Gymnasium's own checker on the unwrapped env, and the passive checker of ``gym.make``, with
  every warning counted as a failure;
* ``determinism``: the same seed and actions give identical instances, observations, rewards and infos;
* ``unique_instances``: share of distinct rendered instances over the seeds;
* ``oracle``: ``oracle_actions()`` scores 1.0 on every seed;
* ``degenerate/<policy>``: empty reply, immediate final answer, random valid tool calls, one call repeated,
  every write tool called; each must score near 0 on average;
* ``adversarial/<probe>``: the oracle with a shortcut in place of a capability (content-free confirmations,
  sprayed amounts, a status talker, another seed's oracle); each must score <= 0.02 on average;
* ``fuzz``: random strings, random JSON, wrong argument types and unicode never raise, are flagged in
  ``info["invalid_action"]`` when not a plain reply, and leave the world state unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env, data_equivalence

from trace_gym.core.env import ChatToolEnv

INVALID_KINDS = {None, "parse", "unknown_tool", "schema", "precondition"}
DegeneratePolicy = Callable[[ChatToolEnv, np.random.Generator], Iterator[Any]]


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    figure: str
    detail: str = ""


@dataclass(frozen=True)
class ValidationConfig:
    seeds: int = 100
    split: str | None = "train"
    min_unique_share: float = 0.99
    degenerate_seeds: int = 50
    degenerate_max_mean: float = 0.05
    adversarial_seeds: int = 50
    adversarial_max_mean: float = 0.02
    fuzz_seeds: int = 10
    fuzz_actions_per_seed: int = 40
    determinism_seeds: int = 5


def validate_env(
    env_id: str, config: ValidationConfig | None = None, **make_kwargs: Any
) -> list[CheckResult]:
    """Run every check on a registered env id; never raises for a failing env (failures are results)."""
    config = config or ValidationConfig()
    checks: list[tuple[str, Callable[[], CheckResult | list[CheckResult]]]] = [
        ("check_env", lambda: _check_gymnasium(env_id, make_kwargs)),
        ("determinism", lambda: _check_determinism(env_id, make_kwargs, config)),
        ("unique_instances", lambda: _check_unique(env_id, make_kwargs, config)),
        ("oracle", lambda: _check_oracle(env_id, make_kwargs, config)),
        ("degenerate", lambda: _check_degenerate(env_id, make_kwargs, config)),
        ("adversarial", lambda: _check_adversarial(env_id, make_kwargs, config)),
        ("fuzz", lambda: _check_fuzz(env_id, make_kwargs, config)),
        ("split_overlap", lambda: check_split_overlap(env_id, make_kwargs, config)),
    ]
    results: list[CheckResult] = []
    for name, run in checks:
        try:
            outcome = run()
        except Exception as err:  # noqa: BLE001 - a crashing check is a failed check, with its traceback
            detail = "".join(traceback.format_exception_only(type(err), err)).strip()
            results.append(CheckResult(name, False, "raised", detail + "\n" + traceback.format_exc(limit=4)))
            continue
        results.extend(outcome if isinstance(outcome, list) else [outcome])
    return results


CONTRACT_ATTRIBUTES = ("tools", "domain_tools", "world", "oracle_actions", "render_instance")


def _make(env_id: str, make_kwargs: dict[str, Any]) -> ChatToolEnv:
    env = gym.make(env_id, **make_kwargs).unwrapped
    # Duck-typed: adapters (e.g. reasoning-gym) implement the contract without subclassing ChatToolEnv.
    missing = [name for name in CONTRACT_ATTRIBUTES if not hasattr(env, name)]
    if missing:
        raise TypeError(
            f"{env_id} ({type(env).__name__}) lacks the trace env contract: no {', '.join(missing)}"
        )
    return env


def _reset(env: ChatToolEnv, seed: int, config: ValidationConfig, **options: Any):
    if config.split is not None:
        options["split"] = config.split
    return env.reset(seed=seed, options=options)


def _check_gymnasium(env_id: str, make_kwargs: dict[str, Any]) -> CheckResult:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id, **make_kwargs)
        check_env(env.unwrapped)
        # The passive checker wraps gym.make's env: exercise it with a reset and a step.
        env.reset(seed=0)
        env.step(env.action_space.sample())
        env.close()
    # Gymnasium's "is out of date" names a superseded id on purpose (e.g. trace/retail-v0): reported, not failed.
    superseded = sorted({str(w.message) for w in caught if "is out of date" in str(w.message)})
    messages = sorted({str(w.message) for w in caught} - set(superseded))
    return CheckResult(
        "check_env", not messages, f"{len(messages)} warnings", "\n".join(messages + superseded)
    )


def _rollout(env: ChatToolEnv, actions: list[Any]) -> list[Any]:
    trace = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


def _check_determinism(env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig) -> CheckResult:
    first, second = _make(env_id, make_kwargs), _make(env_id, make_kwargs)
    mismatches = []
    for seed in range(config.determinism_seeds):
        runs = []
        for env in (first, second):
            obs, info = _reset(env, seed, config)
            env.action_space.seed(seed)
            sampled = [env.action_space.sample() for _ in range(5)]
            obs2, info2 = _reset(env, seed, config)
            runs.append((obs, info, env.render_instance(), _rollout(env, env.oracle_actions()), obs2, info2))
            _reset(env, seed, config)
            runs[-1] += (_rollout(env, sampled),)
        if not data_equivalence(runs[0], runs[1], exact=True):
            mismatches.append(seed)
        elif not data_equivalence(runs[0][0], runs[0][4], exact=True):
            mismatches.append(seed)  # resetting twice with one seed must give one instance
    checked = config.determinism_seeds
    return CheckResult(
        "determinism",
        not mismatches,
        f"{checked - len(mismatches)}/{checked} seeds identical",
        f"differing seeds: {mismatches}" if mismatches else "",
    )


def _check_unique(env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig) -> CheckResult:
    env = _make(env_id, make_kwargs)
    digests = set()
    for seed in range(config.seeds):
        _reset(env, seed, config)
        digests.add(hashlib.sha256(env.render_instance().encode()).hexdigest())
    share = len(digests) / config.seeds
    return CheckResult(
        "unique_instances",
        share >= config.min_unique_share,
        f"{share:.1%} unique over {config.seeds} seeds",
        f"need >= {config.min_unique_share:.0%}",
    )


def _check_oracle(env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig) -> CheckResult:
    env = _make(env_id, make_kwargs)
    failures = []
    rewards = []
    for seed in range(config.seeds):
        _reset(env, seed, config)
        trace = _rollout(env, env.oracle_actions())
        reward = trace[-1][1] if trace and (trace[-1][2] or trace[-1][3]) else 0.0
        rewards.append(reward)
        if reward != 1.0:
            components = trace[-1][4].get("reward_components") if trace else None
            failures.append(f"seed {seed}: reward {reward} {components}")
    return CheckResult(
        "oracle",
        not failures,
        f"{sum(r == 1.0 for r in rewards)}/{len(rewards)} seeds at 1.0",
        "\n".join(failures[:10]),
    )


# ---- degenerate policies --------------------------------------------------------------------------------------
def _valid_call(
    env: ChatToolEnv, rng: np.random.Generator, tool: dict[str, Any] | None = None
) -> dict[str, Any]:
    tool = tool or env.tools[int(rng.integers(len(env.tools)))]
    fn = tool["function"]
    arguments = env.action_space.sample_arguments(fn.get("parameters", {}), rng)
    return {
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": fn["name"], "arguments": json.dumps(arguments)}}
        ],
    }


def _empty(env: ChatToolEnv, rng: np.random.Generator) -> Iterator[Any]:
    while True:
        yield ""


def _immediate_answer(env: ChatToolEnv, rng: np.random.Generator) -> Iterator[Any]:
    while True:
        yield "I have taken care of everything you asked for. Is there anything else I can help with?"


def _random_valid_calls(env: ChatToolEnv, rng: np.random.Generator) -> Iterator[Any]:
    while True:
        yield _valid_call(env, rng) if env.tools else "ok"


def _repeat_one_call(env: ChatToolEnv, rng: np.random.Generator) -> Iterator[Any]:
    action = _valid_call(env, rng) if env.tools else "ok"
    while True:
        yield action


def _every_write_tool(env: ChatToolEnv, rng: np.random.Generator) -> Iterator[Any]:
    for tool in env.domain_tools:
        if tool.kind == "write":
            yield _valid_call(env, rng, tool.schema)
    while True:
        yield "Done, everything is taken care of."


DEGENERATE_POLICIES: dict[str, DegeneratePolicy] = {
    "empty_reply": _empty,
    "immediate_answer": _immediate_answer,
    "random_valid_calls": _random_valid_calls,
    "repeat_one_call": _repeat_one_call,
    "every_write_tool": _every_write_tool,
}


def run_policy(env: ChatToolEnv, policy: DegeneratePolicy, seed: int, config: ValidationConfig) -> float:
    """Play one episode with a scripted policy; returns the final reward."""
    _reset(env, seed, config)
    rng = np.random.default_rng(seed)
    for action in policy(env, rng):
        _, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return float(reward)
    return 0.0


def _check_degenerate(
    env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig
) -> list[CheckResult]:
    env = _make(env_id, make_kwargs)
    results = []
    for name, policy in DEGENERATE_POLICIES.items():
        rewards = [run_policy(env, policy, seed, config) for seed in range(config.degenerate_seeds)]
        mean = float(np.mean(rewards))
        results.append(
            CheckResult(
                f"degenerate/{name}",
                mean <= config.degenerate_max_mean,
                f"mean reward {mean:.3f}, success {np.mean(np.array(rewards) == 1.0):.1%} over {len(rewards)} seeds",
                f"need mean <= {config.degenerate_max_mean}",
            )
        )
    return results


# ---- adversarial policies ---------------------------------------------------------------------------------------
# Each probe is the oracle (or a part of it) with the capability under test replaced by a shortcut. An env whose
# verifier checks what was done and said, not which words were used, scores each near 0. See docs/environments.md.
IDENTIFIER = re.compile(r"#?\b[A-Za-z_]*\d{4,}\b(?!\.\d)")
NUMBER = re.compile(r"(?<![\w#.])(\$?)(\d[\d,]*(?:\.\d+)?)(?![\w])")
STATUS_TALK = (
    "Status check: pending, processed, delivered, cancelled, shipped, returned, approved, rejected, completed, "
    "failed, open, closed, active, available, unavailable, yes, no, true, false. I cannot do that."
)
MAX_SPRAY = (
    120  # candidates per sprayed number: numbers seen (latest first), then pairwise sums and differences
)


def _amount_like(sign: str, number: str) -> bool:
    """A number that may be an amount or a count ($, cents, or at most four digits), not an id."""
    return bool(sign) or "." in number or len(number.replace(",", "")) <= 4


def _text_only(action: Any) -> bool:
    return isinstance(action, str) or (isinstance(action, dict) and not action.get("tool_calls"))


def _content(action: Any) -> str:
    return action if isinstance(action, str) else str(action.get("content") or "")


def _with_content(action: Any, content: str) -> Any:
    return content if isinstance(action, str) else {**action, "content": content}


def _call_names(action: Any) -> list[str]:
    if not isinstance(action, dict):
        return []
    return [str((c.get("function") or c).get("name", "")) for c in action.get("tool_calls") or []]


def _kinds(env: ChatToolEnv) -> dict[str, str]:
    return {tool.name: tool.kind for tool in getattr(env, "domain_tools", [])}


class AdversarialProbe:
    """Rewrites the oracle's actions of the current instance as it plays; ``applies`` says whether the rewrite
    changed anything. A probe with ``has_control`` first plays its control, the oracle with the faked part
    simply left out: when the control still scores 1.0, the env does not need that part on this seed (a
    library that never asks for a confirmation) and the seed does not count."""

    name = ""
    has_control = False

    def __init__(self, env: ChatToolEnv, oracle: list[Any], other: list[Any], control: bool = False):
        self.env, self.oracle, self.other, self.applies = env, oracle, other, False
        self.control = control

    def actions(self, observation: Callable[[], list[dict[str, Any]]]) -> Iterator[Any]:
        raise NotImplementedError


class ContentFreeConfirmation(AdversarialProbe):
    """Every message the oracle sends right before a write becomes "Shall I go ahead with <ids>? (yes/no)":
    the ids stay, the action and its details go."""

    name = "content_free_confirmation"
    has_control = True

    def actions(self, observation):
        kinds = _kinds(self.env)
        for i, action in enumerate(self.oracle):
            following = self.oracle[i + 1] if i + 1 < len(self.oracle) else None
            writes = any(kinds.get(n) == "write" for n in _call_names(following))
            if _text_only(action) and writes:
                ids = " ".join(dict.fromkeys(IDENTIFIER.findall(_content(action))))
                self.applies = True
                if self.control:
                    yield _with_content(action, "Let me take care of that.")
                else:
                    yield _with_content(
                        action, f"Shall I go ahead with {ids or 'that'}? Please confirm (yes/no)."
                    )
            else:
                yield action


def _spray(numbers: list[float]) -> list[str]:
    seen = list(dict.fromkeys(round(n, 2) for n in reversed(numbers)))  # latest first
    candidates = list(seen)
    recent = seen[:12]
    for a in recent:
        for b in recent:
            candidates += [round(a + b, 2), round(abs(a - b), 2)]
    unique = [c for c in dict.fromkeys(candidates) if c > 0][:MAX_SPRAY]
    return [f"{c:.2f}" for c in unique]


class AmountSpraying(AdversarialProbe):
    """Every amount the oracle says becomes the list of the amounts seen in the conversation so far (latest
    first), plus their pairwise sums and differences (a guesser's shotgun); ids stay as they are."""

    name = "amount_spraying"
    has_control = True

    def actions(self, observation):
        for action in self.oracle:
            text = _content(action)
            if not _text_only(action) or not any(_amount_like(*m) for m in NUMBER.findall(text)):
                yield action
                continue
            seen = []
            for message in observation()[1:]:  # not the system prompt
                for sign, number in NUMBER.findall(str(message.get("content") or "")):
                    if _amount_like(sign, number):
                        seen.append(float(number.replace(",", "")))
            spray = "" if self.control else ", ".join(_spray(seen))
            if not spray and not self.control:
                yield action
                continue
            self.applies = True

            def swap(m: re.Match[str], spray: str = spray) -> str:
                return f"{m.group(1)}{spray}" if _amount_like(m.group(1), m.group(2)) else m.group(0)

            yield _with_content(action, NUMBER.sub(swap, text))


class StatusTalker(AdversarialProbe):
    """The oracle's opening up to its first tool call when that call only reads (a login, say), then talk: a
    list of every common status word and the env's enum values, and "I cannot do that", never acting."""

    name = "status_talker"

    def actions(self, observation):
        self.applies = True
        kinds = _kinds(self.env)
        first_call = next((i for i, a in enumerate(self.oracle) if _call_names(a)), None)
        if first_call is not None and all(
            kinds.get(n) in ("read", "think") for n in _call_names(self.oracle[first_call])
        ):
            yield from self.oracle[: first_call + 1]
        enums = sorted(
            {
                str(value)
                for tool in getattr(self.env, "tools", [])
                for prop in tool["function"].get("parameters", {}).get("properties", {}).values()
                for value in prop.get("enum", [])
            }
        )
        talk = STATUS_TALK if not enums else f"{STATUS_TALK} Options: {', '.join(enums)}."
        while True:
            yield talk


class OtherSeedOracle(AdversarialProbe):
    """The oracle of another seed's instance, replayed on this one."""

    name = "other_seed_oracle"

    def actions(self, observation):
        self.applies = True
        yield from self.other


ADVERSARIAL_PROBES: tuple[type[AdversarialProbe], ...] = (
    ContentFreeConfirmation,
    AmountSpraying,
    StatusTalker,
    OtherSeedOracle,
)


def run_probe(
    env: ChatToolEnv,
    other_env: ChatToolEnv,
    probe_type: type[AdversarialProbe],
    seed: int,
    config: ValidationConfig,
) -> tuple[float, bool]:
    """Play one episode with a probe; returns (final reward, whether the probe applies to this seed)."""
    if probe_type.has_control:
        reward, applies = _play_probe(env, other_env, probe_type, seed, config, control=True)
        if not applies or reward == 1.0:
            return 0.0, False
    return _play_probe(env, other_env, probe_type, seed, config, control=False)


def _play_probe(
    env: ChatToolEnv,
    other_env: ChatToolEnv,
    probe_type: type[AdversarialProbe],
    seed: int,
    config: ValidationConfig,
    control: bool,
) -> tuple[float, bool]:
    other: list[Any] = []
    if probe_type is OtherSeedOracle:
        _reset(other_env, seed + 1, config)
        other = other_env.oracle_actions()
    obs, _ = _reset(env, seed, config)
    latest = [obs]
    probe = probe_type(env, env.oracle_actions(), other, control=control)
    for steps, action in enumerate(probe.actions(lambda: latest[0])):
        obs, reward, terminated, truncated, _ = env.step(action)
        latest[0] = obs
        if terminated or truncated:
            return float(reward), probe.applies
        if steps > 10 * getattr(env, "max_turns", 50):
            break
    return 0.0, probe.applies


def _check_adversarial(
    env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig
) -> list[CheckResult]:
    env, other_env = _make(env_id, make_kwargs), _make(env_id, make_kwargs)
    results = []
    for probe_type in ADVERSARIAL_PROBES:
        runs = [
            run_probe(env, other_env, probe_type, seed, config) for seed in range(config.adversarial_seeds)
        ]
        rewards = [r for r, applies in runs if applies]
        name = f"adversarial/{probe_type.name}"
        if not rewards:
            results.append(
                CheckResult(
                    name, True, "not applicable", "on no seed does the oracle need what the probe fakes"
                )
            )
            continue
        mean = float(np.mean(rewards))
        results.append(
            CheckResult(
                name,
                mean <= config.adversarial_max_mean,
                f"mean reward {mean:.3f}, success {np.mean(np.array(rewards) == 1.0):.1%} over {len(rewards)} seeds",
                f"need mean <= {config.adversarial_max_mean}",
            )
        )
    return results


# ---- fuzzing --------------------------------------------------------------------------------------------------
FUZZ_TEXT = [
    "[" * 5000 + '{"name": "x", "arguments": {}}' + "]" * 5000,  # nesting deep enough to hit recursion limits
    "",
    " ",
    "\x00",
    "🙂" * 50,
    "<tool_call>",
    "</tool_call>",
    "{",
    "[]",
    "null",
    "```json\n{\n```",
    "é\u202e",
]


def fuzz_action(env: ChatToolEnv, rng: np.random.Generator) -> Any:
    """One hostile action: random text, random JSON, wrong argument types, unknown tools, odd unicode, and
    Python values that are not JSON at all (sets, bytes, objects, hostile nesting, lone surrogates)."""
    kind = int(rng.integers(8))
    name = env.tools[int(rng.integers(len(env.tools)))]["function"]["name"] if env.tools else "tool"
    if kind == 0:
        return "".join(chr(int(c)) for c in rng.integers(1, 0x2FFF, size=int(rng.integers(0, 40))))
    if kind == 1:
        return FUZZ_TEXT[int(rng.integers(len(FUZZ_TEXT)))]
    if kind == 2:
        return json.dumps({"name": name, "arguments": {"x": [1, {"y": None}], "id": 3.5}})
    if kind == 3:  # right names, wrong types
        fn = next(t["function"] for t in env.tools if t["function"]["name"] == name) if env.tools else {}
        props = fn.get("parameters", {}).get("properties", {})
        wrong = {key: [int(rng.integers(9))] if rng.random() < 0.5 else {"bad": True} for key in props}
        return {"content": None, "tool_calls": [{"function": {"name": name, "arguments": wrong}}]}
    if kind == 4:
        return f'<tool_call>{{"name": "{name}", "arguments": "{{\\"a\\": }}"}}</tool_call>'
    if kind == 5:
        return {"content": 5, "tool_calls": "x"}
    if kind == 6:
        return {"content": "", "tool_calls": [{"function": {"name": "💥", "arguments": "[]"}}]}
    return _odd_value(env, name, rng)


def _odd_value(env: ChatToolEnv, name: str, rng: np.random.Generator) -> Any:
    """A Python value no JSON parser produces, as an action or inside a call's arguments."""
    nested: list[Any] = []
    deep: dict[str, Any] = {}
    for _ in range(20_000):
        nested, deep = [nested], {"a": deep}
    values: list[Any] = [
        {1, 2},
        b"bytes",
        object(),
        nested,
        deep,
        float("nan"),
        float("inf"),
        -float("inf"),
        10**5000,  # beyond Python's int-to-str digit limit: json.dumps raises on it
        -(2**70),
        {3: "int key"},
        ("a", "tuple"),
    ]
    value = values[int(rng.integers(len(values)))]
    fn = next((t["function"] for t in env.tools if t["function"]["name"] == name), {}) if env.tools else {}
    key = next(iter(fn.get("parameters", {}).get("properties", {})), "x")
    choice = int(rng.integers(4))
    if choice == 0:
        return {"content": "", "tool_calls": [{"function": {"name": name, "arguments": {key: value}}}]}
    if choice == 1:
        return value
    if choice == 2:
        return {"content": value, "tool_calls": []}
    # a lone surrogate in a value a tool may store (it is hashed with the state at the episode's end)
    return f'<tool_call>{{"name": "{name}", "arguments": {{"{key}": "\\udc80"}}}}</tool_call>'


def _check_fuzz(env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig) -> CheckResult:
    env = _make(env_id, make_kwargs)
    problems: list[str] = []
    steps = invalid = 0
    for seed in range(config.fuzz_seeds):
        _reset(env, seed, config)
        rng = np.random.default_rng(10_000 + seed)
        for _ in range(config.fuzz_actions_per_seed):
            action = fuzz_action(env, rng)
            before = env.world.state_hash() if env.world is not None else None
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except Exception as err:  # noqa: BLE001 - the contract is that step never raises on bad input
                problems.append(f"seed {seed}: step raised {err!r} on {action!r}")
                break
            steps += 1
            kind = info.get("invalid_action")
            if kind not in INVALID_KINDS:
                problems.append(f"seed {seed}: invalid_action {kind!r} is not a known kind")
            if kind is not None:
                invalid += 1
                if env.world is not None and env.world.state_hash() != before:
                    problems.append(f"seed {seed}: invalid action {action!r} changed the world state")
            if not env.observation_space.contains(obs) or not 0.0 <= reward <= 1.0:
                problems.append(f"seed {seed}: bad observation or reward after {action!r}")
            if terminated or truncated:
                _reset(env, seed, config)
    return CheckResult(
        "fuzz",
        not problems,
        f"{steps} fuzzed steps, {invalid} flagged invalid, {len(problems)} problems",
        "\n".join(problems[:10]),
    )


def check_split_overlap(env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig) -> CheckResult:
    """Test instances (seeds 0..seeds-1 of the test split) whose task key occurs among the keys of train seeds
    0..5*seeds-1. Must be 0 for every trace env: a seed split is not a content split (trace_gym.core.splits).
    """
    from trace_gym.core.splits import split_overlap

    env = _make(env_id, make_kwargs)
    key = getattr(env, "task_key", env.render_instance)

    def keys(split: str, n: int) -> list[str]:
        out = []
        for seed in range(n):
            env.reset(seed=seed, options={"split": split})
            out.append(key())
        return out

    overlap = split_overlap(keys("train", 5 * config.seeds), keys("test", config.seeds))
    content = "content split" if getattr(env, "content_split", False) else "seed split only"
    return CheckResult(
        "split_overlap", overlap.overlapping_instances == 0, overlap.figure, f"{content}; must be 0"
    )
