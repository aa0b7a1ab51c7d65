"""reasoning-gym procedural datasets as single-turn Gymnasium envs (the trainer's third-party path).

One episode = one dataset entry. ``reset(seed=...)`` draws an *instance seed* from the env's ``np_random`` and
builds that entry with ``reasoning_gym.create_dataset(name, seed=instance_seed, size=1, **config)[0]``: a
fresh one-entry dataset per episode works for every reasoning-gym dataset, also those that precompute their
items from ``seed`` and ``size`` in ``__init__``.

Observation
    ``[{"role": "system", ...}, {"role": "user", "content": question}]``; after the step, plus the answer.
Action
    The assistant's answer: a string, or a dict ``{"content": str, ...}``. The graded answer is the text of the
    last ``<answer>...</answer>`` block (an unclosed last ``<answer>`` counts up to the end); without one, the
    whole text minus any ``<think>...</think>`` blocks. It is stripped of surrounding whitespace.
Reward
    1.0 when the graded answer *is* the reference answer, else 0 (:data:`ANSWER_KINDS`): numerically exact for
    numeric answers (``-140``, ``-140.0`` and ``+140``... by value; ``-140 -139`` is not a number and scores 0),
    exact (case-insensitive where case carries no meaning) for words and digit strings, element by element for
    lists. reasoning-gym's own ``score_answer`` gives partial credit to a longer reply that contains the answer
    (``"-140 -139"`` scored 0.44 for -140, so GRPO learnt to hedge); it decides only for datasets without an
    entry in :data:`ANSWER_KINDS`, and then only its full credit counts. The episode terminates after the step.
Bad actions
    Never raise: tool calls (this env has no tools) are ignored with ``info["invalid_action"] = "unknown_tool"``
    and the content is still graded; a value that is neither a string nor a message dict scores 0 with
    ``"parse"``.
Splits
    ``options={"split": "train"|"test"}`` maps the seed into that split's range of :data:`SPLITS`, like every
    trace env (without the option, the seed's range decides). The split is by *content*, not only by seed:
    reset draws reasoning-gym instance seeds from ``np_random`` until the entry's canonical task key
    (:meth:`ReasoningGymEnv.task_key`: the expression of arithmetic datasets up to its form - redundant
    parentheses, operand order, ``a + -b`` vs ``a - b`` (:func:`expression_key`) -, the sorted numbers of
    gcd/lcm, else the whitespace-normalised question) hashes to the requested split (:mod:`trace_gym.core.splits`,
    20% of keys are test). No test question occurs in the train split, for any seed. A tiny problem space
    still splits, with few distinct test tasks: ``arith1`` (one-digit +/-) has about 40, so the demo uses
    ``arith2`` (operands of up to two digits, several thousand test tasks).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import re
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from trace_gym.core.env import SPLITS, render_conversation, reset_options, split_seed
from trace_gym.core.spaces import AssistantTurnSpace, ChatObservationSpace
from trace_gym.core.splits import TEST_SHARE, draw_in_split
from trace_gym.registration import register_env

ENTRY_POINT = "trace_gym.adapters.reasoning_gym:ReasoningGymEnv"
# v1: content splits (v0 split by seed only); v2: exact grading (v1 gave reasoning-gym's partial credit to hedged
# replies) and arithmetic task keys up to redundant parentheses and the order of a sum's operands
ID_TEMPLATE = "trace/rg-{name}-v2"

# Cheap datasets (a few ms per entry at most) whose reference answer scores 1.0 and a wrong one 0. Left out:
# datasets whose scorer gives fuzzy partial credit to any text (spell_backward), so degenerate replies score > 0,
# and products (its default config repeats instances: 98% unique over 100 seeds).
CURATED_DATASETS: tuple[str, ...] = (
    "basic_arithmetic",
    "base_conversion",
    "chain_sum",
    "count_bits",
    "family_relationships",
    "gcd",
    "lcm",
    "leg_counting",
    "letter_counting",
    "number_sorting",
    "simple_equations",
    "word_sorting",
)

# Registered variants with a dataset config of their own: id name -> (dataset, config).
# ``arith1``: two one-digit operands of either sign, + and -: about 200 distinct tasks, too few to split by
# content into a meaningful test set (about 40 test tasks). ``arith2``: operands of one or two digits, a task
# space of tens of thousands with thousands of test tasks: the `trace demo` task.
CURATED_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "arith1": (
        "basic_arithmetic",
        {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 1,
            "operators": ("+", "-"),
            "allow_negation": False,
        },
    ),
    "arith2": (
        "basic_arithmetic",
        {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 2,
            "operators": ("+", "-"),
            "allow_negation": False,
        },
    ),
}


# Canonical task keys: what makes two entries the same task (the question's wording and the order of
# commutative inputs do not). Datasets not listed use the whitespace-normalised question.
def expression_key(expression: str) -> str:
    """An arithmetic expression's canonical form: sums flattened into their signed terms (``a - (b - c)`` is
    ``a - b + c``, ``a + -b`` is ``a - b``) and sorted, products' factors sorted, redundant parentheses gone.
    ``( -2 - 4 )``, ``( ( ( -2 - 4 ) ) )`` and ``-4 + -2`` are one task (v1 split them by their text)."""
    return _canonical(ast.parse(expression.strip(), mode="eval").body)


def _canonical(node: ast.AST) -> str:
    if isinstance(node, ast.BinOp | ast.UnaryOp) and _is_sum(node):
        terms = sorted(_signed_terms(node, 1))
        if len(terms) == 1:  # a signed single term: -(3 * 2) is the product -(2 * 3)
            return terms[0].removeprefix("+")
        return "(" + " ".join(terms) + ")"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        sign, factors = _product(node)
        negative = sign < 0 and "0" not in factors  # -(0 * 7) is 0 * 7
        return ("-" if negative else "") + "(" + " * ".join(sorted(factors)) + ")"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # signs pulled out: -( -4 / 4 ) is 4 / 4
        (s_num, num), (s_den, den) = _unsigned(node.left), _unsigned(node.right)
        negative = s_num * s_den < 0 and num != "0"
        return ("-" if negative else "") + f"({num} / {den})"
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return repr(node.value)
    raise ValueError(f"not an arithmetic expression: {ast.dump(node)[:80]}")


def _is_sum(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Add | ast.Sub)
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd)


def _signed_terms(node: ast.AST, sign: int) -> list[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        right = sign if isinstance(node.op, ast.Add) else -sign
        return _signed_terms(node.left, sign) + _signed_terms(node.right, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return _signed_terms(node.operand, -sign if isinstance(node.op, ast.USub) else sign)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return [repr(sign * node.value) if node.value else "0"]
    term = _canonical(node)
    if term.startswith("-"):  # a product with its sign pulled out
        sign, term = -sign, term[1:]
    if _is_zero_product(node):  # - 0 * 7 is + 0 * 7
        sign = 1
    return [("-" if sign < 0 else "+") + term]


def _is_zero_product(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return "0" in _product(node)[1]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _unsigned(node.left)[1] == "0"
    return False


def _unsigned(node: ast.AST) -> tuple[int, str]:
    term = _canonical(node)
    return (-1, term[1:]) if term.startswith("-") else (1, term)


def _product(node: ast.AST) -> tuple[int, list[str]]:
    """A product's sign (its factors' signs pulled out: ``3 * -2`` is ``-(2 * 3)``) and its factors."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        sa, fa = _product(node.left)
        sb, fb = _product(node.right)
        return sa * sb, fa + fb
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        sign, factors = _product(node.operand)
        return (-sign if isinstance(node.op, ast.USub) else sign), factors
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return (-1 if node.value < 0 else 1), [repr(abs(node.value))]
    sign, term = _unsigned(node)
    return sign, [term]


TASK_KEYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "basic_arithmetic": lambda e: expression_key(str(e["metadata"]["expression"])),
    "chain_sum": lambda e: expression_key(str(e["metadata"]["expression"])),
    "gcd": lambda e: ",".join(str(n) for n in sorted(e["metadata"]["numbers"])),
    "lcm": lambda e: ",".join(str(n) for n in sorted(e["metadata"]["numbers"])),
}

# How a curated dataset's answer is compared with the reference (see the module docstring). Others: full
# credit from the dataset's score_answer.
ANSWER_KINDS: dict[str, str] = {
    "basic_arithmetic": "number",
    "chain_sum": "number",
    "count_bits": "number",
    "gcd": "number",
    "lcm": "number",
    "leg_counting": "number",
    "letter_counting": "number",
    "simple_equations": "number",
    "base_conversion": "caseless",
    "family_relationships": "caseless",
    "number_sorting": "number_list",
    "word_sorting": "word_list",
}

SYSTEM_PROMPT = (
    "You are a careful problem solver. Solve the task, then give your final answer inside <answer> and "
    "</answer> tags, for example <answer>42</answer>. Put only the answer between the tags, in exactly the "
    "format the question asks for."
)
HINT = (
    "Work step by step and check each step before you go on. Re-read the question for the required answer "
    "format (order, separators, units, case) and write nothing but the final answer inside the <answer> tags."
)

INSTANCE_SEED_RANGE = 2**32  # reasoning-gym instance seeds (below 2**32 for numpy-seeded datasets)
GENERATOR_RETRIES = 100
RESERVED_CONFIG = frozenset({"seed", "size"})

_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str:
    """The graded part of a reply: the last ``<answer>`` block, else the text without ``<think>`` blocks."""
    blocks = _ANSWER.findall(text)
    if blocks:
        return blocks[-1].strip()
    return _THINK.sub("", text).strip()


def reasoning_gym_available() -> bool:
    """Whether reasoning-gym is installed, without importing it (its import takes most of a second)."""
    return importlib.util.find_spec("reasoning_gym") is not None


class ReasoningGymEnv(gym.Env[list, Any]):
    """A reasoning-gym dataset as a single-turn chat env: the question in, the answer out, its score back."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    capability: ClassVar[str] = ""
    supports_splits: ClassVar[bool] = True  # reset(options={"split": ...}) takes split-relative seeds
    content_split: ClassVar[bool] = True  # no test task key occurs in the train split (see module docstring)
    test_share: ClassVar[float] = TEST_SHARE
    description: ClassVar[str] = "reasoning-gym procedural task, single turn, answer in <answer> tags"

    @classmethod
    def card(cls, kwargs: dict[str, Any]) -> tuple[str, str]:
        """Capability and description of one registered dataset id (all ids share this class)."""
        name = kwargs.get("dataset", "?")
        return f"rg:{name}", f"reasoning-gym {name!r}: one question, answer in <answer> tags"

    def __init__(
        self,
        dataset: str,
        render_mode: str | None = None,
        system_prompt: str = SYSTEM_PROMPT,
        hint: str = HINT,
        **config: Any,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        reserved = RESERVED_CONFIG & set(config)
        if reserved:
            raise ValueError(
                f"{sorted(reserved)} are set per episode by the env; pass seed to reset() instead"
            )
        import reasoning_gym  # lazy: importing trace_gym must not pay for it

        self._reasoning_gym = reasoning_gym
        self.dataset_name = dataset
        self.config = dict(config)
        self.render_mode = render_mode
        self.system_prompt = system_prompt
        self.hint = hint
        self.tools: list[dict[str, Any]] = []
        # No tool world: these two let trace's validation suite treat the env like a ChatToolEnv.
        self.domain_tools: list[Any] = []
        self.world: Any = None
        self.observation_space = ChatObservationSpace(max_messages=3)
        self.action_space = AssistantTurnSpace(tools=[])
        self.dataset = self._build(0)  # fail fast on an unknown name or a bad config
        self.entry: dict[str, Any] | None = None
        self.messages: list[dict[str, Any]] = []
        self.split = "train"
        self.over = True

    def _build(self, instance_seed: int) -> Any:
        try:
            return self._reasoning_gym.create_dataset(
                self.dataset_name, seed=instance_seed, size=1, **self.config
            )
        except (ValueError, TypeError) as err:
            raise ValueError(f"cannot build reasoning-gym dataset {self.dataset_name!r}: {err}") from err

    # ---- gymnasium API ------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = reset_options(options, known=("hint", "split"))
        seed, self.split = _split_seed(seed, options.get("split"))
        super().reset(seed=seed)

        def draw() -> tuple[int, Any, dict[str, Any]]:
            for _ in range(GENERATOR_RETRIES):
                instance_seed = int(self.np_random.integers(INSTANCE_SEED_RANGE))
                dataset = self._build(instance_seed)
                try:
                    return instance_seed, dataset, dataset[0]
                except ArithmeticError:  # e.g. basic_arithmetic's default config divides by zero now and then
                    continue
            raise RuntimeError(
                f"reasoning-gym {self.dataset_name!r} failed {GENERATOR_RETRIES} draws in a row"
            )

        (instance_seed, self.dataset, self.entry), _ = draw_in_split(
            draw, lambda drawn: self._key(drawn[2]), self.split, self.test_share
        )
        system = self.system_prompt
        if options.get("hint") and self.hint:
            system = f"{system}\n\n# Expert advice\n{self.hint}"
        self.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": str(self.entry["question"])},
        ]
        self.over = False
        info = {
            "tools": [],
            "capability": self.capability,
            "base_system_prompt": self.system_prompt,
            "dataset": self.dataset_name,
            "split": self.split,
            "instance_seed": instance_seed,
        }
        return [dict(m) for m in self.messages], info

    def step(self, action: Any):
        if self.over or self.entry is None:
            raise RuntimeError("the episode is over (or was never started): call reset() before step()")
        self.over = True
        text, invalid = _read_action(action)
        answer = extract_answer(text)
        score = self._score(answer)
        self.messages.append({"role": "assistant", "content": text})
        info = {
            "tools": [],
            "capability": self.capability,
            "invalid_action": invalid,
            "answer": answer,
            "reward_components": {"score": score},
            "requirements": {},
        }
        return [dict(m) for m in self.messages], score, True, False, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return render_conversation(self.messages)

    def oracle_actions(self) -> list[dict[str, Any]]:
        """The dataset's reference answer in the expected tags (scores 1.0 on the curated datasets)."""
        if self.entry is None:
            raise RuntimeError("call reset() before oracle_actions()")
        return [{"content": f"<answer>{self.entry['answer']}</answer>"}]

    def render_instance(self) -> str:
        if self.entry is None:
            raise RuntimeError("call reset() before render_instance()")
        return f"{self.entry['question']}\n---\n{self.entry['answer']}"

    def task_key(self) -> str:
        """The current entry's canonical task key (see :data:`TASK_KEYS`)."""
        if self.entry is None:
            raise RuntimeError("call reset() before task_key()")
        return self._key(self.entry)

    def _key(self, entry: dict[str, Any]) -> str:
        keyer = TASK_KEYS.get(self.dataset_name)
        if keyer is not None:
            with contextlib.suppress(KeyError, TypeError, ValueError, SyntaxError, RecursionError):
                return keyer(entry)
        return " ".join(str(entry["question"]).split())

    def _score(self, answer: str) -> float:
        try:
            return self._exact(answer)
        except Exception:  # noqa: BLE001 - some scorers raise on unparseable answers; that is a wrong answer
            return 0.0

    def _exact(self, answer: str) -> float:
        """1.0 when ``answer`` is the reference answer (by :data:`ANSWER_KINDS`), else 0.0."""
        assert self.entry is not None
        kind = ANSWER_KINDS.get(self.dataset_name)
        if kind is None:  # a dataset graded by its own scorer: its full credit only, never partial credit
            score = float(self.dataset.score_answer(answer, self.entry))
            return 1.0 if np.isfinite(score) and score >= 1.0 else 0.0
        return 1.0 if same_answer(answer, str(self.entry["answer"]), kind) else 0.0


_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[+-]?\.\d+")


def parse_number(text: str) -> Fraction | None:
    """The exact value of ``text`` when it is one decimal number (thousands commas allowed), else None."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    return Fraction(text.replace(",", "").rstrip("."))


def _list_items(text: str) -> list[str] | None:
    """The items of a list answer: a Python/JSON list literal, else comma-separated text."""
    text = text.strip()
    if text.startswith("["):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        return [str(v).strip() for v in value] if isinstance(value, list | tuple) else None
    return [item.strip() for item in text.split(",")]


def same_answer(answer: str, reference: str, kind: str) -> bool:
    """Whether ``answer`` is ``reference`` for an answer of this kind (see :data:`ANSWER_KINDS`)."""
    answer, reference = answer.strip(), reference.strip()
    if kind == "number":
        want = parse_number(reference)
        if want is None:  # a reference that is not one number: compare the text
            return answer == reference
        return parse_number(answer) == want
    if kind == "caseless":
        return answer.casefold() == reference.casefold()
    if kind in ("number_list", "word_list"):
        got, want = _list_items(answer), _list_items(reference)
        if got is None or want is None or len(got) != len(want):
            return False
        if kind == "word_list":
            return got == want
        values = [(parse_number(a), parse_number(b)) for a, b in zip(got, want, strict=True)]
        return all(a is not None and a == b for a, b in values)
    return answer == reference


def _read_action(action: Any) -> tuple[str, str | None]:
    """The answer text and the kind of invalidity (``None`` for a well-formed answer)."""
    if isinstance(action, str):
        return action, None
    if isinstance(action, Mapping):
        content = action.get("content")
        text = content if isinstance(content, str) else ""
        if action.get("tool_calls"):
            return text, "unknown_tool"
        return text, None if content is None or isinstance(content, str) else "parse"
    return "", "parse"


def _split_seed(seed: int | None, split: str | None) -> tuple[int | None, str]:
    """The Gymnasium seed and the split it belongs to (without a split option, by the seed's range)."""
    seed = split_seed(seed, split)
    test_start, test_size = SPLITS["test"]
    in_test = seed is not None and test_start <= seed < test_start + test_size
    return seed, "test" if in_test else "train"


# ---- registration ---------------------------------------------------------------------------------------------
def env_id(name: str) -> str:
    return ID_TEMPLATE.format(name=name)


def register_reasoning_gym_envs(names: Iterable[str] | None = None) -> list[str]:
    """Register ``trace/rg-<name>-v2`` (:data:`ID_TEMPLATE`) for each name; nothing when reasoning-gym is not
    installed.

    A name is a reasoning-gym dataset or one of :data:`CURATED_VARIANTS`; the default registers every curated
    dataset and variant. Registration uses a string entry point, so reasoning-gym is imported only when an
    env is made.
    """
    if not reasoning_gym_available():
        return []
    ids = []
    for name in (*CURATED_DATASETS, *CURATED_VARIANTS) if names is None else names:
        dataset, config = CURATED_VARIANTS.get(name, (name, {}))
        register_env(env_id(name), entry_point=ENTRY_POINT, kwargs={"dataset": dataset, **config})
        ids.append(env_id(name))
    return ids


def make_reasoning_gym_env(name: str, render_mode: str | None = None, **config: Any) -> gym.Env:
    """Any reasoning-gym dataset as an env (registered or not), with Gymnasium's usual wrappers.

    ``config`` is the dataset's own configuration (e.g. ``min_terms=2`` for ``basic_arithmetic``) plus the
    env's ``system_prompt`` / ``hint``.
    """
    spec = gym.envs.registration.EnvSpec(
        id=env_id(name), entry_point=ENTRY_POINT, kwargs={"dataset": name, **config}
    )
    return gym.make(spec, render_mode=render_mode)
