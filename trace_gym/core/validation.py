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
  sprayed amounts, a status talker, another seed's oracle); each must score <= 0.02 above chance on average,
  plus the hedging and policy probes: a wrong figure beside the right one, a wrong figure then "sorry,
  correction", a negated proposal, questions turned into statements that ask nothing, each write repeated
  until the tools refuse it, a refusal said before the reads that justify it (issue 52: a right guess is no
  checked refusal), and the position shortcut (take the first listed id); "another seed's oracle"
  and the position shortcut are judged against chance (tiny answer spaces, k listed candidates); on a derived
  env (one that names its source task: ``source_info()``) also the oracle continuation without its last tool
  call, and another source task's continuation (issue 52);
* ``fuzz``: random strings, random JSON, wrong argument types, unicode, huge integers, NaN/inf and deep
  nesting never raise, are flagged in ``info["invalid_action"]`` when not a plain reply, and leave the world
  state unchanged;
* ``split_overlap`` (test instances found in train) and ``first_message_overlap`` (test episodes opening
  like a train episode; reported, not failed);
* ``conformity/<aspect>``: for an env that declares a target (``target_id``), the system prompt, the tools, the
  user simulator and the observation after reset are the target's on the same source task
  (:mod:`trace_gym.core.conformity`); an env without a declared target gets one ``conformity`` result marked
  skipped (``skipped``: not failed, and not a pass either).
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
    skipped: bool = False  # not applicable to this env: neither a pass nor a failure (passed stays True)


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
    conformity_seeds: int = 50


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
        ("first_message_overlap", lambda: check_first_message_overlap(env_id, make_kwargs, config)),
        ("conformity", lambda: check_format_conformity(env_id, make_kwargs, config)),
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
    # Gymnasium's "is out of date" names a superseded id on purpose (e.g. an rg id after a bump): reported, not failed.
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
    derived_only = False  # played only on derived envs (:func:`is_derived`)

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


# said after a probe's actions until the episode ends (the user leaves, or the turn limit): an env that does
# not end on the probe's last action still reaches its verdict
CLOSING = "Is there anything else I can help you with?"


def is_derived(env: Any) -> bool:
    """An env whose episodes start inside a source task of a target, and name it (``source_info()``)."""
    return callable(getattr(env, "source_info", None))


# A message that turns an action down on a precondition: "cannot be cancelled", "not available", "not enough".
REFUSAL = re.compile(
    r"\b(?:cannot|can ?not|can[’']t|unable to)\b|\bnot (?:available|enough|possible|allowed|permitted|sufficient)\b"
    r"|\binsufficient\b|\bout of stock\b",
    re.IGNORECASE,
)


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    """A call as (name, canonical arguments): the same read made twice has one key."""
    fn = call.get("function", call)
    arguments = fn.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return str(fn.get("name", "")), arguments
    return str(fn.get("name", "")), json.dumps(arguments, sort_keys=True, default=str)


class RefusalWithoutRead(AdversarialProbe):
    """The oracle's first refusal (a message turning an action down: "cannot be cancelled", "not available",
    "not enough") said *before* the reads that justify it, those reads made right after it, the rest unchanged,
    then closing replies: a right guess must not pass for a checked refusal (issue 52). The reads are those
    since the oracle's last write or statement (a message that asks nothing) not made before. Control: the
    oracle with those reads left out; where it still scores 1.0 the refusal needs none of them."""

    name = "refusal_without_read"
    has_control = True

    def actions(self, observation):
        kinds = _kinds(self.env)
        done = {
            _call_key(c)
            for m in observation()
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        }
        start, refusal = 0, None
        for i, action in enumerate(self.oracle):
            if _text_only(action) and REFUSAL.search(_content(action)):
                refusal = i
                break
            if any(kinds.get(n) == "write" for n in _call_names(action)) or (
                _text_only(action) and "?" not in _content(action)
            ):
                start = i + 1
        if refusal is None:
            return
        for action in self.oracle[:start]:
            done |= {_call_key(c) for c in (action.get("tool_calls") or []) if isinstance(action, dict)}
        window, reads = [], []
        for action in self.oracle[start:refusal]:
            names = _call_names(action)
            if not names:
                window.append(action)
                continue
            if any(kinds.get(n) != "read" for n in names):
                return  # a step that does more than read: no clean cut between reads and talk
            fresh = [c for c in action["tool_calls"] if _call_key(c) not in done]
            done |= {_call_key(c) for c in action["tool_calls"]}
            kept = [c for c in action["tool_calls"] if c not in fresh]
            if kept:  # a repeat of an earlier read stays where it was
                window.append({**action, "tool_calls": kept})
            if fresh:
                reads.append({**action, "tool_calls": fresh})
        if not reads:
            return
        self.applies = True
        yield from self.oracle[:start]
        yield from window
        yield self.oracle[refusal]
        if not self.control:
            yield from reads
        yield from self.oracle[refusal + 1 :]
        while True:
            yield CLOSING


class OracleWithoutLastCall(AdversarialProbe):
    """Derived envs: the oracle continuation with its last tool call left out (the rest played as is, then
    closing replies). It must fail: where it passes, the call was not needed and the oracle should not make
    it, or the verdict does not check what the call does."""

    name = "oracle_without_last_call"
    derived_only = True

    def actions(self, observation):
        last = max((i for i, action in enumerate(self.oracle) if _call_names(action)), default=None)
        if last is None:  # a continuation that only talks has no call to leave out
            return
        self.applies = True
        for i, action in enumerate(self.oracle):
            if i != last:
                yield action
            elif len(action["tool_calls"]) > 1:  # one step of several calls loses its last one only
                yield {**action, "tool_calls": action["tool_calls"][:-1]}
        while True:
            yield CLOSING


class OtherSourceOracle(AdversarialProbe):
    """Derived envs: the oracle continuation of another source task (another target task, not another start
    of the same one: the next seed of a derived env may be the same task at another decision point), at the
    same level, then closing replies. The other task is the first of the next seeds whose continuation does
    the same calls in the same order (shape), else the first whose continuation differs at all; a task whose
    continuation is the same actions is never taken (two tasks that need the same calls is a right answer)."""

    name = "other_source_oracle"
    derived_only = True
    other_source = True

    def actions(self, observation):
        if not self.other:
            return
        self.applies = True
        yield from self.other
        while True:
            yield CLOSING


OTHER_SOURCE_TRIES = 20  # seeds after the probed one searched for another source task


def _call_shape(actions: list[Any]) -> tuple[Any, ...]:
    """Per action the tools it calls (sorted), or that it talks."""
    return tuple(tuple(sorted(_call_names(a))) or "say" for a in actions)


def _other_source(env: ChatToolEnv, other_env: ChatToolEnv, seed: int, config: ValidationConfig) -> list[Any]:
    """The continuation of another source task for :class:`OtherSourceOracle` (``[]``: none found)."""
    if not is_derived(env):
        return []
    _reset(env, seed, config)
    own_task, own = env.source_info()["task_key"], env.oracle_actions()
    own_json, fallback = json.dumps(own, sort_keys=True, default=str), []
    for offset in range(1, OTHER_SOURCE_TRIES + 1):
        _reset(other_env, seed + offset, config)
        other = other_env.oracle_actions()
        if other_env.source_info()["task_key"] == own_task:
            continue
        if json.dumps(other, sort_keys=True, default=str) == own_json:
            continue
        if _call_shape(other) == _call_shape(own):
            return other
        fallback = fallback or other
    return fallback


def _wrong(number: str) -> str:
    """A different figure in the same format (the last digit before any decimals moved by one, or 1 -> 2)."""
    body = number.replace(",", "")
    value = float(body) + (1 if float(body) < 9 else -1)
    return f"{value:.{len(body.split('.')[1])}f}" if "." in body else str(int(value))


def _figures_swapped(text: str, swap: Callable[[str, str], str]) -> str:
    """``text`` with every figure (an amount, a count or a short number, not an id) rewritten by ``swap``."""

    def one(m: re.Match[str]) -> str:
        return swap(m.group(1), m.group(2)) if _amount_like(m.group(1), m.group(2)) else m.group(0)

    return FIGURE.sub(one, text)


def _states_figures(action: Any) -> bool:
    return _text_only(action) and any(_amount_like(*m) for m in FIGURE.findall(_content(action)))


class HedgedAnswer(AdversarialProbe):
    """Every figure the oracle states comes with a wrong one beside it ("-140 or -139"; the wrong one first on
    odd turns), and a word answer in ``<answer>`` tags with another seed's answer beside it: one answer must
    be one figure. Control: the figures (the answer) left out."""

    name = "hedged_answer"
    has_control = True
    uses_other = True

    def actions(self, observation):
        other_answers = [
            m.group(1) for a in self.other if _text_only(a) for m in ANSWER_TAG.finditer(_content(a))
        ]
        for i, action in enumerate(self.oracle):
            tagged = ANSWER_TAG.search(_content(action)) if _text_only(action) else None
            if tagged and not _states_figures(action):
                # A word answer: another seed's answer beside it, inside the tag ("father or uncle").
                wrong = next(
                    (w for w in other_answers if w.strip().lower() != tagged.group(1).strip().lower()), None
                )
                if wrong is None:
                    yield action
                    continue
                self.applies = True
                inner = (
                    ""
                    if self.control
                    else f"{tagged.group(1)} or {wrong}"
                    if i % 2
                    else f"{wrong} or {tagged.group(1)}"
                )
                text = _content(action)
                yield _with_content(action, text[: tagged.start(1)] + inner + text[tagged.end(1) :])
                continue
            if not _states_figures(action):
                yield action
                continue
            self.applies = True
            if self.control:
                yield _with_content(action, _figures_swapped(_content(action), lambda sign, n: ""))
                continue

            def both(sign: str, number: str, i: int = i) -> str:
                right, wrong = f"{sign}{number}", f"{sign}{_wrong(number)}"
                return f"{wrong} or {right}" if i % 2 else f"{right} or {wrong}"

            yield _with_content(action, _figures_swapped(_content(action), both))


class HedgedAcrossMessages(AdversarialProbe):
    """Every message of the oracle that states figures (answers, not the proposals a write follows) is first
    sent with wrong figures, then again as "Sorry, correction: <the oracle's message>": the first answer
    counts. Control: a filler in place of the
    message, so a seed where the env needs no figure does not count."""

    name = "hedged_across_messages"
    has_control = True

    def actions(self, observation):
        kinds = _kinds(self.env)
        for i, action in enumerate(self.oracle):
            following = self.oracle[i + 1] if i + 1 < len(self.oracle) else None
            proposal = any(kinds.get(n) == "write" for n in _call_names(following))
            if not _states_figures(action) or proposal:  # a proposal corrected after a "no" is not a hedge
                yield action
                continue
            self.applies = True
            text = _content(action)
            if self.control:
                yield _with_content(action, "One moment, let me double-check that.")
                continue
            yield _with_content(action, _figures_swapped(text, lambda sign, n: f"{sign}{_wrong(n)}"))
            yield _with_content(action, f"Sorry, correction: {text}")


class NegatedConfirmation(AdversarialProbe):
    """Every message the oracle sends right before a write states the opposite ("I will not ...") and still
    asks to proceed; a user that says yes to it confirms nothing the agent proposed."""

    name = "negated_confirmation"
    has_control = True

    def actions(self, observation):
        kinds = _kinds(self.env)
        for i, action in enumerate(self.oracle):
            following = self.oracle[i + 1] if i + 1 < len(self.oracle) else None
            if _text_only(action) and any(kinds.get(n) == "write" for n in _call_names(following)):
                self.applies = True
                if self.control:
                    yield _with_content(action, "Let me take care of that.")
                    continue
                text = _content(action)
                negated, count = WILL.subn(lambda m: f"{m.group(0)} not", text)
                if not count:
                    negated = f"I will not do the following: {text}"
                yield _with_content(action, negated.rstrip(" ?.") + ". Shall I proceed? (yes/no)")
            else:
                yield action


class StatementsThatAskNothing(AdversarialProbe):
    """Every question of the oracle that is not a confirmation becomes a statement with the same content
    words and no request ("Noted - this concerns: email, address."): a user that answers it reads words, not
    requests. Control: a filler in place of the question."""

    name = "statement_asks_nothing"
    has_control = True

    def actions(self, observation):
        kinds = _kinds(self.env)
        for i, action in enumerate(self.oracle):
            following = self.oracle[i + 1] if i + 1 < len(self.oracle) else None
            confirming = any(kinds.get(n) == "write" for n in _call_names(following))
            if not (_text_only(action) and "?" in _content(action)) or confirming:
                yield action
                continue
            self.applies = True
            if self.control:
                yield _with_content(action, "Thanks, noted.")
                continue
            words = [
                w
                for w in re.findall(r"[A-Za-z#][\w#@.-]*", _content(action))
                if w.lower() not in FUNCTION_WORDS
            ]
            yield _with_content(action, f"Noted - this concerns: {', '.join(dict.fromkeys(words))}.")


class RefusedWrite(AdversarialProbe):
    """The oracle, with each of its write calls sent twice: when the repeat is refused by the tools (the order
    is no longer in a state that allows it), the trajectory attempted a write the policy forbids. Applies on
    seeds where some repeat was refused, for write tools that declare preconditions."""

    name = "refused_write"

    def actions(self, observation):
        # Only writes whose tool declares preconditions: those are policy rules the env states (a third-party
        # target such as BFCL, whose checker is the reward, declares none and is out of scope).
        ruled = {
            t.name for t in getattr(self.env, "domain_tools", []) if t.kind == "write" and t.preconditions
        }
        for action in self.oracle:
            yield action
            if not any(n in ruled for n in _call_names(action)):
                continue
            yield action
            tools = [m for m in observation() if m.get("role") == "tool"]
            answers = [str(m.get("content") or "") for m in tools[-len(_call_names(action)) :]]
            if any(a.startswith("Error") for a in answers):
                self.applies = True


class PositionShortcut(AdversarialProbe):
    """The oracle, with every id of one kind in its tool calls (the first kind it uses that a tool result
    listed several of) replaced by the first id of that kind in the first such listing ("take the first
    order"). Scored against chance (see :func:`position_chance`):
    an env whose answer is uniformly placed lets it succeed about 1/k of the time for k listed candidates."""

    name = "position_shortcut"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.candidates: list[int] = []  # k of each listing the probe took the first of
        self.shape: tuple[str, int] | None = None

    def actions(self, observation):
        for action in self.oracle:
            if not isinstance(action, dict) or not action.get("tool_calls"):
                yield action
                continue
            listings = _listings(observation())
            calls = []
            for call in action["tool_calls"]:
                fn = call.get("function", call)
                try:
                    arguments = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    calls.append(call)
                    continue
                changed = False
                for key, value in list(arguments.items()) if isinstance(arguments, dict) else []:
                    if not (
                        isinstance(value, str) and ID_SHAPE.fullmatch(value) and _shape(value) in listings
                    ):
                        continue
                    self.shape = self.shape or _shape(value)  # one decision: the first listed kind of id
                    if _shape(value) == self.shape:
                        first, count = listings[_shape(value)]
                        arguments[key], changed = first, True
                        self.candidates.append(count)
                if changed:
                    self.applies = True
                    call = {**call, "function": {**fn, "arguments": json.dumps(arguments)}}
                calls.append(call)
            yield {**action, "tool_calls": calls}


def _shape(value: str) -> tuple[str, int]:
    match = ID_SHAPE.fullmatch(value)
    assert match is not None
    return match.group(1), len(match.group(2))


def _listings(messages: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[str, int]]:
    """For each id shape: the first id of the first tool result that lists two or more ids of that shape,
    and how many it lists."""
    found: dict[tuple[str, int], tuple[str, int]] = {}
    for message in messages:
        if message.get("role") != "tool":
            continue
        by_shape: dict[tuple[str, int], list[str]] = {}
        for token in ID_TOKEN.findall(str(message.get("content") or "")):
            by_shape.setdefault(_shape(token), [])
            if token not in by_shape[_shape(token)]:
                by_shape[_shape(token)].append(token)
        for shape, ids in by_shape.items():
            if len(ids) >= 2 and shape not in found:
                found[shape] = (ids[0], len(ids))
    return found


FIGURE = NUMBER
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
WILL = re.compile(r"\b(?:I|we) (?:will|shall|can|am going to)\b|\bI'll\b|\bwe'll\b", re.IGNORECASE)
ID_SHAPE = re.compile(r"(#?[A-Za-z_]*?)(\d{4,})")
ID_TOKEN = re.compile(r"#?\b[A-Za-z_]*\d{4,}\b(?!\.\d)")
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "so",
        "to",
        "of",
        "for",
        "in",
        "on",
        "at",
        "by",
        "with",
        "from",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "i",
        "you",
        "we",
        "he",
        "she",
        "they",
        "me",
        "my",
        "your",
        "our",
        "their",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "could",
        "can",
        "would",
        "will",
        "shall",
        "should",
        "may",
        "might",
        "must",
        "do",
        "does",
        "did",
        "please",
        "kindly",
        "tell",
        "let",
        "know",
        "give",
        "share",
        "provide",
        "confirm",
        "have",
        "has",
        "had",
        "need",
        "any",
        "some",
        "if",
        "there",
        "here",
        "just",
        "also",
        "then",
        "than",
        "as",
        "not",
        "no",
        "yes",
    ]
)

ADVERSARIAL_PROBES: tuple[type[AdversarialProbe], ...] = (
    ContentFreeConfirmation,
    AmountSpraying,
    StatusTalker,
    OtherSeedOracle,
    HedgedAnswer,
    HedgedAcrossMessages,
    NegatedConfirmation,
    StatementsThatAskNothing,
    RefusedWrite,
    PositionShortcut,
    RefusalWithoutRead,
    OracleWithoutLastCall,
    OtherSourceOracle,
)


def run_probe(
    env: ChatToolEnv,
    other_env: ChatToolEnv,
    probe_type: type[AdversarialProbe],
    seed: int,
    config: ValidationConfig,
) -> tuple[float, bool]:
    """Play one episode with a probe; returns (final reward, whether the probe applies to this seed)."""
    reward, probe = play_probe(env, other_env, probe_type, seed, config)
    return reward, probe is not None and probe.applies


def play_probe(
    env: ChatToolEnv,
    other_env: ChatToolEnv,
    probe_type: type[AdversarialProbe],
    seed: int,
    config: ValidationConfig,
) -> tuple[float, AdversarialProbe | None]:
    """Play one episode with a probe (after its control, if it has one); returns (final reward, the probe),
    the probe None when the seed does not count (the control needs nothing the probe fakes)."""
    if probe_type.has_control:
        reward, control = _play_probe(env, other_env, probe_type, seed, config, control=True)
        if not control.applies or reward == 1.0:
            return 0.0, None
    return _play_probe(env, other_env, probe_type, seed, config, control=False)


def _play_probe(
    env: ChatToolEnv,
    other_env: ChatToolEnv,
    probe_type: type[AdversarialProbe],
    seed: int,
    config: ValidationConfig,
    control: bool,
) -> tuple[float, AdversarialProbe]:
    other: list[Any] = []
    if getattr(probe_type, "other_source", False):
        other = _other_source(env, other_env, seed, config)
    elif probe_type is OtherSeedOracle or getattr(probe_type, "uses_other", False):
        _reset(other_env, seed + 1, config)
        other = other_env.oracle_actions()
    obs, _ = _reset(env, seed, config)
    latest = [obs]
    probe = probe_type(env, env.oracle_actions(), other, control=control)
    for steps, action in enumerate(probe.actions(lambda: latest[0])):
        obs, reward, terminated, truncated, _ = env.step(action)
        latest[0] = obs
        if terminated or truncated:
            return float(reward), probe
        if steps > 10 * getattr(env, "max_turns", 50):
            break
    return 0.0, probe


def _chance(probe: AdversarialProbe) -> float:
    """The success rate of the probe's shortcut on a seed where the env gives nothing away: for another seed's
    oracle, 1.0 when the two seeds' oracles are the same actions (tiny answer spaces), else 0; for the
    position shortcut, 1/k for the first listing of k candidates it took the first of; 0 otherwise."""
    if isinstance(probe, OtherSeedOracle):
        return float(
            json.dumps(probe.other, sort_keys=True, default=str)
            == json.dumps(probe.oracle, sort_keys=True, default=str)
        )
    if isinstance(probe, PositionShortcut) and probe.candidates:
        return 1.0 / probe.candidates[0]
    return 0.0


def _check_adversarial(
    env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig
) -> list[CheckResult]:
    """Each probe's mean reward over the seeds it applies to must be at most ``adversarial_max_mean`` above
    chance (:func:`_chance`, with two standard errors of the chance rate: 0 for every probe that has none).
    The derived-env probes run on derived envs only (elsewhere there is no source task to cut or swap)."""
    env, other_env = _make(env_id, make_kwargs), _make(env_id, make_kwargs)
    results = []
    for probe_type in ADVERSARIAL_PROBES:
        if getattr(probe_type, "derived_only", False) and not is_derived(env):
            continue
        rewards, chances = [], []
        for seed in range(config.adversarial_seeds):
            reward, probe = play_probe(env, other_env, probe_type, seed, config)
            if probe is not None and probe.applies:
                rewards.append(reward)
                chances.append(_chance(probe))
        name = f"adversarial/{probe_type.name}"
        if not rewards:
            results.append(
                CheckResult(
                    name, True, "not applicable", "on no seed does the oracle need what the probe fakes"
                )
            )
            continue
        mean, chance = float(np.mean(rewards)), float(np.mean(chances))
        allowed = (
            config.adversarial_max_mean + chance + 2 * float(np.sqrt(chance * (1 - chance) / len(rewards)))
        )
        figure = f"mean reward {mean:.3f}, success {np.mean(np.array(rewards) == 1.0):.1%} over {len(rewards)} seeds"
        if chance:
            figure += f" (chance {chance:.3f})"
        results.append(CheckResult(name, mean <= allowed, figure, f"need mean <= {allowed:.3f}"))
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


def check_first_message_overlap(
    env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig
) -> CheckResult:
    """Share of test episodes (test seeds 0..seeds-1) whose first user message equals that of a train episode
    (train seeds 0..5*seeds-1). Reported beside ``split_overlap``, never failed: instances may differ behind
    one opening (another database), but an agent that memorised train openings meets them again."""
    env = _make(env_id, make_kwargs)

    def openings(split: str, n: int) -> list[str]:
        out = []
        for seed in range(n):
            obs, _ = env.reset(seed=seed, options={"split": split})
            out.append(next((str(m.get("content")) for m in obs if m.get("role") == "user"), ""))
        return out

    train = set(openings("train", 5 * config.seeds))
    test = openings("test", config.seeds)
    shared = sum(text in train for text in test)
    return CheckResult(
        "first_message_overlap",
        True,
        f"{shared}/{len(test)} test episodes ({shared / max(len(test), 1):.1%}) open like a train episode",
        "reported, not failed (instances differ; see split_overlap for instances)",
    )


def check_split_overlap(env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig) -> CheckResult:
    """Test instances (seeds 0..seeds-1 of the test split) that occur among train seeds 0..5*seeds-1, by two
    keys: the env's own task key (the one that assigns a content split) and an independent one computed from
    what the agent sees (:func:`trace_gym.core.overlap.semantic_key`: an arithmetic question as a function of
    its literals, so redundant parentheses or swapped operands are the same task). Both must be 0 for
    every trace env: a seed split is not a content split (trace_gym.core.splits), and a key finer than the
    task's meaning puts one task on both sides.
    """
    from trace_gym.core.overlap import semantic_key
    from trace_gym.core.splits import split_overlap

    env = _make(env_id, make_kwargs)
    key = getattr(env, "task_key", env.render_instance)

    def keys(split: str, n: int) -> tuple[list[str], list[str]]:
        own, independent = [], []
        for seed in range(n):
            env.reset(seed=seed, options={"split": split})
            own.append(key())
            independent.append(semantic_key(env))
        return own, independent

    (train, train_sem), (test, test_sem) = keys("train", 5 * config.seeds), keys("test", config.seeds)
    overlap, semantic = split_overlap(train, test), split_overlap(train_sem, test_sem)
    content = "content split" if getattr(env, "content_split", False) else "seed split only"
    return CheckResult(
        "split_overlap",
        overlap.overlapping_instances == 0 and semantic.overlapping_instances == 0,
        f"{overlap.figure}; independent key: {semantic.figure}",
        f"{content}; both must be 0",
    )


def check_format_conformity(
    env_id: str, make_kwargs: dict[str, Any], config: ValidationConfig
) -> list[CheckResult]:
    """For an env with a declared target: one result per aspect of :mod:`trace_gym.core.conformity` over
    ``min(seeds, conformity_seeds)`` seeds, each failure naming what differs first (the prompt's line, the
    tool, the user setting, the message). Without a declared target: one skipped result."""
    from trace_gym.core.conformity import ASPECTS, check_conformity, declared_target

    env = _make(env_id, make_kwargs)
    target = declared_target(env)
    if target is None:
        return [
            CheckResult(
                "conformity",
                True,
                "skipped: no declared target",
                "the env declares no target_id, so its format is not compared with one",
                skipped=True,
            )
        ]
    seeds = range(min(config.seeds, config.conformity_seeds))
    result = check_conformity(env, seeds, lambda e, seed: _reset(e, seed, config))
    extra = {"tools": f" ({result.tool_count} tools)", "user_simulator": f" ({result.user_class})"}
    return [
        CheckResult(
            f"conformity/{aspect}",
            result.identical[aspect] == result.seeds,
            f"identical to {target}'s on {result.identical[aspect]}/{result.seeds} seeds{extra.get(aspect, '')}",
            result.reasons.get(aspect, ""),
        )
        for aspect in ASPECTS
    ]
