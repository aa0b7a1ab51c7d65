"""The LLM analysis agent: capability discovery, then N independent labelling runs over every pair.

1. **Discovery** (``prompts/analysis/discover.md``): from a sample of compacted trajectories (failed ones
   first), the model proposes 4 to 10 *general* capability names (kebab-case) with descriptions. It may be
   seeded with the target's declared capability list. Names that contain the domain's own words (tokens of the
   tool names and the env id, such as "order" or "refund") are rejected and retried: a capability must
   transfer to other domains.
2. **Labelling** (``prompts/analysis/label.md``): each run labels every trajectory against every capability
   in one call (NA / PRESENT / LACKING, the index of the message where it went wrong, a one-line reason).
   Runs are independent (run ``r`` samples with seed ``r`` at ``temperature``).

Every answer is JSON validated by ``jsonschema`` plus checks (each capability labelled exactly once, message
indices inside the trajectory) through :class:`trace_gym.llm_agent.LLMAgent`, which retries a bounded number
of times. A call that never yields a valid answer is a :class:`LabelFailure`: that trajectory is left out of
that run's statistics, and the failure is counted in the summary, written to ``llm_failures.jsonl`` and shown
in the report, never dropped silently.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trace_gym.analysis.aggregate import LABELS, LACKING
from trace_gym.analysis.labels import LabelTable
from trace_gym.llm_agent import LLMAgent, LLMAgentError

NAME_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
MIN_CAPABILITIES, MAX_CAPABILITIES = 4, 10
# words of tool names that are generic verbs or nouns of any tool-using agent, not domain words
GENERIC_WORDS = frozenset(
    [
        "find",
        "get",
        "list",
        "details",
        "calculate",
        "respond",
        "modify",
        "transfer",
        "agents",
        "agent",
        "human",
        "user",
        "users",
        "types",
        "items",
        "name",
        "names",
        "search",
        "lookup",
        "update",
        "create",
        "delete",
        "read",
        "write",
        "call",
        "tool",
        "tools",
        "info",
        "information",
        "check",
    ]
)

DISCOVERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["capabilities"],
    "properties": {
        "capabilities": {
            "type": "array",
            "minItems": MIN_CAPABILITIES,
            "maxItems": MAX_CAPABILITIES,
            "items": {
                "type": "object",
                "required": ["name", "description"],
                "properties": {
                    "name": {"type": "string", "pattern": NAME_PATTERN, "maxLength": 48},
                    "description": {"type": "string", "minLength": 10, "maxLength": 600},
                },
            },
        }
    },
}


def label_schema(capabilities: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["labels"],
        "properties": {
            "labels": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["capability", "label"],
                    "properties": {
                        "capability": {"enum": list(capabilities)},
                        "label": {"enum": list(LABELS)},
                        "turn": {"type": ["integer", "null"]},
                        "reason": {"type": "string"},
                    },
                },
            },
            # issue 28: the earliest step where the agent deviated (null: it never did; optional for old answers)
            "first_failure": {
                "type": ["object", "null"],
                "required": ["capability", "turn"],
                "properties": {
                    "capability": {"enum": list(capabilities)},
                    "turn": {"type": "integer"},
                    "evidence": {"type": "string"},
                },
            },
        },
    }


@dataclass(frozen=True)
class Capability:
    name: str
    description: str


@dataclass
class LabelFailure:
    """A labelling call that gave no valid answer in the allowed attempts (or failed in transport)."""

    run: int
    index: int  # record index
    seed: int
    error: str
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "index": self.index,
            "seed": self.seed,
            "error": self.error,
            "attempts": self.attempts,
        }


@dataclass
class LLMLabelling:
    """The result of the LLM labeller: the capabilities, one :class:`LabelTable` per run (``None`` marks a
    trajectory the run could not label), the failures, and how many calls needed a retry."""

    capabilities: list[Capability]
    runs: list[LabelTable]
    failures: list[LabelFailure]
    retried_calls: int = 0
    calls: int = 0


# ---- compaction -------------------------------------------------------------------------------------------------
def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 15] + f" ...[{len(text) - limit + 15} chars cut]"


def compact_messages(messages: Sequence[dict[str, Any]], max_chars: int = 400) -> list[dict[str, Any]]:
    """The conversation without its system prompt, one short line per message, keeping message indices
    (so a labeller's ``turn`` points into the original trajectory)."""
    lines = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "system":
            continue
        parts = []
        if message.get("content"):
            parts.append(_clip(str(message["content"]), max_chars))
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            parts.append(f"CALL {fn.get('name')}({_clip(str(fn.get('arguments', '')), max_chars)})")
        name = f" {message['name']}" if role == "tool" and message.get("name") else ""
        lines.append({"index": index, "role": f"{role}{name}", "text": " | ".join(parts) or "(empty)"})
    return lines


def system_prompt_of(records: Sequence[dict[str, Any]], limit: int) -> str:
    for record in records:
        for message in record.get("messages", []):
            if message.get("role") == "system":
                return _clip(str(message.get("content") or ""), limit)
    return ""


def tool_names(records: Sequence[dict[str, Any]]) -> list[str]:
    names = {t.get("function", {}).get("name") for r in records for t in r.get("tools") or []}
    return sorted(n for n in names if n)


def domain_words(records: Sequence[dict[str, Any]]) -> set[str]:
    """Words that mark a name as domain-specific: tokens (>= 4 letters) of tool names and env ids."""
    words = set()
    for text in [*tool_names(records), *{str(r.get("env_id", "")) for r in records}]:
        words |= {w for w in re.split(r"[^a-z]+", text.lower()) if len(w) >= 4}
    words = {w[:-1] if w.endswith("s") and w not in GENERIC_WORDS else w for w in words - GENERIC_WORDS}
    return words - GENERIC_WORDS - {"trace"}


# ---- the agent --------------------------------------------------------------------------------------------------
class LLMLabeller:
    def __init__(
        self,
        agent: LLMAgent,
        *,
        runs: int = 10,
        temperature: float = 0.7,
        concurrency: int = 8,
        max_chars: int = 400,
        policy_chars: int = 3000,
        discovery_samples: int = 12,
        prompts_dir: str | None = None,
        progress: Callable[[str, int, int], None] | None = None,
    ):
        if runs < 1:
            raise ValueError(f"runs must be >= 1, got {runs}")
        self.agent = agent
        self.runs = runs
        self.temperature = temperature
        self.concurrency = max(1, concurrency)
        self.max_chars = max_chars
        self.policy_chars = policy_chars
        self.discovery_samples = discovery_samples
        self.prompts_dir = prompts_dir
        self.progress = progress

    def discover(
        self, records: Sequence[dict[str, Any]], seed_capabilities: Sequence[Capability] = ()
    ) -> list[Capability]:
        """Propose 4 to 10 general capabilities from a sample of trajectories (failed ones first)."""
        rng = random.Random(0)
        failed = [r for r in records if not r["success"]]
        passed = [r for r in records if r["success"]]
        rng.shuffle(failed)
        rng.shuffle(passed)
        n_failed = min(len(failed), max(1, (self.discovery_samples * 3) // 4))
        sample = failed[:n_failed] + passed[: self.discovery_samples - n_failed]
        banned = domain_words(records)

        def check(value: Any) -> list[str]:
            problems = []
            names = [c["name"] for c in value["capabilities"]]
            if len(set(names)) != len(names):
                problems.append("capability names must be unique")
            for name in names:
                hits = sorted(w for w in banned if w in name)
                if hits:
                    problems.append(
                        f"{name!r} is domain-specific (contains {', '.join(hits)}): name a general skill"
                    )
            return problems

        result = self.agent.ask_prompt(
            "analysis/discover.md",
            DISCOVERY_SCHEMA,
            context={
                "env_id": records[0].get("env_id", "?"),
                "policy": system_prompt_of(records, self.policy_chars),
                "tools": tool_names(records),
                "trajectories": [self._view(r) for r in sample],
                "seed_capabilities": list(seed_capabilities),
                "min_capabilities": MIN_CAPABILITIES,
                "max_capabilities": MAX_CAPABILITIES,
            },
            directory=self.prompts_dir,
            check=check,
            seed=0,
        )
        return [Capability(c["name"], c["description"].strip()) for c in result.value["capabilities"]]

    def label(self, records: Sequence[dict[str, Any]], capabilities: Sequence[Capability]) -> LLMLabelling:
        """Run ``self.runs`` independent labellings of every (trajectory, capability) pair."""
        names = [c.name for c in capabilities]
        schema = label_schema(names)
        policy = system_prompt_of(records, self.policy_chars)
        jobs = [(run, i) for run in range(self.runs) for i in range(len(records))]
        answers: dict[tuple[int, int], Any] = {}
        failures: list[LabelFailure] = []
        retried = 0

        def one(job: tuple[int, int]) -> tuple[tuple[int, int], Any]:
            run, i = job
            record = records[i]
            n_messages = len(record.get("messages", []))

            def check(value: Any) -> list[str]:
                seen = [entry["capability"] for entry in value["labels"]]
                problems = [f"{n} labelled {seen.count(n)} times" for n in names if seen.count(n) != 1]
                for entry in value["labels"]:
                    turn = entry.get("turn")
                    if turn is not None and not 0 <= turn < n_messages:
                        problems.append(f"turn {turn} of {entry['capability']} is not a message index")
                first = value.get("first_failure")
                if first:
                    if not 0 <= first["turn"] < n_messages:
                        problems.append(f"first_failure turn {first['turn']} is not a message index")
                    label = next(
                        (e["label"] for e in value["labels"] if e["capability"] == first["capability"]), None
                    )
                    if label != LACKING:
                        problems.append(
                            f"first_failure names {first['capability']}, which is labelled {label}, not LACKING"
                        )
                return problems

            try:
                result = self.agent.ask_prompt(
                    "analysis/label.md",
                    schema,
                    context={
                        "env_id": record.get("env_id", "?"),
                        "policy": policy,
                        "tools": tool_names([record]),
                        "capabilities": list(capabilities),
                        "trajectory": self._view(record),
                    },
                    directory=self.prompts_dir,
                    check=check,
                    seed=run * 1_000_003 + i,
                    temperature=self.temperature,
                )
            except LLMAgentError as err:
                attempts = [a.to_json() for a in err.attempts]
                return job, LabelFailure(run, i, int(record["seed"]), str(err), attempts)
            except Exception as err:  # noqa: BLE001 - transport failure: reported with the others
                return job, LabelFailure(run, i, int(record["seed"]), f"{type(err).__name__}: {err}")
            return job, result

        done = 0
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            for job, answer in pool.map(one, jobs):
                done += 1
                if isinstance(answer, LabelFailure):
                    failures.append(answer)
                else:
                    retried += int(answer.retries > 0)
                    answers[job] = answer.value
                if self.progress:
                    self.progress("label", done, len(jobs))

        tables = []
        for run in range(self.runs):
            labels: dict[str, list[Any]] = {n: [] for n in names}
            turns: dict[str, list[Any]] = {n: [] for n in names}
            reasons: dict[str, list[str]] = {n: [] for n in names}
            firsts: list[dict[str, Any] | None] = []
            for i in range(len(records)):
                value = answers.get((run, i))
                by_name = {e["capability"]: e for e in value["labels"]} if value else {}
                first = (value or {}).get("first_failure") or None
                firsts.append(first)
                for n in names:
                    entry = by_name.get(n)
                    labels[n].append(entry["label"] if entry else None)
                    turn = entry.get("turn") if entry and entry["label"] == LACKING else None
                    if first and first["capability"] == n:
                        turn = first["turn"]  # the first failure places the highlighted message
                    turns[n].append(turn)
                    reasons[n].append(entry.get("reason", "") if entry else "")
            tables.append(LabelTable(labels, turns, reasons, firsts))
        return LLMLabelling(list(capabilities), tables, failures, retried, len(jobs))

    def _view(self, record: dict[str, Any]) -> dict[str, Any]:
        return {
            "seed": record.get("seed"),
            "outcome": "passed" if record.get("success") else "failed",
            "reward": record.get("reward"),
            "messages": compact_messages(record.get("messages", []), self.max_chars),
        }


def labels_json(labelling: LLMLabelling) -> list[dict[str, Any]]:
    """All LLM labels, for ``llm_labels.json`` (one entry per run)."""
    return [
        {"run": r, "labels": t.labels, "turns": t.turns, "reasons": t.reasons}
        for r, t in enumerate(labelling.runs)
    ]
