"""Argument dataclasses of the training commands, kept free of heavy imports.

The ``trace`` CLI builds its flags from these classes (``--group-size 8`` is ``GRPOArgs.group_size = 8``), so
they live apart from the modules that import torch and peft: listing envs or printing ``--help`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peft import LoraConfig

    from trace_train.grpo.losses import LossConfig


# weights dtypes every --dtype flag accepts ("auto": bf16 only where it is fast, trace_train.models.auto_dtype)
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class LoraSettings:
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )

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


@dataclass
class GRPOArgs(LoraArgs):
    env_id: str
    model: str = "smollm2-135m"
    out: str = "runs/grpo"
    init_adapter: str | None = None  # start from an existing adapter (e.g. `trace sft` output)
    steps: int = 20
    groups_per_step: int = 4  # per process
    group_size: int = 8
    hint_fraction: float = 0.0
    difficulty: int | None = None
    seed: int = 0
    # decoding
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    max_turns: int = 6
    max_total_tokens: int = 8192  # tool envs: retail prompts alone are ~3k SmolLM2 tokens
    # rollout engine and training log-probs: "cached" (KV cache per conversation across turns, shared prefix,
    # packed prefix-shared log-probs) or "simple" (one generate call per turn, padded log-probs); see docs/training.md
    engine: str = "cached"
    tool_format: str = "json"  # tools in the system prompt of templates without tool support: json | compact
    # loss
    loss_type: str = "grpo"
    beta: float = 0.0
    clip_eps_low: float = 0.2
    clip_eps_high: float | None = None
    # truncated importance weights min(exp(old - sampler), is_cap) correct the sampler/trainer mismatch
    # (bf16 merged-LoRA decoding, vLLM); <= 0 turns the correction off
    is_cap: float = 2.0
    # optimisation
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1
    num_minibatches: int = 1
    micro_batch_size: int = 8
    # and at most this many tokens per forward/backward past the minibatch's shared prefix (at least one sequence):
    # training memory grows with it, ~2 GB per 1,000 tokens of SmolLM2-135M in bf16 (4 x 2k-token sequences at
    # once took the demo's process from 3 to 19 GB)
    micro_batch_tokens: int = 4096
    dynamic_sampling: bool = False
    max_refill_rounds: int = 2
    # LoRA
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=lambda: list(LoraSettings().target_modules))
    dtype: str = "float32"
    gradient_checkpointing: bool = (
        False  # recompute activations in backward: long tool conversations fit in RAM
    )
    # generation on a vLLM OpenAI-compatible server (None: generate locally)
    vllm_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    vllm_model: str | None = None  # the base model the server serves (checked at start; default: --model)
    vllm_adapter_dir: str | None = (
        None  # where adapters are saved for the server to read (default OUT/vllm_adapters)
    )
    vllm_lora_name: str = "trace"  # adapters are hot-loaded as <name>-step-<n>
    # reproducibility: a fixed CPU thread count and deterministic kernels where they exist (0: torch default)
    num_threads: int = 0
    deterministic: bool = True
    # bookkeeping
    save_every: int = 10
    resume: str | None = None
    tensorboard: bool = True
    progress: bool = True

    def loss_config(self) -> LossConfig:
        from trace_train.grpo.losses import LossConfig

        return LossConfig(self.loss_type, self.clip_eps_low, self.clip_eps_high, self.beta, self.is_cap)

    def __post_init__(self) -> None:
        _check_positive(self, "steps", minimum=0)
        _check_positive(
            self, "groups_per_step", "micro_batch_size", "micro_batch_tokens", "ppo_epochs", "num_minibatches"
        )
        _check_positive(self, "max_new_tokens", "max_turns", "max_total_tokens", "lora_rank")
        _check_positive(self, "save_every", "max_refill_rounds", "num_threads", minimum=0)
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


def _check_positive(args: object, *names: str, minimum: int = 1) -> None:
    for name in names:
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be an integer >= {minimum}, got {value!r}")


@dataclass
class SFTArgs(LoraArgs):
    env_id: str
    model: str = "smollm2-135m"
    out: str = "runs/sft"
    episodes: int = 64
    epochs: int = 2
    lr: float = 2e-4
    batch_size: int = 8
    seed: int = 0
    seed_offset: int = 0  # first train-split task index (keep GRPO tasks separate if you like)
    max_turns: int = 12
    difficulty: int | None = None
    merge: bool = False
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=lambda: list(LoraSettings().target_modules))
    dtype: str = "float32"
    gradient_checkpointing: bool = False  # recompute activations in backward (long tool conversations)
    # "cached": the shared prefix once per batch, the rest packed without padding, LM head on agent tokens only;
    # "simple": padded batches (the previous path)
    engine: str = "cached"
    tool_format: str = "json"  # json | compact (see GRPOArgs)
    # tokens per forward/backward: a batch is split into micro-batches of at most this many tokens (a shared
    # prefix counted once; at least one sequence each) whose gradients add up to the whole batch's. Activation
    # memory grows with it: SmolLM2-135M needs roughly 1.2 GB per 1,000 tokens in bf16 and 1.5 GB in float32,
    # and the cached engine also holds the shared prefix's activations (~3.3k tokens on retail) for the whole
    # batch: on retail difficulty 2 in float32, 8192 was OOM-killed at 24 GB and 4096 peaked at 21.7 GB; 2048
    # leaves room (a longer remainder still goes alone), and the speed is per token, so smaller costs little
    micro_batch_tokens: int = 2048

    def __post_init__(self) -> None:
        _check_positive(
            self, "episodes", "epochs", "batch_size", "max_turns", "lora_rank", "micro_batch_tokens"
        )
        _check_positive(self, "seed_offset", minimum=0)  # past the train split: refused by train_reset_seed
        if not self.lr > 0.0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")


@dataclass
class DemoArgs:
    """The main job on the embedded default: warm-start, measure, train, measure again.

    Defaults fit about 25 minutes on two CPU cores with SmolLM2-135M. ``env_id`` may be any env with
    ``oracle_actions()``; ``trace/retail-v0`` works the same way but needs a GPU to finish in that time.
    """

    env_id: str = "trace/rg-arith2-v1"  # content-split (arith1's ~40 test tasks are too few)
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
