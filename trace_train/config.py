"""Argument dataclasses of the model-running commands, kept free of heavy imports.

The ``trace`` CLI builds its flags from these classes (``--group-size 8`` is ``GRPOArgs.group_size = 8``,
:func:`add_dataclass_flags`), so they live apart from the modules that import torch and peft: listing envs or
printing ``--help`` stays fast. Each choice list (dtypes, engines, tool formats, loss types) is written once,
here, and checked by the dataclass that owns the setting.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from peft import LoraConfig

    from trace_train.grpo.losses import LossConfig


# weights dtypes every --dtype flag accepts ("auto": bf16 only where it is fast, trace_train.models.auto_dtype)
DTYPES = ("auto", "float32", "bfloat16", "float16")
# rollout engines: "cached" (KV cache per conversation across turns, shared prefix prefilled once, packed
# prefix-shared training log-probs) or "simple" (one generate call per turn, padded log-probs); docs/training.md
ENGINES = ("cached", "simple")
# how tools are written into the system prompt of chat templates without native tool support
TOOL_FORMATS = ("json", "compact")
LOSS_TYPES = ("grpo", "dr_grpo", "dapo")
# a derived env's --difficulty is its start depth; its target's difficulty is this (trace_gym.registration)
TARGET_DIFFICULTY_HELP = "a derived env's target difficulty (None: as its package registers it, the target's default; the demo's is 1)"
CURRICULA = ("fixed", "adaptive")  # GRPO's level choice (trace_train/grpo/curriculum.py)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHOICES: dict[str, tuple[str, ...]] = {
    "dtype": DTYPES,
    "engine": ENGINES,
    "tool_format": TOOL_FORMATS,
    "loss_type": LOSS_TYPES,
    "curriculum": CURRICULA,
}


def check_choices(args: object) -> None:
    """Refuse a value outside its choice list for every field of ``args`` named in :data:`CHOICES`."""
    for name, choices in CHOICES.items():
        value = getattr(args, name, None)
        if value is not None and value not in choices:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")


AUTO_CAPS = "fitted to the env's oracle on its first 64 train tasks, with a margin; trace_train/ceiling.py"


def knob(default: Any, help: str, **schema: Any) -> Any:
    """A dataclass field with its help text (shown by the generated CLI flag and the config schema) and extra
    JSON Schema keywords of the pipeline config (minimum, enum, ...)."""
    meta = {"help": help, "schema": schema}
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


def settings_of(source: object, cls: type) -> dict[str, Any]:
    """The values of ``cls``'s fields on ``source``: how a pipeline section hands its settings to the trainer's
    argument class that embeds them (``GRPOArgs(**settings_of(cfg.adapters, GRPOSettings), env_id=...)``)."""
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(cls)}


@dataclass(kw_only=True)
class EngineArgs:
    """How a local model generates: the settings every model-running command shares (one place for both)."""

    engine: str = knob(
        "cached",
        "local models' rollout engine: cached (KV cache per conversation, shared prefix once) or simple",
        enum=list(ENGINES),
    )
    tool_format: str = knob(
        "json",
        "how tools are written into the system prompt of chat templates without tool support: json or compact",
        enum=list(TOOL_FORMATS),
    )

    def __post_init__(self) -> None:
        check_choices(self)


def _without_none(tp: Any) -> Any:
    """``X`` for ``X | None`` (a flag takes an X), else ``tp`` itself."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def _or_none(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag value's converter that also reads ``none`` (any case) as None."""

    def parse(text: str) -> Any:
        return None if text.lower() == "none" else convert(text)

    parse.__name__ = f"{convert.__name__} or none"  # what argparse names in an error
    return parse


def add_dataclass_flags(parser: argparse.ArgumentParser, cls: type, skip: set[str] = frozenset()) -> None:
    """One ``--flag`` per field of ``cls`` (``lora_rank`` -> ``--lora-rank``), with its default, its choices
    (:data:`CHOICES`) and its help text (the field's ``metadata["help"]``)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        text = f.metadata.get("help", "")
        tp = hints[f.name]
        base = _without_none(tp)
        if base is bool:
            if default:
                parser.add_argument(
                    "--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=text or None
                )
            else:
                parser.add_argument(flag, dest=f.name, action="store_true", help=text or None)
            continue
        help_text = f"{text} (default: {default})" if text else f"default: {default}"
        if typing.get_origin(base) is list or base is list:
            item = (typing.get_args(base) or (str,))[0]
            if _without_none(item) is not item:  # list[X | None]: "none" is None
                item = _or_none(_without_none(item))
            parser.add_argument(flag, dest=f.name, nargs="+", type=item, default=default, help=help_text)
        else:
            conv = base if base in (int, float, str) else str
            choices = CHOICES.get(f.name)
            parser.add_argument(
                flag,
                dest=f.name,
                type=conv,
                default=default,
                choices=list(choices) if choices else None,
                help=help_text,
            )


def from_namespace(cls: type, ns: argparse.Namespace) -> Any:
    """The dataclass ``cls`` built from the parsed flags of :func:`add_dataclass_flags` (and positionals)."""
    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls) if hasattr(ns, f.name)}
    return cls(**values)


@dataclass
class LoraSettings:
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS))

    def to_peft(self) -> LoraConfig:
        from peft import LoraConfig

        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            task_type="CAUSAL_LM",
        )


class LoraArgs:
    """``lora()`` for argument classes with ``lora_rank``/``lora_alpha``/``lora_dropout``/``lora_target_modules``."""

    lora_rank: int
    lora_alpha: int
    lora_dropout: float
    lora_target_modules: list[str]

    def lora(self) -> LoraSettings:
        return LoraSettings(
            self.lora_rank, self.lora_alpha, self.lora_dropout, list(self.lora_target_modules)
        )


@dataclass(kw_only=True)
class GenerationSettings:
    """Where the commands that generate do it: the local engine (no ``server_url``), or an OpenAI-compatible server
    that takes token-id prompts and hot-loads LoRA adapters (vLLM, SGLang, ``trace serve``), serving the run's own
    base model. The pipeline's ``[generation]`` and ``--server-url`` on ``trace rollout``, ``calibrate`` and
    ``evaluate`` (:class:`trace_train.policies.served.ServedPolicy`)."""

    server_url: str | None = knob(
        None,
        "generate on this OpenAI-compatible server from token ids, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, "
        "`trace serve MODEL`); unset: the local engine. Composed (token-routed) models always run locally",
    )
    served_model: str | None = knob(
        None, "the base model's name on that server (default: the first model it lists)"
    )
    server_timeout: float = knob(
        300.0, "seconds one generation request may take before it is retried", exclusiveMinimum=0
    )
    server_retries: int = knob(
        3,
        "retries of a failed, dropped or timed-out request (with backoff) before the command stops with an error; "
        "finished episodes are kept, and a resumed run runs only the rest",
        minimum=0,
    )

    def __post_init__(self) -> None:
        url = self.server_url
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"--server-url must be an http:// or https:// URL, got {url!r}")
        if not self.server_timeout > 0:
            raise ValueError(f"--server-timeout must be > 0, got {self.server_timeout}")
        _check_positive(self, "server_retries", minimum=0)


@dataclass(kw_only=True)
class EvalSettings:
    """How an evaluation runs: tasks, turn and token budgets, decoding. ``trace evaluate``, ``trace compare`` and
    the pipeline's ``[evaluation]`` embed it (the split and the env's difficulty are each command's own)."""

    episodes: int = knob(50, "tasks evaluated (the same seeds for every method: paired tests)", minimum=1)
    seed_offset: int = knob(0, "first task index of the split", minimum=0)
    max_turns: int | None = knob(None, "turn cap per episode (None: " + AUTO_CAPS + ")", minimum=1)
    max_new_tokens: int | None = knob(None, "tokens per assistant turn (None: " + AUTO_CAPS + ")", minimum=1)
    temperature: float = knob(0.0, "sampling temperature (0 = greedy)", minimum=0)
    batch_size: int = knob(
        16, "episodes decoded together; a finished episode's slot starts the next one at once", minimum=1
    )
    max_total_tokens: int = knob(
        32768,
        "cut a conversation past this many tokens (the env's turn limit normally ends it first)",
        minimum=1,
    )
    min_oracle_ceiling: float = knob(
        0.9,
        "refuse caps under which the oracle's own episode fits max_new_tokens and max_turns on fewer of the env's "
        "first 16 train tasks (trace_train/ceiling.py; 0: never refuse)",
        minimum=0,
        maximum=1,
    )
    stop_when_decided: bool = knob(
        False,
        "end an episode once the env says its reward can no longer change (trace/retail-v2: the first violation, "
        "e.g. an unconfirmed or wrong write): every episode's reward, success and first failure are those of the "
        "full episode, in fewer turns",
    )

    def __post_init__(self) -> None:
        _check_positive(self, "episodes", "batch_size", "max_total_tokens")
        _check_caps(self)
        _check_positive(self, "seed_offset", minimum=0)
        if not 0.0 <= self.temperature < float("inf"):
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}")


@dataclass
class EvaluateArgs(EvalSettings, EngineArgs, GenerationSettings):
    """``trace evaluate``: :class:`EvalSettings` plus the policy and where the episodes go."""

    env_id: str
    model: str = knob(
        "smollm2-135m", "alias, local HF dir, compose:DIR, or the served model name (--base-url)"
    )
    adapter: str | None = knob(None, "PEFT adapter directory; with --base-url, the served LoRA name")
    base_url: str | None = knob(None, "OpenAI-compatible endpoint (vLLM, llama.cpp) instead of a local model")
    split: str = knob("test", "the split evaluated", enum=["train", "test"])
    difficulty: int | None = knob(None, "the env's difficulty level (None: the id's default)")
    target_difficulty: int | None = knob(None, TARGET_DIFFICULTY_HELP, minimum=1)
    dtype: str = knob("float32", "weights dtype of a local model")
    out: str | None = knob(None, "trajectories JSONL (default runs/eval/<env>-<split>.jsonl)")
    resume: bool = knob(False, "keep the episodes --out already holds for these tasks and run only the rest")

    def __post_init__(self) -> None:
        EvalSettings.__post_init__(self)
        GenerationSettings.__post_init__(self)
        check_choices(self)
        if self.split not in ("train", "test"):
            raise ValueError(f"--split must be train or test, got {self.split!r}")


@dataclass(kw_only=True)
class CalibrationSettings:
    """How ``trace calibrate`` measures an env's levels with the agent that will train (the pipeline's
    ``[calibration]``): G samples on each of S train seeds per level, against TRACE's bands."""

    seeds: int = knob(8, "S: train seeds per difficulty level", minimum=1)
    group_size: int = knob(4, "G: samples per seed", minimum=2)
    levels: list[int] = knob([], "difficulty levels to measure (empty: every level the env has)")
    temperature: float = knob(1.0, "sampling temperature (the one training samples at)", minimum=0)
    max_new_tokens: int | None = knob(None, "tokens per turn (None: " + AUTO_CAPS + ")", minimum=1)
    max_turns: int | None = knob(None, "turn cap (None: " + AUTO_CAPS + ")", minimum=1)
    batch_size: int = knob(16, "episodes generated together", minimum=1)
    band_low: float = knob(0.2, "TRACE's band: lowest mean reward and success", minimum=0, maximum=1)
    band_high: float = knob(0.6, "TRACE's band: highest mean reward and success", minimum=0, maximum=1)
    informative: float = knob(0.5, "TRACE's band: least share of informative groups", minimum=0, maximum=1)
    min_oracle_ceiling: float = knob(
        0.9,
        "refuse a level where the oracle's own episode fits max_new_tokens and max_turns on fewer of the measured "
        "tasks (trace_train/ceiling.py; 0: never refuse)",
        minimum=0,
        maximum=1,
    )

    def __post_init__(self) -> None:
        _check_positive(self, "seeds", "batch_size")
        _check_caps(self)
        if self.group_size < 2:
            raise ValueError(f"--group-size must be >= 2 (a group needs two samples), got {self.group_size}")
        if not 0.0 <= self.band_low <= self.band_high <= 1.0:
            raise ValueError(
                f"the band needs 0 <= band_low <= band_high <= 1, got {self.band_low}, {self.band_high}"
            )


@dataclass
class CalibrateArgs(CalibrationSettings, EngineArgs, GenerationSettings):
    """``trace calibrate``: :class:`CalibrationSettings` plus the policy and what to write."""

    env_id: str
    model: str = knob("smollm2-135m", "alias, local HF dir, or the served model name (--base-url)")
    adapter: str | None = knob(None, "PEFT adapter (e.g. the warm-started base agent)")
    target_difficulty: int | None = knob(None, TARGET_DIFFICULTY_HELP, minimum=1)
    base_url: str | None = knob(None, "OpenAI-compatible endpoint instead of a local model")
    dtype: str = knob("float32", "weights dtype of a local model")
    threads: int = knob(0, "torch CPU threads (0: torch's default)", minimum=0)
    json: str | None = knob(None, "also write the calibration as JSON here")
    no_write: bool = knob(False, "do not write the chosen level into spec.json")

    def __post_init__(self) -> None:
        CalibrationSettings.__post_init__(self)
        GenerationSettings.__post_init__(self)
        check_choices(self)


@dataclass(kw_only=True)
class RolloutSettings:
    """How many base-agent episodes ``trace rollout`` runs and how it samples (the pipeline's ``[rollouts]``)."""

    episodes: int = knob(64, "episodes to run", minimum=1)
    seed_offset: int = knob(0, "first train-split task index", minimum=0)
    max_turns: int | None = knob(None, "turn cap per episode (None: " + AUTO_CAPS + ")", minimum=1)
    batch_size: int = knob(8, "episodes in flight", minimum=1)
    temperature: float = knob(0.0, "sampling temperature (0 = greedy)", minimum=0)
    top_p: float = knob(1.0, "nucleus sampling", exclusiveMinimum=0, maximum=1)
    max_new_tokens: int | None = knob(None, "tokens per assistant turn (None: " + AUTO_CAPS + ")", minimum=1)
    max_total_tokens: int = knob(
        32768, "local engine: cut longer conversations (scored as they stand)", minimum=1
    )
    min_oracle_ceiling: float = knob(
        0.9,
        "refuse caps under which the oracle's own episode fits max_new_tokens and max_turns on fewer of the env's "
        "first 16 train tasks (trace_train/ceiling.py; 0: never refuse)",
        minimum=0,
        maximum=1,
    )

    def __post_init__(self) -> None:
        _check_positive(self, "episodes", "batch_size", "max_total_tokens")
        _check_caps(self)
        _check_positive(self, "seed_offset", minimum=0)


@dataclass(kw_only=True)
class GRPOSettings:
    """GRPO's hyperparameters: what ``trace train`` and the pipeline's ``[adapters]`` section share (the section
    embeds this class with its own defaults, so every knob of the trainer is reachable from ``trace run``)."""

    steps: int = knob(20, "optimiser steps", minimum=0)
    groups_per_step: int = knob(4, "seed groups per step (per process)", minimum=1)
    group_size: int = knob(8, "rollouts per seed: advantages are relative to the group", minimum=2)
    hint_fraction: float = knob(
        0.0, "share of each group rolled out with the env's hint", minimum=0, maximum=1
    )
    temperature: float = knob(1.0, "sampling temperature of the rollouts", minimum=0)
    top_p: float = knob(1.0, "nucleus sampling", exclusiveMinimum=0, maximum=1)
    max_new_tokens: int | None = knob(None, "tokens per assistant turn (None: " + AUTO_CAPS + ")", minimum=1)
    max_turns: int | None = knob(None, "turn cap per episode (None: " + AUTO_CAPS + ")", minimum=1)
    max_total_tokens: int = knob(
        8192,
        "cut a conversation past this many tokens (retail's prompt alone is ~3k SmolLM2 tokens)",
        minimum=1,
    )
    loss_type: str = knob(
        "grpo", "loss variant: grpo, dr_grpo, dapo (clip-higher, token-level)", enum=list(LOSS_TYPES)
    )
    beta: float = knob(
        0.0, "KL weight toward the base (the adapter disabled); 0: no reference pass", minimum=0
    )
    clip_eps_low: float = knob(0.2, "lower clip of the importance ratio", minimum=0)
    clip_eps_high: float | None = knob(None, "upper clip (None: clip_eps_low; dapo's clip-higher)", minimum=0)
    is_cap: float = knob(
        2.0,
        "truncated importance weights min(exp(old - sampler), is_cap) correct the sampler/trainer mismatch (bf16 "
        "merged-LoRA decoding, vLLM); <= 0 turns the correction off",
    )
    lr: float = knob(1e-4, "learning rate", exclusiveMinimum=0)
    weight_decay: float = knob(0.0, "AdamW weight decay", minimum=0)
    max_grad_norm: float = knob(1.0, "gradient clipping norm", exclusiveMinimum=0)
    ppo_epochs: int = knob(1, "passes over each step's rollouts", minimum=1)
    num_minibatches: int = knob(1, "optimiser steps per pass", minimum=1)
    micro_batch_size: int = knob(8, "sequences per forward/backward", minimum=1)
    micro_batch_tokens: int = knob(
        4096,
        "and at most this many tokens per forward/backward past the shared prefix (at least one sequence): "
        "~2 GB per 1,000 tokens of SmolLM2-135M in bf16",
        minimum=1,
    )
    dynamic_sampling: bool = knob(False, "refill groups whose rewards are all equal (they carry no signal)")
    max_refill_rounds: int = knob(2, "refill rounds per step", minimum=0)
    gradient_checkpointing: bool = knob(
        False, "recompute activations in backward: long tool conversations fit in memory (slower)"
    )
    save_every: int = knob(
        10, "checkpoint every N steps (an interrupted run resumes from the last; 0: never)", minimum=0
    )
    # issue 29: keeping a small agent's groups informative (trace_train/grpo/curriculum.py, rescue.py)
    curriculum: str = knob(
        "fixed",
        "fixed: every group at --difficulty; adaptive: each group's level (start depth) chosen from a running "
        "success estimate per level so groups stay near --curriculum-target, climbing toward the full task "
        "(--difficulty, when given, is the first level tried)",
        enum=list(CURRICULA),
    )
    curriculum_target: float = knob(
        0.5,
        "adaptive curriculum: the success rate a group's level aims at",
        exclusiveMinimum=0,
        exclusiveMaximum=1,
    )
    curriculum_ema: float = knob(
        0.3,
        "adaptive curriculum: weight of a new group in a level's success estimate (EMA)",
        exclusiveMinimum=0,
        maximum=1,
    )
    curriculum_advance: float = knob(
        0.75,
        "adaptive curriculum: the success estimate of the hardest level tried at which the next harder level "
        "is tried (above --curriculum-target: a level near the target is where groups are informative)",
        exclusiveMinimum=0,
        maximum=1,
    )
    reward: str = knob(
        "success",
        "training reward: success (the env's), shaped (the env's declared shaped reward), or mix:ALPHA "
        "(ALPHA * shaped + (1 - ALPHA) * success)",
        pattern=r"^(success|shaped|mix:[0-9.]+)$",
    )
    rescue_fraction: float = knob(
        0.0,
        "share of a group re-sampled with the env's hint when none of its rollouts succeeded (trained on the "
        "base prompt, importance-corrected); 0: off",
        minimum=0,
        maximum=1,
    )
    rescue_is_cap: float = knob(
        2.0,
        "truncation of rescue rollouts' weights pi(a|base prompt) / pi(a|hinted prompt)",
        exclusiveMinimum=0,
    )
    target_share: float = knob(
        0.0,
        "share of each step's groups drawn from --target-env-id's train split (0: off)",
        minimum=0,
        maximum=1,
    )
    rollout_budget: int = knob(
        0,
        "spend at most this many rollouts (refills and rescues included): the last step takes only the groups "
        "that fit, and training stops when no group fits; 0: no budget",
        minimum=0,
    )
    flop_budget: float = knob(
        0.0,
        "spend at most this much model compute, in FLOPs (the rollouts' prefill and decode and the optimiser's "
        "forward and backward, as trace_train.roofline counts them): a step takes only the groups that fit at "
        "the run's mean FLOPs per rollout so far, and training stops when none fits; 0: no budget",
        minimum=0,
    )
    min_oracle_ceiling: float = knob(
        0.9,
        "refuse a run where the oracle's own episode fits max_new_tokens and max_turns on fewer of its first 16 "
        "train tasks, at every level it can train at (trace_train/ceiling.py; 0: never refuse)",
        minimum=0,
        maximum=1,
    )

    def loss_config(self) -> LossConfig:
        from trace_train.grpo.losses import LossConfig

        return LossConfig(self.loss_type, self.clip_eps_low, self.clip_eps_high, self.beta, self.is_cap)

    def __post_init__(self) -> None:
        check_choices(self)
        _check_positive(self, "steps", minimum=0)
        _check_positive(
            self, "groups_per_step", "micro_batch_size", "micro_batch_tokens", "ppo_epochs", "num_minibatches"
        )
        _check_positive(self, "max_total_tokens")
        _check_caps(self)
        _check_positive(self, "save_every", "max_refill_rounds", minimum=0)
        if self.group_size < 2:
            raise ValueError(
                f"--group-size must be >= 2 (advantages are relative to the group), got {self.group_size}"
            )
        if not 0.0 <= self.hint_fraction <= 1.0:
            raise ValueError(f"--hint-fraction must be in [0, 1], got {self.hint_fraction}")
        if not 0.0 <= self.temperature < float("inf"):
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p}")
        if not self.lr > 0.0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")
        if not self.max_grad_norm > 0.0:
            raise ValueError(f"--max-grad-norm must be > 0, got {self.max_grad_norm}")
        self.loss_config()  # loss type, clip range, beta, is_cap
        _check_positive(self, "rollout_budget", minimum=0)
        if self.flop_budget < 0:
            raise ValueError(f"--flop-budget must be >= 0, got {self.flop_budget}")
        if 0 < self.rollout_budget < self.group_size:
            raise ValueError(
                f"--rollout-budget {self.rollout_budget} fits no group of --group-size {self.group_size}: "
                "training would spend nothing"
            )
        from trace_train.grpo.curriculum import RewardChoice  # light: no torch

        RewardChoice.parse(self.reward)
        if not 0.0 < self.curriculum_target < 1.0:
            raise ValueError(f"--curriculum-target must be in (0, 1), got {self.curriculum_target}")
        if not 0.0 < self.curriculum_ema <= 1.0:
            raise ValueError(f"--curriculum-ema must be in (0, 1], got {self.curriculum_ema}")
        if not 0.0 < self.curriculum_advance <= 1.0:
            raise ValueError(f"--curriculum-advance must be in (0, 1], got {self.curriculum_advance}")
        for name in ("rescue_fraction", "target_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}")
        if not self.rescue_is_cap > 0.0:
            raise ValueError(f"--rescue-is-cap must be > 0, got {self.rescue_is_cap}")


@dataclass
class GRPOArgs(GRPOSettings, EngineArgs, LoraArgs):
    """``trace train``: GRPO's hyperparameters plus what one run needs (env, model, output, LoRA, dtype, vLLM)."""

    env_id: str
    model: str = knob("smollm2-135m", "model alias or local Hugging Face directory")
    out: str = knob("runs/grpo", "output directory (adapter, checkpoints, metrics)")
    init_adapter: str | None = knob(None, "start from an existing adapter (e.g. `trace sft` output)")
    difficulty: int | None = knob(None, "the env's difficulty level (None: the id's default)")
    target_difficulty: int | None = knob(None, TARGET_DIFFICULTY_HELP, minimum=1)
    target_env_id: str | None = knob(
        None, "the target env whose train-split groups are mixed in (--target-share)"
    )
    seed: int = knob(0, "seed of sampling and initialisation")
    lora_rank: int = knob(16, "LoRA rank")
    lora_alpha: int = knob(32, "LoRA alpha")
    lora_dropout: float = knob(0.0, "LoRA dropout")
    lora_target_modules: list[str] = knob(list(LORA_TARGETS), "modules that get a LoRA")
    dtype: str = knob("float32", "weights dtype (auto: bf16 only where this device computes it natively)")
    # generation on a vLLM OpenAI-compatible server (None: generate locally)
    vllm_url: str | None = knob(
        None, "generate on this vLLM OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1"
    )
    vllm_model: str | None = knob(
        None, "the base model the server serves (checked at start; default: --model)"
    )
    vllm_adapter_dir: str | None = knob(
        None, "where adapters are saved for the server (default OUT/vllm_adapters)"
    )
    vllm_lora_name: str = knob("trace", "adapters are hot-loaded as <name>-step-<n>")
    vllm_timeout: float = knob(300.0, "seconds one generation request may take before it is retried")
    vllm_retries: int = knob(3, "retries of a failed, dropped or timed-out request before training stops")
    num_threads: int = knob(0, "fixed CPU thread count for reproducibility (0: torch's default)")
    deterministic: bool = knob(True, "deterministic kernels where they exist")
    resume: str | None = knob(None, "resume from this checkpoint directory")
    tensorboard: bool = knob(True, "write TensorBoard metrics")
    progress: bool = knob(True, "show a progress bar")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_positive(self, "lora_rank")
        _check_positive(self, "num_threads", minimum=0)
        if self.target_share > 0 and not self.target_env_id:
            raise ValueError(
                "--target-share > 0 needs --target-env-id (the env whose train split is mixed in)"
            )


def _check_caps(args: object) -> None:
    """max_turns and max_new_tokens: a positive int, or None (fitted to the env's oracle, ceiling.fill_caps)."""
    _check_positive(args, *(n for n in ("max_turns", "max_new_tokens") if getattr(args, n) is not None))


def _check_positive(args: object, *names: str, minimum: int = 1) -> None:
    for name in names:
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be an integer >= {minimum}, got {value!r}")


@dataclass(kw_only=True)
class SFTSettings:
    """Supervised fitting to oracle trajectories: what ``trace sft`` and the pipeline's warm start share."""

    episodes: int = knob(64, "oracle episodes (train split)", minimum=1)
    epochs: int = knob(2, "passes over the oracle data", minimum=1)
    lr: float = knob(2e-4, "learning rate", exclusiveMinimum=0)
    batch_size: int = knob(8, "sequences per optimiser step", minimum=1)
    seed_offset: int = knob(0, "first train-split task index (keep other stages' tasks apart)", minimum=0)
    max_turns: int = knob(12, "turn cap of an oracle episode", minimum=1)
    difficulty: int | None = knob(
        None, "difficulty of the oracle episodes (None: the env's default)", minimum=0
    )
    teacher: str = knob(
        "oracle",
        "whose episodes are fitted: oracle (only those that score 1.0 are kept), or oracle-without:CAPABILITY, "
        "the oracle with that capability removed, every episode kept whatever it scores: a base with a planted "
        "gap, for the known-answer test (docs/known-answer.md)",
    )
    levels: list[int] = knob(
        [],
        "spread the oracle episodes over these difficulty levels, in turn (empty: all at `difficulty`). On a "
        "target-derived env, `1 2 3 4` fits every start depth: the turns before the decision too, not only it",
    )
    gradient_checkpointing: bool = knob(
        False, "recompute activations in backward: long tool conversations fit in memory (slower)"
    )
    # a batch is split into micro-batches of at most this many tokens (a shared prefix counted once; at least one
    # sequence each) whose gradients add up to the whole batch's. SmolLM2-135M needs roughly 1.2 GB per 1,000
    # tokens in bf16 and 1.5 GB in float32, and the cached engine also holds the shared prefix's activations
    # (~3.3k tokens on retail) for the whole batch: on retail difficulty 2 in float32, 8192 was OOM-killed at
    # 24 GB and 4096 peaked at 21.7 GB; 2048 leaves room, and the speed is per token, so smaller costs little
    micro_batch_tokens: int = knob(
        2048,
        "tokens per forward/backward past the shared prefix (~1.5 GB per 1,000 tokens in float32)",
        minimum=1,
    )
    # a warm start on two CPU cores takes 40 min to 3 h (1-7 min per step): an interrupted one must not start over
    save_every: int = knob(
        1,
        "checkpoint every N optimiser steps into OUT/checkpoints, where --resume continues from (0: never)",
        minimum=0,
    )

    min_episodes: ClassVar[int] = 1  # the pipeline's adapter fit allows 0 (no fit)

    def __post_init__(self) -> None:
        check_choices(self)
        _check_positive(self, "episodes", minimum=self.min_episodes)
        _check_positive(self, "epochs", "batch_size", "max_turns", "micro_batch_tokens")
        # a seed_offset past the train split is refused by train_reset_seed
        _check_positive(self, "seed_offset", "save_every", minimum=0)
        if not self.lr > 0.0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")
        if self.levels and self.difficulty is not None:
            raise ValueError(
                f"--levels {' '.join(map(str, self.levels))} and --difficulty {self.difficulty} both say where the "
                "oracle episodes start: give one"
            )
        if any(not isinstance(level, int) or level < 0 for level in self.levels):
            raise ValueError(f"--levels must be integers >= 0, got {self.levels!r}")
        if self.teacher != "oracle" and (
            not self.teacher.startswith("oracle-without:") or self.teacher == "oracle-without:"
        ):
            raise ValueError(
                f"--teacher must be oracle or oracle-without:CAPABILITY (e.g. oracle-without:policy-adherence), "
                f"got {self.teacher!r}"
            )

    def removed_capability(self) -> str | None:
        """The capability the teacher leaves out (``oracle-without:CAP``), or None for the full oracle."""
        return self.teacher.removeprefix("oracle-without:") if self.teacher != "oracle" else None

    def episode_difficulties(self) -> list[int | None]:
        """The difficulty of each oracle episode: ``levels`` in turn, or ``difficulty`` for all."""
        return [
            self.levels[i % len(self.levels)] if self.levels else self.difficulty
            for i in range(self.episodes)
        ]


@dataclass
class SFTArgs(SFTSettings, EngineArgs, LoraArgs):
    """``trace sft``: the fitting settings plus what one run needs. The engine (EngineArgs) "cached" computes the
    shared prefix once per batch and packs the rest without padding, the LM head on agent tokens only."""

    env_id: str
    model: str = knob("smollm2-135m", "model alias or local Hugging Face directory")
    out: str = knob("runs/sft", "output directory (adapter, merged model with --merge)")
    seed: int = knob(0, "seed of shuffling and initialisation")
    target_difficulty: int | None = knob(None, TARGET_DIFFICULTY_HELP, minimum=1)
    merge: bool = knob(False, "also save the base with the adapter merged in (a plain model directory)")
    lora_rank: int = knob(16, "LoRA rank")
    lora_alpha: int = knob(32, "LoRA alpha")
    lora_dropout: float = knob(0.0, "LoRA dropout")
    lora_target_modules: list[str] = knob(list(LORA_TARGETS), "modules that get a LoRA")
    dtype: str = knob("float32", "weights dtype (auto: bf16 only where this device computes it natively)")
    resume: bool = knob(
        False,
        "continue from the last checkpoint in OUT/checkpoints when one is there (the run's settings must match)",
    )
    snapshot_steps: list[int] = knob(
        [],
        "also keep the adapter as it is after these optimiser steps, in OUT/snapshots/step-N (one fit, "
        "evaluated at several points, gives a scaling curve in distinct episodes seen)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_positive(self, "lora_rank")
        if any(step < 1 for step in self.snapshot_steps):
            raise ValueError(f"snapshot_steps must be optimiser steps >= 1, got {self.snapshot_steps}")


@dataclass
class DemoArgs:
    """The main job on the embedded default: warm-start, measure, train, measure again.

    Defaults fit about 25 minutes on two CPU cores with SmolLM2-135M. ``env_id`` may be any env with
    ``oracle_actions()``; ``trace/retail-v2`` works the same way but needs a GPU to finish in that time.
    """

    env_id: str = "trace/rg-arith2-v2"  # content-split (arith1's ~40 test tasks are too few)
    model: str = "smollm2-135m"
    out: str = "runs/demo"
    sft_episodes: int = 256
    steps: int = 60
    eval_every: int = 20
    eval_episodes: int = 200
    groups_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 16
    max_turns: int = 1
    min_oracle_ceiling: float = (
        0.9  # GRPO refuses caps that cut the oracle on more tasks (trace_train/ceiling.py)
    )
    lr: float = 1e-4
    dtype: str = "auto"  # bf16 only where it is fast (see trace_train.models.auto_dtype)
    # GRPO stops at the first evaluation past this budget; 0 = no budget (a budget makes the number of
    # steps, and so the result, depend on the machine's speed)
    time_budget_min: float = 0.0
    seed: int = 0
    num_threads: int = 2  # fixed so that a run reproduces on one machine (reduction order)
    grpo_seeds: int = 1  # GRPO runs from the one SFT base (seeds seed..seed+n-1); > 1 reports the spread
    sft_model: str | None = None  # reuse an earlier warm start (a merged model dir, e.g. <out>/sft/merged)

    def __post_init__(self) -> None:
        _check_positive(self, "sft_episodes", "eval_every", "eval_episodes", "groups_per_step", "grpo_seeds")
        _check_positive(self, "max_new_tokens", "max_turns", "num_threads")
        _check_positive(self, "steps", minimum=0)
        if self.group_size < 2:
            raise ValueError(f"--group-size must be >= 2, got {self.group_size}")
        if not self.time_budget_min >= 0:
            raise ValueError(f"--time-budget-min must be >= 0, got {self.time_budget_min}")
