"""Token-exact rollout generation on a vLLM OpenAI-compatible server, with LoRA hot-loading.

The GRPO trainer normally decodes locally. With ``GRPOArgs.vllm_url`` set, each turn's batch of prompts (token
ids, as the rollout keeps them) goes to the server's ``POST /v1/completions`` instead, and the server's sampled
token ids come back and enter the trajectory verbatim: no text is re-tokenised. After every optimiser step the
trainer saves the adapter in PEFT's format to a directory the server can read and hot-loads it under a fresh
name (``<lora_name>-step-<n>``), unloading the previous one, so the next rollouts sample from the updated
policy. Log-probs for the loss are still computed locally; the server's log-probs of the sampled tokens (where
it returns them) are only the sampler side of the truncated importance correction (NaN, i.e. weight 1, where it
returns none). :class:`trace_train.policies.served.ServedPolicy` uses the same generator for every other stage
that generates (rollouts, calibration, evaluation).

All HTTP goes through :class:`trace_gym.openai_client.OpenAIClient`; this module adds seeding, end-of-turn
handling and the adapter bookkeeping.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trace_gym.openai_client import OpenAIClient, OpenAIError
from trace_train.policies.base import SamplingConfig, cut_after_eos


class RemoteGenerationError(RuntimeError):
    """The generation server is unreachable, refuses a request, or cannot return token ids."""


def serve_command(model: str, lora_rank: int) -> str:
    return (
        f"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve {model} --enable-lora --max-lora-rank {lora_rank}"
    )


class RemoteGenerator:
    """Generates rollout turns on a vLLM server from token-id prompts and keeps its LoRA adapter current.

    ``eos_ids``: end-of-turn ids of the local tokenizer (``HFPolicy.eos_ids``); they are sent as
    ``stop_token_ids`` and every answer is cut after the first one (kept), exactly like the local path.
    ``served_model``: the base model the server was started with (checked at :meth:`check_server` when
    given); ``model_hint`` names the model in the start command of error messages. Requests address ``lora_name`` once an adapter is published, the
    base model before.
    """

    def __init__(
        self,
        base_url: str,
        eos_ids: Iterable[int],
        *,
        served_model: str | None = None,
        model_hint: str | None = None,
        lora_rank: int = 16,
        adapter_dir: str | os.PathLike = "vllm_adapters",
        lora_prefix: str = "trace",
        client: OpenAIClient | None = None,
        max_workers: int = 32,
    ):
        self.client = client or OpenAIClient(base_url=base_url)
        self.url = self.client.base_url
        self.eos_ids = {int(t) for t in eos_ids if t is not None}
        self.served_model = served_model
        self.model_hint = model_hint or served_model
        self.lora_rank = lora_rank
        self.adapter_dir = Path(adapter_dir).resolve()
        self.lora_prefix = lora_prefix
        self.lora_name: str | None = None  # the adapter generation currently uses
        self.lora_path: Path | None = None
        self.max_workers = max_workers

    # ---- errors ----------------------------------------------------------------------------------------------
    def _fail(self, what: str, err: Exception) -> RemoteGenerationError:
        # one line: the pipeline prints it as the stage's error
        start = serve_command(self.model_hint or "<model>", self.lora_rank)
        cause = " ".join(str(err).split())
        return RemoteGenerationError(
            f"{what} on the generation server at {self.url} failed: {cause} (start one with `{start}`, "
            "or `trace serve MODEL`; the base model must be the run's, --max-lora-rank at least its LoRA rank)"
        )

    def check_server(self) -> list[str]:
        """The served model ids; a clear error when the server is unreachable or serves another model."""
        try:
            served = self.client.models()
        except OpenAIError as err:
            raise self._fail("listing models (GET /models)", err) from err
        if self.served_model and self.served_model not in served:
            raise RemoteGenerationError(
                f"the vLLM server at {self.url} serves {served}, not {self.served_model!r}; start it with:\n"
                f"    {serve_command(self.served_model, self.lora_rank)}"
            )
        return served

    # ---- generation ------------------------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> list[list[int]]:
        """The generated ids of each prompt, cut after the first end-of-turn id (which is kept)."""
        return self.generate_with_logprobs(prompts, sampling, seeds)[0]

    def generate_with_logprobs(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """The generated ids of each prompt, cut after the first end-of-turn id (which is kept), and the server's
        log-prob of each of them (NaN where the server sent none: the trainer then applies no correction).

        With ``seeds`` (one per prompt) every prompt goes out as its own request, concurrently, so identical
        prompts (a GRPO group) still get distinct, reproducible samples; without, one batched request.
        """
        if not prompts:
            return [], []
        model = self.lora_name or self.served_model
        if model is None:
            raise RemoteGenerationError(
                f"no model to address on {self.url}: publish an adapter first or pass served_model"
            )
        options: dict[str, Any] = {
            "max_tokens": sampling.max_new_tokens,
            "temperature": 0.0 if sampling.greedy else sampling.temperature,
            "top_p": None if sampling.greedy else sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k and not sampling.greedy else None,
            "stop_token_ids": sorted(self.eos_ids) or None,
        }
        if sampling.min_new_tokens:
            options["extra"] = {"min_tokens": sampling.min_new_tokens}
        try:
            if seeds is None:
                outputs = self.client.completions_with_logprobs(model, prompts, seed=sampling.seed, **options)
            else:
                if len(seeds) != len(prompts):
                    raise ValueError("one seed per prompt")

                def one(k: int) -> tuple[list[int], list[float] | None]:
                    return self.client.completions_with_logprobs(
                        model, [prompts[k]], seed=int(seeds[k]), **options
                    )[0]

                with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(prompts)))) as pool:
                    outputs = list(pool.map(one, range(len(prompts))))
        except OpenAIError as err:
            raise self._fail(f"generation (POST /completions, model {model!r})", err) from err
        ids = [cut_after_eos(out, self.eos_ids, sampling.max_new_tokens) for out, _ in outputs]
        lps = [
            [float(x) for x in lp[: len(row)]]
            if lp is not None and len(lp) >= len(row)
            else [math.nan] * len(row)
            for row, (_, lp) in zip(ids, outputs, strict=True)
        ]
        return ids, lps

    # ---- LoRA hot-loading ------------------------------------------------------------------------------------
    def publish(self, model: Any, step: int) -> str:
        """Save ``model``'s adapter (a PeftModel) for ``step``, hot-load it under a fresh name, then unload
        and delete the previous one. Returns the new name, which later requests address."""
        name = f"{self.lora_prefix}-step-{step}"
        path = self.adapter_dir / f"step-{step:07d}"
        if path.exists():
            shutil.rmtree(path)
        model.save_pretrained(str(path))
        try:
            # replace=True: a resumed run may find its own name still loaded from before
            self.client.load_lora_adapter(name, path, replace=True)
        except OpenAIError as err:
            raise self._fail(
                f"hot-loading adapter {name!r} from {path} (POST /load_lora_adapter)", err
            ) from err
        previous, previous_path = self.lora_name, self.lora_path
        self.lora_name, self.lora_path = name, path
        if previous is not None and previous != name:
            try:
                self.client.unload_lora_adapter(previous)
            except OpenAIError as err:
                if err.status not in (400, 404):  # already gone is fine
                    raise self._fail(f"unloading adapter {previous!r}", err) from err
        if previous_path is not None and previous_path != path:
            shutil.rmtree(previous_path, ignore_errors=True)
        return name

    def release(self) -> None:
        """Unload the current adapter from the server and delete its saved copy (the run is over)."""
        name, path = self.lora_name, self.lora_path
        self.lora_name, self.lora_path = None, None
        if name is not None:
            try:
                self.client.unload_lora_adapter(name)
            except OpenAIError as err:
                if err.status not in (400, 404):  # already gone is fine
                    raise self._fail(f"unloading adapter {name!r}", err) from err
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
