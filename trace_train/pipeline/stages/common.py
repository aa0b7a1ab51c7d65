"""Helpers shared by the stages: seed plans, policies, JSONL files, threads."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# A tiny random model for smoke tests (`trace demo --quick`, CI): the embedded SmolLM2's tokenizer (so prompts
# have realistic token counts) with a 2-layer, 64-wide random Llama. It cannot learn the task in a few steps;
# it exercises every stage.
TINY_MODEL = "tiny-random"


def target_kwargs(cfg: Any) -> dict[str, Any]:
    """The target's make kwargs in this run: its difficulty, where the config sets one."""
    return {} if cfg.target.difficulty is None else {"difficulty": cfg.target.difficulty}


def use_run_envs(cfg: Any, env_ids: Iterable[str]) -> None:
    """Make each capability env derived from the target this run's: the target at this run's difficulty.

    A generated package registers its id when trace_gym is imported, with the target kwargs of the files on disk
    at that moment: the package as committed (the target's default difficulty) in a fresh checkout, or before
    this run's synthesis rewrote it. Without this, a run on retail-v2 at difficulty 1 calibrated and trained its
    capability envs on difficulty-2 tasks. Envs not derived from a target (no ``target_kwargs``) are left as
    they are; an id that is not registered is an error that names it."""
    import gymnasium as gym

    from trace_gym.registration import set_target_kwargs

    wanted = target_kwargs(cfg)
    for env_id in env_ids:
        spec = gym.registry.get(env_id)
        if spec is None:
            raise RuntimeError(f"{env_id} is not registered: is its synthesis package importable?")
        if "target_kwargs" in (spec.kwargs or {}):
            set_target_kwargs(env_id, wanted)


def set_threads(n: int) -> None:
    import torch

    if n > 0:
        torch.set_num_threads(n)


def build_tiny_model(directory: Path, seed: int) -> Path:
    """Write the smoke-test model (see ``TINY_MODEL``) as a Hugging Face directory."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trace_train.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "trace_model.json").write_text(json.dumps({"kind": TINY_MODEL, "seed": seed}))
    return directory


def base_policy(config: Any, model: str, adapter: str | None = None) -> Any:
    """A policy of the run's base agent (plus ``adapter``): ``[base]``'s dtype, engine and tool format, generating
    where ``[generation]`` says (on a server, ``adapter`` is hot-loaded there: hand the policy to
    :func:`~trace_train.policy_factory.release` when the stage is done with it)."""
    from trace_train.config import EngineArgs, settings_of
    from trace_train.policy_factory import make_policy

    return make_policy(
        model,
        adapter=adapter,
        dtype=config.base.dtype,
        generation=config.generation,
        **settings_of(config.base, EngineArgs),
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """A training run's per-step metrics (JSONL with a ``step`` key), as the run that finished saw them: a run
    resumed from a checkpoint logs the steps after it again, so a record whose step is not past the previous
    one drops the records it redoes (from that step on)."""
    history: list[dict[str, Any]] = []
    for record in read_jsonl(path):
        step = record.get("step")
        if isinstance(step, int):
            while history and history[-1].get("step", -1) >= step:
                history.pop()
        history.append(record)
    return history


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a JSONL file (a line cut by a crash is dropped: it is redone on resume)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def write_jsonl(path: Path, records: Iterable[dict[str, Any]], append: bool = False) -> None:
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, default=str) + "\n")


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
