"""One policy factory: every command that takes ``--model`` builds its policy here.

A model spec is one of:

* ``oracle`` / ``oracle-without:CAPABILITY``: a scripted agent (:mod:`trace_train.policies.scripted`);
* ``compose:DIR``: a composed model saved by ``trace compose`` (base + adapters + token-level gates), run
  through transformers (vLLM cannot run token-routed adapters);
* ``py:MODULE:NAME``: ``NAME`` in ``MODULE`` is a Policy object, or a callable returning one (your own policy);
* any name with ``base_url`` set: that model on an OpenAI-compatible server (``adapter`` names a LoRA it
  hot-loaded; key from ``$OPENAI_API_KEY``);
* a model alias or local directory with ``generation.server_url`` set: that model's tokenizer here, its
  generation on a server that takes token ids (vLLM, SGLang, ``trace serve``), with ``adapter`` hot-loaded there
  (:class:`~trace_train.policies.served.ServedPolicy`);
* anything else: a model alias (``smollm2-135m``), a local Hugging Face directory or hub id, optionally with a
  PEFT ``adapter`` directory (:meth:`HFPolicy.from_pretrained`), configured with ``engine``/``tool_format``.
"""

from __future__ import annotations

import importlib
from typing import Any

from trace_train.config import GenerationSettings
from trace_train.policies.base import Policy
from trace_train.policies.scripted import ScriptedAgent, scripted_agent


def make_policy(
    spec: str,
    *,
    adapter: str | None = None,
    base_url: str | None = None,
    dtype: str = "float32",
    device: str | None = None,
    engine: str | None = None,
    tool_format: str | None = None,
    generation: GenerationSettings | None = None,
) -> Policy | ScriptedAgent:
    """The policy a spec names (see the module docstring); raises ``ValueError`` naming what is wrong."""
    scripted = scripted_agent(spec)
    if scripted is not None:
        return scripted  # nothing to generate: a server changes nothing
    server = generation.server_url if generation is not None else None
    if server and (base_url or spec.startswith(("py:", "compose:"))):
        raise ValueError(
            f"--server-url generates {spec!r} from token ids on a server, which "
            + (
                "a composed model cannot use (vLLM has no per-token adapter routing): run it locally, or serve it "
                "with `trace serve compose:DIR` and pass that as --base-url"
                if spec.startswith("compose:")
                else "a py: policy or a --base-url chat model cannot use: pass one of them only"
            )
        )
    if spec.startswith("py:"):
        module_name, _, attr = spec[len("py:") :].partition(":")
        if not module_name or not attr:
            raise ValueError(f"a py: policy spec is py:MODULE:NAME, got {spec!r}")
        try:
            target: Any = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"cannot load {spec!r}: {err}") from err
        # A class (which also "looks like" a Policy to isinstance) or a factory is called; an instance is used.
        is_factory = isinstance(target, type) or (callable(target) and not isinstance(target, Policy))
        policy = target() if is_factory else target
    elif base_url:
        from trace_train.policies.openai_http import OpenAIHTTPPolicy

        policy = OpenAIHTTPPolicy(model=spec, base_url=base_url, lora_name=adapter)
    elif server:
        from trace_train.policies.served import ServedPolicy

        policy = ServedPolicy.connect(
            spec,
            server,
            served_model=generation.served_model,
            adapter=adapter,
            timeout=generation.server_timeout,
            max_retries=generation.server_retries,
        )
    elif spec.startswith("compose:"):
        from trace_train.compose.artefact import load_composition
        from trace_train.policies.hf import HFPolicy

        composition, tokenizer, manifest = load_composition(
            spec[len("compose:") :], dtype=dtype, device=device
        )
        policy = HFPolicy(composition.model, tokenizer, name=f"compose:{manifest.get('name', spec)}")
    else:
        from trace_train.policies.hf import HFPolicy

        policy = HFPolicy.from_pretrained(spec, adapter=adapter, dtype=dtype, device=device)
    if engine is not None or tool_format is not None:
        configure = getattr(policy, "configure", None)
        if configure is not None:
            policy = configure(engine=engine, tool_format=tool_format)
    if not isinstance(policy, Policy):
        raise ValueError(
            f"{spec!r} did not give a Policy (an object with name and act()), got {type(policy).__name__}"
        )
    return policy


def policy_from_args(args: Any) -> Policy | ScriptedAgent:
    """:func:`make_policy` from a command's arguments (``model``, ``adapter``, ``base_url``, ``dtype``, the
    :class:`~trace_train.config.EngineArgs` ``engine``/``tool_format`` and, where the command has them, the
    :class:`~trace_train.config.GenerationSettings`), e.g. ``RolloutArgs`` or ``EvaluateArgs``."""
    from trace_train.config import settings_of

    generation = (
        GenerationSettings(**settings_of(args, GenerationSettings))
        if isinstance(args, GenerationSettings)
        else None
    )
    return make_policy(
        args.model,
        adapter=args.adapter,
        base_url=args.base_url,
        dtype=args.dtype,
        engine=args.engine,
        tool_format=args.tool_format,
        generation=generation,
    )


def release(policy: Any) -> None:
    """Free what ``policy`` holds outside this process: a :class:`~trace_train.policies.served.ServedPolicy`'s
    hot-loaded adapter is unloaded from its server (other policies hold nothing there)."""
    from trace_train.policies.served import ServedPolicy

    if isinstance(policy, ServedPolicy):
        policy.close()
