"""vLLM's generation endpoints on ``trace serve``: token-id completions with log-probs, and LoRA hot-loading.

The pipeline's ``[generation]`` section (and the trainer's ``--vllm-url``) generate on a server from token ids:
``POST /v1/completions`` with ``prompt`` as token-id lists, ``stop_token_ids``, ``seed``, ``logprobs`` and
``return_token_ids``; adapters come and go through ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``
and are then addressed as models. This module implements that subset with vLLM's request and answer shapes, so
the same client runs against vLLM on a GPU and against ``trace serve`` on a CPU (where the whole path is tested).

Generation runs on the served :class:`~trace_train.policies.hf.HFPolicy` with its own engine (``cached`` or
``simple``, as the local rollouts use), so a greedy turn generated here is the turn the local engine generates.
Log-probs are the sampler's (after temperature, top-k/top-p), as the local engine reports them: what the
trainer's importance correction compares against.

Adapters: the first load wraps the base model in a :class:`peft.PeftModel`; later loads add named adapters to
it. A request for the base model runs with every adapter disabled, one for an adapter with only that one
active. One lock serialises generation and adapter changes (one model, one device).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trace_train.policies.base import SamplingConfig, cut_after_eos
from trace_train.serve.protocol import MAX_NEW_TOKENS, APIError, _fail, _number


@dataclass(frozen=True)
class CompletionRequest:
    """A validated ``POST /v1/completions`` request (token-id or text prompts)."""

    model: str
    prompts: list[list[int]]
    sampling: SamplingConfig
    stop_token_ids: tuple[int, ...]
    logprobs: bool  # ``logprobs`` >= 0 asks for the chosen tokens' log-probs (no alternatives are sent)
    tokens_as_ids: bool  # ``return_tokens_as_token_ids``: logprobs.tokens as "token_id:N"
    return_token_ids: bool


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def parse_completion_request(body: Any, served: tuple[str, ...], tokenizer: Any) -> CompletionRequest:
    """Validate a completions body; raises :class:`APIError` naming the offending parameter."""
    if not isinstance(body, dict):
        raise _fail("the request body must be a JSON object", "body", "invalid_type")
    model = body.get("model")
    if not isinstance(model, str) or model not in served:
        raise APIError(
            404,
            f"The model '{model}' does not exist; this server serves {', '.join(served)}",
            param="model",
            code="model_not_found",
        )
    prompt = body.get("prompt")
    if isinstance(prompt, str) or _int_list(prompt):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise _fail("'prompt' must be a string, a token-id list, or a non-empty array of them", "prompt")
    prompts: list[list[int]] = []
    for p in prompt:
        if isinstance(p, str):
            p = tokenizer(p, add_special_tokens=False)["input_ids"]
        if not _int_list(p) or not p or not all(0 <= t < len(tokenizer) for t in p):
            raise _fail(
                f"every prompt must be a non-empty string or list of token ids in [0, {len(tokenizer)})",
                "prompt",
            )
        prompts.append(list(p))
    if body.get("n", 1) not in (1, None):
        raise _fail("only n=1 is supported", "n", "unsupported_value")
    if body.get("stream"):
        raise _fail(
            "streaming completions are not supported; use stream=false", "stream", "unsupported_value"
        )
    max_tokens = body.get("max_tokens", 16)
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_NEW_TOKENS
    ):
        raise _fail(
            f"'max_tokens' must be an integer in [1, {MAX_NEW_TOKENS}], got {max_tokens!r}", "max_tokens"
        )
    min_tokens = body.get("min_tokens", 0) or 0
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or not 0 <= min_tokens <= max_tokens:
        raise _fail(f"'min_tokens' must be an integer in [0, max_tokens], got {min_tokens!r}", "min_tokens")
    top_k = body.get("top_k") or 0
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
        raise _fail(f"'top_k' must be an integer >= -1, got {top_k!r}", "top_k")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _fail(f"'seed' must be an integer, got {seed!r}", "seed")
    stop = body.get("stop_token_ids") or []
    if not _int_list(stop):
        raise _fail("'stop_token_ids' must be an array of token ids", "stop_token_ids")
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
        raise _fail(f"'logprobs' must be an integer >= 0, got {logprobs!r}", "logprobs")
    sampling = SamplingConfig(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=max(0, top_k),
        max_new_tokens=max_tokens,
        min_new_tokens=min_tokens,
        seed=seed,
    )
    return CompletionRequest(
        model=model,
        prompts=prompts,
        sampling=sampling,
        stop_token_ids=tuple(stop),
        logprobs=logprobs is not None,
        tokens_as_ids=bool(body.get("return_tokens_as_token_ids")),
        return_token_ids=bool(body.get("return_token_ids")),
    )


def completion_response(
    request: CompletionRequest, outputs: list[tuple[list[int], list[float]]], tokenizer: Any, eos: set[int]
) -> dict[str, Any]:
    """vLLM's answer shape: per prompt a choice with ``text``, ``token_ids`` (when asked), ``logprobs``
    (``tokens`` / ``token_logprobs``, when asked) and ``finish_reason``."""
    choices = []
    generated = 0
    for index, (ids, lps) in enumerate(outputs):
        generated += len(ids)
        choice: dict[str, Any] = {
            "index": index,
            "text": tokenizer.decode(ids, skip_special_tokens=True),
            "finish_reason": "stop" if ids and ids[-1] in eos else "length",
            "stop_reason": None,
            "logprobs": None,
        }
        if request.return_token_ids:
            choice["token_ids"] = list(ids)
        if request.logprobs:
            tokens = (
                [f"token_id:{t}" for t in ids]
                if request.tokens_as_ids
                else [tokenizer.decode([t]) for t in ids]
            )
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": [float(x) for x in lps],
                "top_logprobs": None,
                "text_offset": None,
            }
        choices.append(choice)
    prompt_tokens = sum(len(p) for p in request.prompts)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": generated,
            "total_tokens": prompt_tokens + generated,
        },
    }


class AdapterHost:
    """The served model's hot-loaded LoRA adapters and token-id generation with any of them (see the module
    docstring). ``lock`` is held by every generation on the model, chat requests included."""

    def __init__(self, policy: Any, lock: threading.Lock | None = None):
        self.policy = policy
        self.lock = lock or threading.Lock()
        self.paths: dict[str, str] = {}  # adapter name -> directory it was loaded from
        self.peft: Any = None
        self._lora_policy: Any = None

    @property
    def supported(self) -> bool:
        from trace_train.policies.hf import HFPolicy

        return isinstance(self.policy, HFPolicy)

    def _require(self, what: str) -> None:
        if not self.supported:
            raise APIError(
                400,
                f"{what} needs a transformers model (a model alias or directory), not {type(self.policy).__name__}",
                code="unsupported",
            )
        if hasattr(self.policy.model, "disable_adapter") and self.peft is None:
            raise APIError(
                400,
                f"{what}: this server was started with --adapter; serve the bare base model to hot-load adapters",
                code="unsupported",
            )

    def load(self, body: Any) -> str:
        """``POST /v1/load_lora_adapter``: ``{lora_name, lora_path}``; a name already loaded is refused (as vLLM)."""
        from peft import PeftModel

        from trace_train.policies.hf import HFPolicy

        self._require("loading an adapter")
        if not isinstance(body, dict) or not all(
            isinstance(body.get(k), str) for k in ("lora_name", "lora_path")
        ):
            raise _fail("the body must be {lora_name: str, lora_path: str}", "body")
        name, path = body["lora_name"], body["lora_path"]
        if name in self.paths:
            raise APIError(400, f"The lora adapter '{name}' has already been loaded.", code="already_loaded")
        if not (Path(path) / "adapter_config.json").is_file():
            raise APIError(
                400, f"{path} is not a PEFT adapter directory (no adapter_config.json)", param="lora_path"
            )
        with self.lock:
            try:
                if self.peft is None:
                    self.peft = PeftModel.from_pretrained(self.policy.model, path, adapter_name=name)
                    self._lora_policy = HFPolicy(
                        self.peft, self.policy.tokenizer, name="lora", engine=self.policy.engine
                    )
                    self._lora_policy.renderer = self.policy.renderer
                else:
                    self.peft.load_adapter(path, adapter_name=name)
            except Exception as err:  # noqa: BLE001 - a bad adapter is the client's error, said in one line
                raise APIError(
                    400, f"cannot load adapter {name!r} from {path}: {err}", param="lora_path"
                ) from err
            self.paths[name] = path
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: Any) -> str:
        """``POST /v1/unload_lora_adapter``: ``{lora_name}``; an unknown name is a 404."""
        if not isinstance(body, dict) or not isinstance(body.get("lora_name"), str):
            raise _fail("the body must be {lora_name: str}", "body")
        name = body["lora_name"]
        if name not in self.paths:
            raise APIError(404, f"The lora adapter '{name}' cannot be found.", code="not_found")
        with self.lock:
            del self.paths[name]
            # peft cannot delete its last adapter: that one stays in memory, unreachable (disabled for the base)
            if self.peft is not None and name in self.peft.peft_config and len(self.peft.peft_config) > 1:
                if name in self.peft.active_adapters:
                    self.peft.set_adapter(next(n for n in self.peft.peft_config if n != name))
                self.peft.delete_adapter(name)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def models(self, base: str, created: int) -> list[dict[str, Any]]:
        return [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "trace",
                "root": path,
                "parent": base,
            }
            for name, path in self.paths.items()
        ]

    @contextlib.contextmanager
    def _policy_for(self, model: str, base: str) -> Iterator[Any]:
        if model == base:
            if self.peft is None:
                yield self.policy
            else:
                with self.peft.disable_adapter():  # the injected LoRA layers pass the base through
                    yield self.policy
            return
        self.peft.set_adapter(model)
        yield self._lora_policy

    def generate(self, request: CompletionRequest, base: str) -> list[tuple[list[int], list[float]]]:
        """The generated ids and sampler log-probs of each prompt, on ``request.model`` (base or adapter)."""
        from trace_train.engine import engine_for
        from trace_train.rollout import _engine_generator, _split_output

        self._require("token-id completion")
        if request.model != base and request.model not in self.paths:
            raise APIError(
                404, f"The model '{request.model}' does not exist", param="model", code="model_not_found"
            )
        with self.lock, self._policy_for(request.model, base) as policy:
            if policy.engine == "cached":
                engine_for(policy).clear()  # its kept prefix may come from another adapter's weights
            if request.sampling.seed is not None:
                torch.manual_seed(request.sampling.seed)
            generate = _engine_generator(policy, request.sampling, policy.engine)
            ids, lps = _split_output(generate(request.prompts, list(range(len(request.prompts))), 0), 0)
        stop = set(request.stop_token_ids) | policy.eos_ids
        out = []
        for k, row in enumerate(ids):
            row = cut_after_eos(row, stop, request.sampling.max_new_tokens)
            lp = list(lps[k][: len(row)]) if lps else [float("nan")] * len(row)
            out.append((row, lp))
        return out
