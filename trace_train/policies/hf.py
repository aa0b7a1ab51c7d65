"""A transformers (+ peft LoRA) policy with a text API (``act``) and a token-id API (``generate_ids``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import torch
from peft import PeftModel, get_peft_model
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trace_train.chat import ChatRenderer
from trace_train.config import LoraSettings
from trace_train.models import default_device, load_model
from trace_train.policies.base import Conversation, SamplingConfig, ToolSchema, cut_after_eos


def attach_lora(
    model: PreTrainedModel, lora: LoraSettings | None, adapter: str | os.PathLike | None
) -> PeftModel:
    """Wrap a base model with a trainable LoRA adapter: loaded from ``adapter`` or fresh from ``lora``."""
    if adapter is not None:
        return PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    return get_peft_model(model, (lora or LoraSettings()).to_peft())


def ensure_lora(
    model: PreTrainedModel | PeftModel,
    lora: LoraSettings | None,
    adapter: str | os.PathLike | None = None,
) -> PeftModel:
    """``model`` itself when it already has a LoRA adapter, else :func:`attach_lora` of it."""
    if hasattr(model, "disable_adapter"):
        return model
    return attach_lora(model, lora, adapter)


@contextlib.contextmanager
def _grad_flag_on_frozen(model: torch.nn.Module) -> Iterator[None]:
    """Set ``requires_grad`` on frozen weights while decoding under ``no_grad`` (nothing is recorded).

    Measured with torch 2.13 on CPU: ``generate`` with frozen bfloat16 weights (as after ``get_peft_model``)
    ran 2.8x slower than with the same weights flagged ``requires_grad`` (12.8 s vs 4.6 s for 64 x 8
    tokens of SmolLM2-135M): frozen weights take a slower CPU linear path for the decode steps' inputs.
    """
    frozen = [p for p in model.parameters() if not p.requires_grad]
    for p in frozen:
        p.requires_grad_(True)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(False)


class MergedLoRA:
    """Temporarily fold LoRA deltas into the base weights for generation, restoring them bit for bit after.

    Unmerged LoRA costs two extra small matmuls per target module per decoded token; in bfloat16 with float32
    adapters (PEFT's default) it also casts every activation, which made decoding ~4x slower than the plain
    base model on CPU. Merging is exact to restore because the original base weights are kept (once) and
    copied back, instead of subtracting the delta again (which would drift in low precision).
    """

    def __init__(self, model: torch.nn.Module):
        from peft.tuners.lora import LoraLayer

        self.layers = [
            m for m in model.modules() if isinstance(m, LoraLayer) and hasattr(m, "get_delta_weight")
        ]
        self.backup: dict[int, torch.Tensor] = {}

    @contextlib.contextmanager
    def __call__(self, model) -> Iterator[None]:
        if not self.layers:
            yield
            return
        with torch.no_grad():
            for i, layer in enumerate(self.layers):
                weight = layer.get_base_layer().weight
                if i not in self.backup:
                    self.backup[i] = weight.detach().clone()
                for name in layer.active_adapters:
                    if name in layer.lora_A:
                        weight.add_(layer.get_delta_weight(name).to(weight.dtype))
        try:
            with model.disable_adapter():  # the base layers now hold W + delta
                yield
        finally:
            with torch.no_grad():
                for i, layer in enumerate(self.layers):
                    layer.get_base_layer().weight.copy_(self.backup[i])


class HFPolicy:
    """Local causal LM policy. ``model`` may be a bare model or a PeftModel.

    ``merge_for_generation``: decode with the LoRA deltas folded into the weights (see :class:`MergedLoRA`).
    ``engine``: how :func:`trace_train.rollout.collect` decodes with it: ``cached`` (KV cache per conversation
    across turns, shared prefix; :mod:`trace_train.engine`) or ``simple`` (one ``generate`` call per turn).
    ``tool_format``: ``json`` or ``compact`` tool descriptions for templates without native tools
    (:func:`trace_train.chat.tools_system_text`).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str = "hf",
        merge_for_generation: bool = True,
        engine: str = "cached",
        tool_format: str = "json",
    ):
        self.model = model
        self.engine = engine  # rollout engine used by trace_train.rollout.collect: "cached" or "simple"
        self.merge_for_generation = merge_for_generation
        self._merger: MergedLoRA | None = None
        self.tokenizer = tokenizer
        self.name = name
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        self.renderer = ChatRenderer(tokenizer, tool_format)
        self.eos_ids = {tokenizer.eos_token_id}
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        if gen_eos is not None:
            self.eos_ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        adapter: str | os.PathLike | None = None,
        lora: LoraSettings | None = None,
        dtype: torch.dtype | str = torch.float32,
        trainable: bool = False,
        device: torch.device | str | None = None,
    ) -> HFPolicy:
        """Load ``model`` (plus a LoRA adapter when asked) onto ``device``: by default the GPU when there is
        one, else the CPU."""
        device = torch.device(device or default_device())
        # "auto" is decided for the device the model runs on (the CPU's bf16 speed says nothing about a GPU's)
        base, tokenizer = load_model(model, dtype=dtype, device=device.type)
        if adapter is not None or lora is not None or trainable:
            if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
                raise FileNotFoundError(f"{adapter} is not a PEFT adapter directory (no adapter_config.json)")
            base = attach_lora(base, lora, adapter)
        base.to(device)
        return cls(base, tokenizer, name=str(model))

    def configure(self, engine: str | None = None, tool_format: str | None = None) -> HFPolicy:
        """Choose the rollout engine and/or the tool format (commands call this with their flags)."""
        from trace_train.rollout import ENGINES

        if engine is not None:
            if engine not in ENGINES:
                raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")
            self.engine = engine
        if tool_format is not None and tool_format != self.renderer.tool_format:
            self.renderer = ChatRenderer(self.tokenizer, tool_format)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate_ids(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[list[int]]:
        """Generate one continuation per prompt in a single left-padded, KV-cached ``generate`` call.

        Returns the new token ids, cut after the first end-of-turn token (which is kept).
        """
        return self.generate_with_logprobs(prompts, sampling, logprobs=False)[0]

    @torch.no_grad()
    def generate_with_logprobs(
        self, prompts: list[list[int]], sampling: SamplingConfig, logprobs: bool = True
    ) -> tuple[list[list[int]], list[list[float]]]:
        """:meth:`generate_ids` plus the sampler's log-prob of every generated token (the distribution after
        temperature, top-k/top-p and end-of-turn suppression, i.e. ``generate``'s processed scores; greedy:
        temperature 1). With ``logprobs=False`` the second list is empty."""
        if not prompts:
            return [], []
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        kwargs = dict(
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=sorted(self.eos_ids),
            use_cache=True,
        )
        if sampling.min_new_tokens:
            kwargs["min_new_tokens"] = sampling.min_new_tokens
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k or None,
            )
        if logprobs:
            kwargs.update(output_scores=True, return_dict_in_generate=True)
        was_training = self.model.training
        self.model.eval()
        try:
            with self._generation_context():
                out = self.model.generate(
                    input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs
                )
        finally:
            self.model.train(was_training)
        seqs = out.sequences if logprobs else out
        new = seqs[:, width:]
        ids = [cut_after_eos(row, self.eos_ids) for row in new.tolist()]
        if not logprobs:
            return ids, []
        # one [B, V] score tensor per step: log-softmax and gather the chosen token, step by step (no [B, S, V])
        steps = [
            torch.log_softmax(s.float(), -1).gather(-1, new[:, j : j + 1]).squeeze(-1)
            for j, s in enumerate(out.scores)
        ]
        table = torch.stack(steps, 1).tolist() if steps else [[] for _ in prompts]
        return ids, [row[: len(r)] for row, r in zip(table, ids, strict=True)]

    @contextlib.contextmanager
    def _generation_context(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_grad_flag_on_frozen(self.model))
            if self.merge_for_generation and hasattr(self.model, "disable_adapter"):
                if self._merger is None or self._merger_model is not self.model:
                    self._merger, self._merger_model = MergedLoRA(self.model), self.model
                stack.enter_context(self._merger(self.model))
            yield

    def prompt_ids(self, conversation: Conversation, tools: list[ToolSchema]) -> list[int]:
        head, rest = self.renderer.prompt_segments(conversation, tools)
        return head + rest

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def act(
        self, conversations: list[Conversation], tools: list[list[ToolSchema]], sampling: SamplingConfig
    ) -> list[str]:
        prompts = [self.prompt_ids(c, t) for c, t in zip(conversations, tools, strict=True)]
        return [self.decode(ids) for ids in self.generate_ids(prompts, sampling)]
