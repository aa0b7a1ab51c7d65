"""Argument dataclasses of ``trace compose`` and ``trace compare`` (no heavy imports: ``--help`` stays fast)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ComposeArgs:
    adapters: list[str]  # PEFT adapter dirs (or `trace train` run dirs), one per capability
    envs: list[str]  # the capability env each adapter was trained on (same order); gate data comes from it
    out: str = "runs/compose"
    model: str = "smollm2-135m"
    names: list[str] = field(default_factory=list)  # slot names; default: the env ids' names
    dtype: str = "float32"
    seed: int = 0
    # gate-training data
    episodes_per_env: int = 32  # rollouts of each adapter on its env (successes are kept)
    base_episodes_per_env: int = 8  # base rollouts per env, labelled slot 0
    min_reward: float = 1.0  # an adapter episode counts as a success from this reward
    difficulties: list[int | None] = field(
        default_factory=list
    )  # per env (same order); default: each env's own
    # an adapter with no successful rollout on its env is labelled on this many oracle episodes of the env
    # instead (train tasks from oracle_seed_offset); 0: such an adapter gets no gate data
    oracle_episodes: int = 0
    oracle_seed_offset: int = 500_000
    temperature: float = 1.0
    max_new_tokens: int = 128
    max_turns: int = 6
    max_total_tokens: int = 8192
    rollout_batch_size: int = 16
    # optimisation (only the gates train)
    steps: int = 200
    batch_size: int = 4
    # padded positions per forward/backward (a step's examples are split, gradients accumulate): four 2.7k-token
    # retail conversations at once took the demo past 24 GB; 0 = the whole batch at once
    micro_batch_tokens: int = 4096
    lr: float = 1e-3
    max_grad_norm: float = 1.0
    label_weight: float = 1.0  # gate cross-entropy against the token labels
    lm_weight: float = 1.0  # next-token loss of successful episodes through the routed model
    balance_weight: float = 0.01  # Switch load-balancing term
    base_bias: float = 1.0  # initial slot-0 bias of every gate (routing starts at the base)
    save_every: int = 50
    # continue from OUT/checkpoints/latest with the data of OUT/gate_data.pt; with the data but no checkpoint yet
    # (a run stopped before its first save), start at step 0 on that data
    resume: bool = False
    tensorboard: bool = True

    def __post_init__(self) -> None:
        # from the command line the levels arrive as strings (`--difficulties 1 none`)
        self.difficulties = [
            None if d is None or str(d).lower() == "none" else int(d) for d in self.difficulties
        ]
        if self.micro_batch_tokens < 0:
            raise ValueError(f"--micro-batch-tokens must be >= 0, got {self.micro_batch_tokens}")
        if self.oracle_episodes < 0:
            raise ValueError(f"--oracle-episodes must be >= 0, got {self.oracle_episodes}")


# Settings that must match for a resume to be meaningful.
RESUME_KEYS = ("adapters", "envs", "model", "names", "dtype", "seed", "batch_size", "base_bias")


@dataclass
class CompareArgs:
    """Flags of ``trace compare`` (see ``trace_train.compose.compare``)."""

    target: str
    composition: str  # artefact directory written by `trace compose`
    models: list[str] = field(default_factory=lambda: ["base", "adapters", "router", "moe"])
    episodes: int = 200
    split: str = "test"
    seed_offset: int = 0
    # the target's difficulty level (default: the env's); `trace demo` evaluates at 1
    difficulty: int | None = None
    max_turns: int = 8
    max_new_tokens: int = 256
    batch_size: int = 16
    dtype: str | None = None  # default: the artefact's
    model: str | None = None  # override the artefact's base model path (same architecture and weights)
    out: str = "runs/compare"
    gate_chart: bool = True
    capability_episodes: int = 20  # recorded MoE episodes per env (target + capability envs) for the chart
