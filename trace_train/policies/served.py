"""A local model's policy whose generation runs on a server: vLLM, SGLang or ``trace serve``, from token ids.

The pipeline's ``[generation]`` section (and ``--server-url`` on ``trace rollout``, ``calibrate``, ``evaluate``)
makes every stage that generates use this instead of a local :class:`~trace_train.policies.hf.HFPolicy`. It is
an ``HFPolicy`` without weights: the model's tokenizer and chat rendering stay here, so prompts are the exact
token ids the local engine would build and the trajectory keeps the server's sampled ids verbatim (nothing is
re-tokenised); each turn's batch goes to ``POST /v1/completions`` through
:class:`~trace_train.policies.remote_generation.RemoteGenerator`, which also brings back the sampler's log-probs.
The episode runner, calibration and evaluation then treat it as any local policy (its ``generate_with_logprobs``
replaces the engine, as a custom decoder's does).

An adapter (``adapter=``) is hot-loaded with ``POST /v1/load_lora_adapter`` under a name derived from its path,
addressed by every request, and unloaded by :meth:`ServedPolicy.close`. The path must be readable by the server
(same machine or a shared mount). Composed (token-routed) models cannot be served this way: vLLM has no
per-token adapter routing; they run locally, or on ``trace serve compose:DIR`` through ``--base-url``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from trace_gym.openai_client import OpenAIClient, OpenAIError
from trace_train.chat import ChatRenderer
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.policies.remote_generation import RemoteGenerationError, RemoteGenerator


class ServedPolicy(HFPolicy):
    """See the module docstring. Build one with :meth:`connect`."""

    def __init__(self, tokenizer: Any, generator: RemoteGenerator, name: str, tool_format: str = "json"):
        # HFPolicy's own __init__ reads the weights' generation config; here there are no weights
        self.model = None
        self.engine = "cached"
        self.merge_for_generation = False
        self._merger = None
        self.tokenizer = tokenizer
        self.name = name
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        self.renderer = ChatRenderer(tokenizer, tool_format)
        self.eos_ids = set(generator.eos_ids)
        self.generator = generator
        self.adapter: str | None = None
        self._calls = 0

    @classmethod
    def connect(
        cls,
        model: str,
        url: str,
        *,
        served_model: str | None = None,
        adapter: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 3,
        lora_rank: int = 16,
        tool_format: str = "json",
    ) -> ServedPolicy:
        """The policy of ``model`` (an alias or local directory: its tokenizer is read here) generating on the
        server at ``url``; checks that the server is up and serves that model, and hot-loads ``adapter``."""
        from transformers import AutoTokenizer, GenerationConfig

        from trace_train.models import resolve_model

        path = resolve_model(model)
        tokenizer = AutoTokenizer.from_pretrained(path)
        eos = {tokenizer.eos_token_id}
        try:
            gen_eos = GenerationConfig.from_pretrained(path).eos_token_id
        except OSError:  # no generation_config.json: the tokenizer's end of turn only
            gen_eos = None
        if gen_eos is not None:
            eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        client = OpenAIClient(base_url=url, timeout=timeout, max_retries=max_retries)
        generator = RemoteGenerator(
            url, eos, served_model=served_model, model_hint=str(model), lora_rank=lora_rank, client=client
        )
        generator.served_model = check_served_base(generator, path, served_model)
        policy = cls(tokenizer, generator, name=str(model), tool_format=tool_format)
        if adapter is not None:
            policy.use_adapter(adapter)
        return policy

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")  # the token ids live here; the weights are on the server

    def use_adapter(self, adapter: str) -> str:
        """Hot-load the PEFT adapter directory ``adapter`` on the server and generate with it from now on (the
        previous one, if any, is unloaded). Returns its served name."""
        path = Path(adapter).resolve()
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{adapter} is not a PEFT adapter directory (no adapter_config.json)")
        name = f"trace-{path.name}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        # a failure's hint names the rank the server must allow: this adapter's, not a default
        rank = json.loads((path / "adapter_config.json").read_text()).get("r")
        if isinstance(rank, int):
            self.generator.lora_rank = rank
        self.close()
        try:
            # replace: a stage resumed after a crash finds its own name still loaded
            self.generator.client.load_lora_adapter(name, path, replace=True)
        except OpenAIError as err:
            raise self.generator._fail(f"hot-loading adapter {name!r} from {path}", err) from err
        self.generator.lora_name, self.adapter = name, str(path)
        self.name = f"{self.name.split('+')[0]}+{path}"
        return name

    def close(self) -> None:
        """Unload the hot-loaded adapter (if any) from the server; the policy then generates with the base."""
        name = self.generator.lora_name
        if name is None:
            return
        self.generator.lora_name, self.adapter = None, None
        try:
            self.generator.client.unload_lora_adapter(name)
        except OpenAIError as err:
            if err.status not in (400, 404):  # already gone (a restarted server) is fine
                raise self.generator._fail(f"unloading adapter {name!r}", err) from err

    def generate_with_logprobs(
        self, prompts: list[list[int]], sampling: SamplingConfig, logprobs: bool = True
    ) -> tuple[list[list[int]], list[list[float]]]:
        """One turn of every prompt on the server (one batched request; with a sampling seed, one request per
        prompt, each with its own seed, so identical prompts such as a calibration group differ)."""
        seeds = None
        if not sampling.greedy and sampling.seed is not None:
            self._calls += 1
            seeds = [hash((sampling.seed, self._calls, i)) % 2**31 for i in range(len(prompts))]
        ids, lps = self.generator.generate_with_logprobs(prompts, sampling, seeds)
        return ids, (lps if logprobs else [])


def check_served_base(generator: RemoteGenerator, path: Path, wanted: str | None) -> str:
    """The served name of the base model: ``wanted`` when the server lists it, else the first model it lists
    that is not an adapter. A server whose model directory (``root``, as vLLM and ``trace serve`` report it) is
    another local directory than the run's model is refused: its tokens would mean something else."""
    try:
        answer = generator.client.request("GET", "/models")
    except OpenAIError as err:
        raise generator._fail("listing models (GET /models)", err) from err
    entries = [e for e in (answer.get("data", []) if isinstance(answer, dict) else []) if isinstance(e, dict)]
    bases = [e for e in entries if not e.get("parent")]
    chosen = next((e for e in bases if e.get("id") == wanted), None) if wanted else (bases or [None])[0]
    if chosen is None:
        listed = [e.get("id") for e in entries]
        raise RemoteGenerationError(
            f"the generation server at {generator.url} serves {listed}, not {wanted or 'a base model'}: "
            f"start it on this run's model ({path})"
        )
    root = chosen.get("root")
    if isinstance(root, str) and Path(root).is_dir() and Path(root).resolve() != path.resolve():
        raise RemoteGenerationError(
            f"the generation server at {generator.url} serves {root}, but this run's model is {path}: start the "
            "server on the run's model (its token ids and weights must be the ones trained here)"
        )
    return str(chosen["id"])
