"""The pipeline's configuration: one TOML file, validated against a published JSON Schema.

Every section is a dataclass (CleanRL style: one readable place per knob). Sections that configure a trainer
embed its settings class (``[adapters]`` is :class:`GRPOSettings`, ``[base.warm_start]`` and ``[adapters.sft]``
are :class:`SFTSettings`, ``[rollouts]`` is :class:`RolloutSettings`, ``[calibration]`` is :class:`CalibrationSettings`,
``[gates]`` is :class:`GateSettings`, ``[evaluation]`` is :class:`EvalSettings`,
``[generation]`` is :class:`GenerationSettings`,
``[base]`` holds :class:`EngineArgs`), with
the pipeline's own defaults, so every knob of those commands is reachable from ``trace run`` and a stage hands
the settings over whole (:func:`trace_train.config.settings_of`), never field by field. The JSON Schema in
``config.schema.json`` is generated from these classes (``python -m trace_train.pipeline.config --schema``);
a test keeps the two in step, so the published schema is exactly what ``trace run`` accepts.

Loading is strict: a TOML syntax error names the line, an unknown key names the nearest known one, a value of
the wrong type or out of range names its dotted path. Nothing is defaulted silently except absent keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_train.compose.config import GateSettings
from trace_train.config import (
    DTYPES,
    CalibrationSettings,
    DemoArgs,
    EngineArgs,
    EvalSettings,
    GenerationSettings,
    GRPOSettings,
    RolloutSettings,
    SFTSettings,
    knob,
)

SCHEMA_PATH = Path(__file__).with_name("config.schema.json")
CONFIG_DIR = Path(__file__).with_name("configs")


@dataclass
class TargetConfig:
    env_id: str = knob("trace/retail-v2", "Gymnasium id of the target environment", minLength=1)
    difficulty: int | None = knob(None, "target difficulty level (None: the id's default)", minimum=0)


@dataclass
class WarmStartConfig(SFTSettings):
    """``trace sft``'s settings (:class:`SFTSettings`) with the warm start's defaults."""

    enabled: bool = knob(False, "supervised warm start on oracle trajectories before anything else")
    shipped: bool = knob(
        True,
        "use the shipped base (trace_train/bases) whose recipe is exactly this warm start, when there is one, "
        "instead of fitting it here (false: always fit)",
    )
    envs: list[str] = knob([], "envs whose train-split oracle trajectories are used (default: the target)")
    epochs: int = knob(1, "passes over the oracle data", minimum=1)
    seed_offset: int = knob(
        500_000, "first train-split task index (kept apart from the tasks rollouts and GRPO use)", minimum=0
    )
    seed: int = knob(
        0,
        "the fit's own seed, apart from the run's: the shipped base is seed 0's fit, so a run with another `seed` "
        "repeats every stage after the base from the same base (set both for a second base too)",
        minimum=0,
    )


@dataclass
class BaseConfig(EngineArgs):
    """The base agent; its engine and tool format (:class:`EngineArgs`) apply to every stage that runs it."""

    model: str = knob("smollm2-135m", "model alias or local Hugging Face directory", minLength=1)
    dtype: str = knob("float32", "weights dtype", enum=list(DTYPES))
    lora_rank: int = knob(16, "LoRA rank of the warm-start and capability adapters", minimum=1)
    lora_alpha: int = knob(32, "LoRA alpha", minimum=1)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig, metadata={"help": "SFT warm start"})


@dataclass
class GenerationConfig(GenerationSettings):
    """Where every stage that generates does it (:class:`GenerationSettings`): the local engine, or a server that
    takes token ids and hot-loads LoRA adapters (vLLM, SGLang, ``trace serve``) started on this run's base model
    (``[base] model``; docs/pipeline.md shows the command). With a server, rollouts, calibration, the adapters' and
    direct GRPO's rollouts, the gate data's rollouts and the evaluation of the base, each adapter and direct GRPO
    generate there, each adapter hot-loaded for its stage and unloaded after. The gated composition (MoE) is
    evaluated locally (vLLM cannot route adapters per token), and so is the router (step 4's code)."""


@dataclass
class RolloutsConfig(RolloutSettings):
    """``trace rollout``'s settings (:class:`RolloutSettings`) with step 1's defaults."""

    episodes: int = knob(64, "base-agent episodes on the target's train split", minimum=2)
    max_turns: int = knob(10, "turn cap per episode", minimum=1)
    max_new_tokens: int = knob(96, "tokens per assistant turn", minimum=1)
    batch_size: int = knob(16, "episodes generated together", minimum=1)


@dataclass
class AnalysisConfig:
    rho: float = knob(0.10, "minimum coverage Cov of a kept capability", minimum=0, maximum=1)
    delta: float = knob(0.20, "minimum Delta = ER- - ER+ of a kept capability", minimum=-1, maximum=1)
    max_capabilities: int = knob(
        3, "train adapters for at most this many capabilities (best mean Delta)", minimum=1
    )
    examples: int = knob(2, "example failures kept per capability (shown in the reports)", minimum=0)
    force_top_k: int = knob(
        0,
        "smoke tests only: when fewer than this many capabilities pass the thresholds, take the best-ranked "
        "ones anyway (the report marks them as forced)",
        minimum=0,
    )
    force_order: list[str] = knob(
        [],
        "smoke tests only: the capabilities force_top_k takes first, in this order, whatever their coverage (a "
        "random model reaches no decision point, so every capability is NA and none has coverage)",
    )


@dataclass
class SynthesisConfig:
    package: str = knob(
        "generated_envs", "plugin package the capability envs are emitted into (an importable package dir)"
    )
    validate_seeds: int = knob(
        50,
        "seeds of the validation suite run on every emitted env (50, as `trace synthesize`: the files written into "
        "the package are then byte-identical to the committed ones)",
        minimum=2,
    )


@dataclass
class CalibrationConfig(CalibrationSettings):
    """``trace calibrate``'s settings (:class:`CalibrationSettings`) with step 2's defaults."""

    enabled: bool = knob(True, "measure each env with the base agent and pick the difficulty in TRACE's band")
    max_turns: int = knob(8, "turn cap", minimum=1)
    max_new_tokens: int = knob(96, "tokens per turn", minimum=1)


@dataclass
class AdapterFitConfig(SFTSettings):
    """Before GRPO, fit each adapter to oracle episodes of its env (:class:`SFTSettings`; ``episodes = 0``: GRPO
    only, as the paper). For a base that never succeeds on its env, every group's rewards are equal and GRPO
    learns nothing."""

    min_episodes = 0
    episodes: int = knob(0, "oracle episodes of the adapter's env (0: no fit, GRPO only)", minimum=0)
    epochs: int = knob(1, "passes over those oracle episodes", minimum=1)
    lr: float = knob(1e-3, "learning rate of that fit", exclusiveMinimum=0)
    batch_size: int = knob(4, "sequences per optimiser step of that fit", minimum=1)
    seed_offset: int = knob(
        500_000, "first train-split task index of those episodes (apart from the GRPO tasks)", minimum=0
    )
    micro_batch_tokens: int = knob(
        4096, "tokens per forward/backward of that fit (a shared prefix counted once)", minimum=1
    )


@dataclass
class AdaptersConfig(GRPOSettings):
    """``trace train``'s GRPO settings (:class:`GRPOSettings`) with step 3's defaults, and the oracle fit."""

    steps: int = knob(20, "GRPO steps per capability adapter", minimum=1)
    loss_type: str = knob("dapo", "GRPO loss variant", enum=["grpo", "dr_grpo", "dapo"])
    temperature: float = knob(1.0, "sampling temperature of the rollouts", exclusiveMinimum=0)
    max_new_tokens: int = knob(96, "tokens per turn", minimum=1)
    max_turns: int = knob(8, "turn cap", minimum=1)
    dynamic_sampling: bool = knob(True, "refill groups whose rewards are all equal")
    save_every: int = knob(
        5, "checkpoint every N steps (an interrupted run resumes from the last)", minimum=1
    )
    sft: AdapterFitConfig = field(
        default_factory=AdapterFitConfig, metadata={"help": "the oracle fit before GRPO"}
    )


@dataclass
class GatesConfig(GateSettings):
    """``trace compose``'s settings (:class:`GateSettings`) with step 4's defaults."""

    enabled: bool = knob(True, "train token-level gates over the adapters (the MoE composition)")
    steps: int = knob(50, "gate optimiser steps", minimum=1)
    episodes_per_env: int = knob(16, "rollouts per capability env that feed the gate data", minimum=1)
    base_target_episodes: int = knob(
        8, "base rollouts on the target's train tasks, labelled slot 0 (do no harm: issue 30)", minimum=0
    )
    max_new_tokens: int = knob(96, "tokens per turn of the gate-data rollouts", minimum=1)
    max_turns: int = knob(8, "turn cap of the gate-data rollouts", minimum=1)
    save_every: int = knob(0, "checkpoint every N gate steps (0: every quarter of the steps)", minimum=0)


@dataclass
class EvaluationConfig(EvalSettings):
    """``trace evaluate``'s settings (:class:`EvalSettings`) with the proof's defaults, on the target's test split."""

    episodes: int = knob(200, "test-split tasks (the same seeds for every method: paired tests)", minimum=1)
    max_turns: int = knob(10, "turn cap", minimum=1)
    max_new_tokens: int = knob(96, "tokens per turn", minimum=1)
    adapter_episodes: int = knob(
        0,
        "test tasks of each adapter's own row (the first of the same tasks, paired with the base on those; "
        "0: evaluation.episodes)",
        minimum=0,
    )
    methods: list[str] = knob(
        ["base", "adapters", "router", "moe"],
        "what is evaluated: base, adapters (each adapter alone), router, moe, direct_grpo (GRPO on the target, "
        "as many rollouts as the adapters), direct_grpo_compute (the same, as much training compute)",
        items={"enum": ["base", "adapters", "router", "moe", "direct_grpo", "direct_grpo_compute"]},
        uniqueItems=True,
        minItems=1,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.adapter_episodes > self.episodes:
            raise ValueError(
                f"evaluation.adapter_episodes ({self.adapter_episodes}) exceeds evaluation.episodes "
                f"({self.episodes}): an adapter's row is paired with the base on tasks the base played"
            )


@dataclass
class ReportConfig:
    title: str = knob("TRACE run", "report title")
    other_runs: list[str] = knob(
        [],
        "folders of finished runs of this config with another seed: their final tables go beside this run's "
        "(how much the table moves between seeds)",
    )


@dataclass
class RunConfig:
    name: str = knob("run", "name of the run", minLength=1)
    out: str = knob("runs/run", "output folder (one sub-folder per stage)", minLength=1)
    seed: int = knob(0, "seed of every stage's sampling and initialisation", minimum=0)
    threads: int = knob(0, "torch threads (0: leave torch's default)", minimum=0)
    pipeline: str = knob(
        "trace",
        "trace: the TRACE loop (the sections below); learning-demo: SFT + GRPO + test curve on one env "
        "([learning_demo], e.g. configs/arith.toml)",
        enum=["trace", "learning-demo"],
    )
    target: TargetConfig = field(default_factory=TargetConfig, metadata={"help": "the target environment"})
    base: BaseConfig = field(default_factory=BaseConfig, metadata={"help": "the base agent"})
    generation: GenerationConfig = field(
        default_factory=GenerationConfig,
        metadata={"help": "where the stages generate: the local engine, or a vLLM/SGLang/trace serve server"},
    )
    rollouts: RolloutsConfig = field(default_factory=RolloutsConfig, metadata={"help": "step 1 rollouts"})
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig, metadata={"help": "step 1 analysis"})
    synthesis: SynthesisConfig = field(default_factory=SynthesisConfig, metadata={"help": "step 2"})
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig, metadata={"help": "step 2"})
    adapters: AdaptersConfig = field(default_factory=AdaptersConfig, metadata={"help": "step 3"})
    gates: GatesConfig = field(default_factory=GatesConfig, metadata={"help": "step 4"})
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig, metadata={"help": "the proof"})
    report: ReportConfig = field(default_factory=ReportConfig, metadata={"help": "report.md / report.html"})
    learning_demo: DemoArgs = field(
        default_factory=DemoArgs, metadata={"help": "pipeline = learning-demo: trace_train.demo's arguments"}
    )

    def section(self, name: str) -> dict[str, Any]:
        return dataclasses.asdict(getattr(self, name))


class ConfigError(ValueError):
    """A config that cannot be run; the message names the file, the key and what is wrong."""


# ----- JSON Schema generated from the dataclasses -----------------------------------------------------------
def _type_schema(tp: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        schema = _type_schema(inner[0])
        if type(None) in args:
            schema = {"anyOf": [schema, {"type": "null"}]}
        return schema
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if dataclasses.is_dataclass(tp):
        return schema_of(tp)
    return {
        bool: {"type": "boolean"},
        int: {"type": "integer"},
        float: {"type": "number"},
        str: {"type": "string"},
    }[tp]


def schema_of(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        prop = _type_schema(hints[f.name])
        extra = dict(f.metadata.get("schema", {}))
        if "items" in extra and prop.get("type") == "array":
            prop["items"] = {**prop["items"], **extra.pop("items")}
        target = prop["anyOf"][0] if "anyOf" in prop else prop
        target.update(extra)
        if f.metadata.get("help"):
            prop["description"] = f.metadata["help"]
        if f.default is not dataclasses.MISSING:
            prop["default"] = f.default
        elif not dataclasses.is_dataclass(hints[f.name]):
            prop["default"] = f.default_factory()  # type: ignore[misc]
        props[f.name] = prop
    return {"type": "object", "additionalProperties": False, "properties": props}


def json_schema() -> dict[str, Any]:
    schema = schema_of(RunConfig)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/trace-agentic/trace/trace_train/pipeline/config.schema.json",
        "title": "trace run configuration",
        **schema,
    }


def published_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


# ----- loading ----------------------------------------------------------------------------------------------
def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read, validate and build a :class:`RunConfig` from a TOML file (``overrides``: dotted keys -> values)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    return config_from_dict(data, source=str(path), overridden=set(overrides or {}))


def config_from_dict(
    data: dict[str, Any], source: str = "config", overridden: set[str] = frozenset()
) -> RunConfig:
    """``overridden``: the dotted keys a ``--set`` gave; an error in one of them names the flag, not the file."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(published_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.path), list(map(str, e.path))))
    if errors:
        from_flags = [e for e in errors if ".".join(map(str, e.path)) in overridden]
        if from_flags:
            raise ConfigError("; ".join(f"--set {_explain(e)}" for e in from_flags[:5]))
        raise ConfigError(f"{source}: " + "; ".join(_explain(e) for e in errors[:5]))
    try:
        return _build(RunConfig, data)
    except ValueError as err:  # a section's own checks (e.g. clip_eps_high below clip_eps_low)
        raise ConfigError(f"{source}: {err}") from None


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if dataclasses.is_dataclass(hints[f.name]):
            value = _build(hints[f.name], value)
        elif hints[f.name] is float and isinstance(value, int):
            value = float(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _explain(err: Any) -> str:
    where = ".".join(str(p) for p in err.path) or "(top level)"
    if err.validator == "additionalProperties":
        known = list(err.schema.get("properties", {}))
        unknown = [k for k in err.instance if k not in known]
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, known, n=1)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        section = f"[{where}]" if err.path else "the top level"
        return f"unknown key {', '.join(hints)} in {section}; known keys: {', '.join(known)}"
    return f"{where}: {err.message}"


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted}: {key} is not a section")
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``section.key=value`` with a TOML value (``adapters.steps=5``, ``target.env_id="trace/retail-v2"``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word: take it as a string
    return key.strip(), value


def builtin_config(name: str) -> Path:
    path = CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))
        raise ConfigError(f"no built-in config {name!r}; built-in: {', '.join(known)}")
    return path


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--schema"]:
        SCHEMA_PATH.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {SCHEMA_PATH}")
    else:
        print(json.dumps(json_schema(), indent=2))
