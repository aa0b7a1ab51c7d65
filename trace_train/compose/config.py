"""Argument dataclasses of ``trace compose`` and ``trace compare`` (no heavy imports: ``--help`` stays fast)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trace_train.config import EngineArgs, EvalSettings, GenerationSettings, knob

LABELINGS = ("slot", "advantage")  # how gate labels are put on an adapter's tokens (compose/data.py)


@dataclass(kw_only=True)
class GateSettings:
    """The gate data and the gates' training: what ``trace compose`` and the pipeline's ``[gates]`` share."""

    episodes_per_env: int = knob(32, "rollouts of each adapter on its env (successes are kept)", minimum=1)
    base_episodes_per_env: int = knob(8, "base rollouts per env, labelled slot 0", minimum=0)
    base_target_episodes: int = knob(
        0,
        "base rollouts on the target's own train tasks (needs a target), labelled slot 0: the gates learn to "
        "leave the base alone where no adapter was trained to act (do no harm)",
        minimum=0,
    )
    base_target_seed_offset: int = knob(
        200_000, "first train-split task index of those target rollouts", minimum=0
    )
    min_reward: float = knob(
        1.0, "an adapter episode counts as a success from this reward", minimum=0, maximum=1
    )
    oracle_episodes: int = knob(
        0,
        "an adapter with no successful rollout on its env is labelled on this many oracle episodes of the env "
        "instead (0: such an adapter gets no gate data)",
        minimum=0,
    )
    oracle_seed_offset: int = knob(
        500_000, "first train-split task index of those oracle episodes", minimum=0
    )
    labels: str = knob(
        "slot",
        "which of an adapter's tokens carry its slot label: slot = every token its successful (or oracle) "
        "episodes generated; advantage = only those the adapter predicts more surely than the base by "
        "advantage_margin, the rest labelled base (route to an adapter only where it knows better)",
        enum=list(LABELINGS),
    )
    advantage_margin: float = knob(
        0.693,
        "with labels = advantage: log-probability margin (nats) of the adapter over the base on the labelled "
        "token (0.693: at least twice as likely)",
        minimum=0,
    )
    temperature: float = knob(1.0, "sampling temperature of the gate-data rollouts", minimum=0)
    max_new_tokens: int = knob(128, "tokens per turn of the gate-data rollouts", minimum=1)
    max_turns: int = knob(6, "turn cap of the gate-data rollouts", minimum=1)
    max_total_tokens: int = knob(8192, "cut a gate-data conversation past this many tokens", minimum=1)
    rollout_batch_size: int = knob(16, "gate-data episodes generated together", minimum=1)
    steps: int = knob(200, "gate optimiser steps (only the gates train)", minimum=1)
    batch_size: int = knob(4, "gate-training sequences per step", minimum=1)
    micro_batch_tokens: int = knob(
        4096,
        "padded positions per forward/backward (a step's examples are split, gradients accumulate; four 2.7k-token "
        "retail conversations at once took the demo past 24 GB); 0 = the whole batch at once",
        minimum=0,
    )
    lr: float = knob(1e-3, "gate learning rate", exclusiveMinimum=0)
    max_grad_norm: float = knob(1.0, "gradient clipping norm", exclusiveMinimum=0)
    label_weight: float = knob(1.0, "gate cross-entropy against the token labels", minimum=0)
    lm_weight: float = knob(1.0, "next-token loss of successful episodes through the routed model", minimum=0)
    balance_weight: float = knob(0.01, "Switch load-balancing term", minimum=0)
    base_bias: float = knob(1.0, "initial slot-0 bias of every gate (routing starts at the base)")
    save_every: int = knob(50, "checkpoint every N gate steps", minimum=1)

    def __post_init__(self) -> None:
        if self.micro_batch_tokens < 0:
            raise ValueError(f"--micro-batch-tokens must be >= 0, got {self.micro_batch_tokens}")
        if self.oracle_episodes < 0:
            raise ValueError(f"--oracle-episodes must be >= 0, got {self.oracle_episodes}")
        if self.labels not in LABELINGS:
            raise ValueError(f"--labels must be one of {', '.join(LABELINGS)}, got {self.labels!r}")
        if self.advantage_margin < 0:
            raise ValueError(f"--advantage-margin must be >= 0, got {self.advantage_margin}")


@dataclass
class ComposeArgs(GateSettings, EngineArgs, GenerationSettings):
    """``trace compose``: :class:`GateSettings` plus the adapters, their envs and the run's own settings; the gate
    data is rolled out with :class:`EngineArgs` (the tool format must be the one the adapters trained with), on a
    server when :class:`GenerationSettings` names one (each adapter hot-loaded for its own rollouts)."""

    adapters: list[str]  # PEFT adapter dirs (or `trace train` run dirs), one per capability
    envs: list[str]  # the capability env each adapter was trained on (same order); gate data comes from it
    out: str = "runs/compose"
    model: str = "smollm2-135m"
    names: list[str] = field(default_factory=list)  # slot names; default: the env ids' names
    dtype: str = "float32"
    seed: int = 0
    difficulties: list[int | None] = field(
        default_factory=list
    )  # per env (same order); default: each env's own
    target: str | None = None  # the target env id (base_target_episodes roll the base out on its train split)
    target_difficulty: int | None = None
    # continue from OUT/checkpoints/latest with the data of OUT/gate_data.pt; with the data but no checkpoint yet
    # (a run stopped before its first save), start at step 0 on that data
    resume: bool = False
    tensorboard: bool = True

    def __post_init__(self) -> None:
        # from the command line the levels arrive as strings (`--difficulties 1 none`)
        self.difficulties = [
            None if d is None or str(d).lower() == "none" else int(d) for d in self.difficulties
        ]
        if self.base_target_episodes and not self.target:
            raise ValueError("--base-target-episodes needs --target (the env the base is rolled out on)")
        super().__post_init__()
        GenerationSettings.__post_init__(self)


# Settings that must match for a resume to be meaningful.
RESUME_KEYS = (
    *("adapters", "envs", "model", "names", "dtype", "seed", "batch_size", "base_bias"),
    *("labels", "advantage_margin", "tool_format"),  # they decide the cached gate data
)


@dataclass(kw_only=True)
class CompareArgs(EvalSettings, EngineArgs):
    """Flags of ``trace compare`` (see ``trace_train.compose.compare``): :class:`EvalSettings`, for every model
    on the same tasks, plus the composition and the models compared."""

    target: str
    composition: str  # artefact directory written by `trace compose`
    models: list[str] = field(default_factory=lambda: ["base", "adapters", "router", "moe"])
    split: str = "test"
    # the target's difficulty level (default: the env's); `trace demo` evaluates at 1
    difficulty: int | None = None
    episodes: int = 200
    dtype: str | None = None  # default: the artefact's
    model: str | None = None  # override the artefact's base model path (same architecture and weights)
    out: str = "runs/compare"
    gate_chart: bool = True
    capability_episodes: int = 20  # recorded MoE episodes per env (target + capability envs) for the chart
