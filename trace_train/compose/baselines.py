"""Policies of the comparison: base, one adapter, the token-routed MoE, and the baselines it must beat.

* :class:`SlotPolicy` - the composed model forced to one slot: slot 0 is the base, slot k is adapter k
  exactly (bit-identical to the PEFT adapter, tested), so one loaded model serves all of them.
* :class:`MoEPolicy` - the gates decide per token; optionally records which slot the gates chose for the
  tokens of every turn (tool call or reply) for the gate-choice chart.
* :class:`TaskRouterPolicy` - TRACE's task-level router: at the start of a conversation the *base* model
  reads the task and the capability descriptions as a zero-shot multiple-choice question (letters scored by
  their next-token log-probability); the chosen adapter, or none, serves the whole episode.
* :func:`uniform_merged_policy` - every adapter's update averaged and merged into the weights (1/N each).
* :func:`arrow_policy` / :func:`xlora_policy` - peft's own mixtures: Arrow (training-free per-token routing
  by adapter prototypes, top-1 here) and X-LoRA (``top_k_lora=1``; its classifier is untrained unless you
  train it, so it is reported as such).

All are :class:`HFPolicy` subclasses or instances, so ``trace_train.evaluate.evaluate`` runs them through the
token-level rollout engines on the same seeds, by default the cached engine: the router keeps one cached
engine per slot (an episode's adapter is fixed at its first turn), the recording MoE reads the gates' choices
as the engine decodes.
"""

from __future__ import annotations

import collections
import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from trace_train.compose.artefact import AdapterSpec, read_lora_weights
from trace_train.compose.model import Composition
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy

TOOL_CALL = re.compile(r"<tool_call>|\"name\"\s*:")


class SlotPolicy(HFPolicy):
    """The composed model with every token forced to one slot (0 = base, k = adapter k).

    The slot is forced in ``_generation_context``, which both rollout engines (cached and simple) enter around
    every model call; each SlotPolicy has its own cached engine, so a kept shared prefix never crosses slots.
    """

    def __init__(self, composition: Composition, tokenizer: Any, slot: int, name: str | None = None):
        super().__init__(composition.model, tokenizer, name=name or composition.slot_names[slot])
        self.composition, self.slot = composition, slot

    @contextlib.contextmanager
    def _generation_context(self) -> Iterator[None]:
        with super()._generation_context(), self.composition.forced(self.slot):
            yield


class MoEPolicy(HFPolicy):
    """Token-level top-1 routing by the trained gates.

    With ``record_choices`` the slot each layer chose is counted per (``self.context``, turn type, slot) at the
    positions that produced a turn's tokens after its first (the first comes from the chunked prefill of the
    env's reply): on the cached engine as it decodes, on the simple engine by replaying the turn once,
    teacher-forced (routing is a deterministic function of the prefix, so both count the same choices).
    """

    def __init__(
        self, composition: Composition, tokenizer: Any, record_choices: bool = False, name: str = "moe"
    ):
        super().__init__(composition.model, tokenizer, name=name)
        self.composition = composition
        self.record_choices = record_choices
        self.context = "target"
        self.choices: collections.Counter[tuple[str, str, str]] = collections.Counter()

    @contextlib.contextmanager
    def _generation_context(self) -> Iterator[None]:
        with super()._generation_context(), self.composition.forced(None):
            yield

    def engine_session(self, sampling: SamplingConfig, prefix_cap: int | None = None):
        """A cached-engine session; when recording, the decode steps' gate logits are counted per turn."""
        from trace_train.engine import engine_for

        session = engine_for(self).session(sampling, prefix_cap=prefix_cap)
        if not self.record_choices:
            return session

        def generate(prompts: list[list[int]], active: list[int], turn: int):
            with self.composition.recording() as logs:
                outs, lps = session(prompts, active, turn)
            self._count_decode_steps(logs, outs, session.decode_rows)
            return outs, lps

        generate.can_join = session.can_join  # continuous batching (rollout.stream_collect)
        return generate

    def _count_decode_steps(
        self, logs: list[list[torch.Tensor]], outs: list[list[int]], step_rows: list[list[int]]
    ) -> None:
        # the last len(step_rows) forwards of a turn are its decode steps; step j ran the rows step_rows[j] (the
        # engine drops rows that finished) and its row i produced token j + 1 of output step_rows[j][i]
        steps = len(step_rows)
        if steps <= 0:
            return
        names = self.composition.slot_names
        kinds = ["tool call" if TOOL_CALL.search(self.decode(o)) else "reply" for o in outs]
        for layer in logs:
            for j, logits in enumerate(layer[-steps:]):
                if logits.shape[0] != len(step_rows[j]):
                    raise RuntimeError(f"a decode step routed {logits.shape[0]} rows for {len(step_rows[j])}")
                for r, slot in zip(step_rows[j], logits.argmax(-1).tolist(), strict=True):
                    if len(outs[r]) > j + 1:
                        self.choices[(self.context, kinds[r], names[slot])] += 1

    def generate_with_logprobs(
        self, prompts: list[list[int]], sampling: SamplingConfig, logprobs: bool = True
    ) -> tuple[list[list[int]], list[list[float]]]:
        outs, lps = super().generate_with_logprobs(prompts, sampling, logprobs)
        if self.record_choices:
            self._record(prompts, outs)
        return outs, lps

    @torch.no_grad()
    def _record(self, prompts: list[list[int]], outs: list[list[int]]) -> None:
        names = self.composition.slot_names
        for prompt, new in zip(prompts, outs, strict=True):
            if not new:
                continue
            seq = torch.tensor([prompt + new[:-1]], device=self.device)
            with self.composition.recording() as logs:
                self.model(input_ids=seq, logits_to_keep=1, use_cache=False)
            kind = "tool call" if TOOL_CALL.search(self.decode(new)) else "reply"
            first = len(prompt)  # the position that produced new[1] (as on the cached engine)
            for layer in logs:
                slots = layer[0][first:].argmax(-1).tolist()
                for s in slots:
                    self.choices[(self.context, kind, names[s])] += 1


class TaskRouterPolicy(HFPolicy):
    """TRACE's task-level router: one adapter (or none) per episode, chosen zero-shot by the base model."""

    INSTRUCTION = (
        "A specialist will handle the task below. Pick the specialist whose skill the task needs most, "
        "or A if none of them fits. Answer with one letter."
    )

    def __init__(
        self, composition: Composition, tokenizer: Any, adapters: Sequence[AdapterSpec], name: str = "router"
    ):
        super().__init__(composition.model, tokenizer, name=name)
        if len(adapters) > 25:
            raise ValueError("the zero-shot router letters A-Z allow at most 25 adapters")
        self.composition = composition
        self.options = ["none of these: a general assistant"] + [
            f"{a.capability or a.name}: {a.description or a.name}" for a in adapters
        ]
        self.letters = [chr(ord("A") + i) for i in range(len(self.options))]
        self.letter_ids = [self._letter_id(c) for c in self.letters]
        self.cache: collections.OrderedDict[tuple[int, ...], int] = collections.OrderedDict()
        self.episode_slots: collections.Counter[str] = collections.Counter()

    def _letter_id(self, letter: str) -> int:
        ids = self.tokenizer.encode(letter, add_special_tokens=False)
        return ids[0]

    def _task_text(self, prompt: list[int], max_chars: int = 2000) -> str:
        text = self.tokenizer.decode(prompt, skip_special_tokens=True)
        return text[-max_chars:]  # the task itself comes last in a first-turn prompt

    @torch.no_grad()
    def classify(self, prompt: list[int]) -> int:
        menu = "\n".join(f"{c}. {o}" for c, o in zip(self.letters, self.options, strict=True))
        messages = [
            {"role": "system", "content": self.INSTRUCTION},
            {
                "role": "user",
                "content": f"Task:\n{self._task_text(prompt)}\n\nSpecialists:\n{menu}\n\nLetter:",
            },
        ]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        with self.composition.forced(0):
            logits = self.model(
                input_ids=torch.tensor([list(ids)], device=self.device), logits_to_keep=1
            ).logits
        scores = logits[0, -1, self.letter_ids]
        return int(scores.argmax())

    def slot_for(self, prompt: list[int]) -> int:
        """The episode's slot: classified on its first prompt; later turns extend that prompt."""
        for start, slot in reversed(self.cache.items()):
            if len(start) <= len(prompt) and tuple(prompt[: len(start)]) == start:
                return slot
        slot = self.classify(prompt)
        self.cache[tuple(prompt)] = slot
        self.episode_slots[self.composition.slot_names[slot]] += 1
        while len(self.cache) > 512:
            self.cache.popitem(last=False)
        return slot

    def _slot_engine(self, slot: int):
        """One cached engine per slot, decoding with that adapter merged into the weights (``Composition.merged``):
        a kept shared prefix must never cross slots (the weights differ)."""
        from trace_train.engine import CachedEngine

        engines = self.__dict__.setdefault("_slot_engines", {})
        if slot not in engines:

            @contextlib.contextmanager
            def forced() -> Iterator[None]:
                # a whole episode on one adapter: fold it into the weights (the plain base's cost per token)
                with HFPolicy._generation_context(self), self.composition.merged(slot):
                    yield

            engines[slot] = CachedEngine(
                self.model, self.eos_ids, self.tokenizer.pad_token_id, generation_context=forced
            )
        return engines[slot]

    def engine_session(self, sampling: SamplingConfig, prefix_cap: int | None = None):
        """Cached-engine rollouts: each episode's conversations go to the session of its slot."""
        sessions: dict[int, Any] = {}

        def generate(prompts: list[list[int]], active: list[int], turn: int):
            slots = [self.slot_for(p) for p in prompts]
            outs: list[list[int]] = [[] for _ in prompts]
            lps: list[list[float]] = [[] for _ in prompts]
            for slot in sorted(set(slots)):
                rows = [i for i, s in enumerate(slots) if s == slot]
                if slot not in sessions:
                    sessions[slot] = self._slot_engine(slot).session(sampling, prefix_cap=prefix_cap)
                ids, lp = sessions[slot]([prompts[i] for i in rows], [active[i] for i in rows], turn)
                for j, i in enumerate(rows):
                    outs[i], lps[i] = ids[j], lp[j]
            return outs, lps

        def can_join(prompt: list[int]) -> bool:  # continuous batching: the session of the episode's slot
            session = sessions.get(self.slot_for(prompt))
            return session is None or session.can_join(prompt)

        generate.can_join = can_join
        return generate

    def generate_with_logprobs(
        self, prompts: list[list[int]], sampling: SamplingConfig, logprobs: bool = True
    ) -> tuple[list[list[int]], list[list[float]]]:
        slots = [self.slot_for(p) for p in prompts]
        outs: list[list[int]] = [[] for _ in prompts]
        lps: list[list[float]] = [[] for _ in prompts]
        for slot in sorted(set(slots)):
            rows = [i for i, s in enumerate(slots) if s == slot]
            with self.composition.forced(slot):
                ids, lp = super().generate_with_logprobs([prompts[i] for i in rows], sampling, logprobs)
            for j, i in enumerate(rows):
                outs[i] = ids[j]
                lps[i] = lp[j] if lp else []
        return outs, lps


def uniform_merged_policy(base_model: Any, tokenizer: Any, adapters: Sequence[AdapterSpec]) -> HFPolicy:
    """The base with the mean of the N adapters' updates merged into its weights (a plain model)."""
    weights = read_lora_weights(base_model, adapters)
    modules = dict(base_model.named_modules())
    with torch.no_grad():
        for module_name, per_adapter in weights.items():
            w = modules[module_name].weight
            delta = sum((b.float() @ a.float()) * s for a, b, s in per_adapter) / len(per_adapter)
            w.add_(delta.to(w.dtype))
    return HFPolicy(base_model, tokenizer, name="uniform")


def arrow_policy(
    base_model: Any, tokenizer: Any, adapters: Sequence[AdapterSpec], top_k: int = 1
) -> HFPolicy:
    """peft's Arrow: per-token routing among the adapters by their SVD prototypes, no training."""
    from peft import ArrowConfig, create_arrow_model

    model = create_arrow_model(
        base_model=base_model,
        task_specific_adapter_paths=[a.path for a in adapters],
        arrow_config=ArrowConfig(top_k=top_k),
    )
    return HFPolicy(model, tokenizer, name="arrow", merge_for_generation=False)


def xlora_policy(base_model: Any, tokenizer: Any, adapters: Sequence[AdapterSpec]) -> HFPolicy:
    """peft's X-LoRA with ``top_k_lora=1`` (classifier as initialised: X-LoRA needs its own training)."""
    from peft import XLoraConfig, get_peft_model

    config = XLoraConfig(
        task_type="CAUSAL_LM",
        hidden_size=base_model.config.hidden_size,
        adapters={a.name: a.path for a in adapters},
        top_k_lora=1,
    )
    base_model.config.use_cache = False  # X-LoRA's scaling pass does not support a KV cache
    return HFPolicy(get_peft_model(base_model, config), tokenizer, name="xlora", merge_for_generation=False)
