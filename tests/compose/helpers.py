"""Helpers of the composition tests (random adapters, gates that spread tokens)."""

from __future__ import annotations

from pathlib import Path

import torch

TARGETS = ["q_proj", "v_proj", "down_proj"]


def make_adapter(base_dir: Path, out: Path, seed: int, targets=TARGETS, rank: int = 4) -> Path:
    """A random (non-zero B) PEFT LoRA adapter on ``base_dir``, saved like ``trace train`` saves one."""
    from peft import LoraConfig, get_peft_model

    from trace_train.models import load_model

    model, _ = load_model(base_dir)
    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets), init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(out)
    return out


def randomise_gates(comp, seed: int = 0, std: float = 2.0) -> None:
    """Gate weights that spread tokens over every slot (fresh gates route everything to the base)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for gate in comp.gates:
            gate.proj.weight.copy_(torch.randn(gate.proj.weight.shape, generator=gen) * std)
            gate.proj.bias.zero_()


def lookup_gate_args(n_adapters: int = 3, **overrides):
    """Gate-data settings of the tests: one tiny rollout per adapter on the toy lookup env, nothing counted a
    success (``min_reward`` 2) unless overridden."""
    from trace_train.compose.config import ComposeArgs

    envs = ["traintest/lookup-v0"] * n_adapters
    settings = dict(adapters=["a"] * n_adapters, envs=envs, episodes_per_env=1, base_episodes_per_env=0)
    settings |= dict(min_reward=2.0, max_new_tokens=4, max_turns=2, rollout_batch_size=1)
    return ComposeArgs(**{**settings, **overrides})
