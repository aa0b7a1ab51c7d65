"""Policy specs for ``trace serve``: anything that implements :class:`~trace_train.policies.base.Policy`.

* ``compose:DIR``: a composed model saved by ``trace compose`` (base + adapters + token-level gates), served
  through transformers (vLLM cannot run token-routed adapters);
* ``py:MODULE:NAME``: ``NAME`` in ``MODULE`` is a Policy object, or a callable returning one (your own policy);
* anything else: a model alias (``smollm2-135m``), a local Hugging Face directory or hub id, optionally with a
  PEFT ``adapter`` directory (:meth:`HFPolicy.from_pretrained`).
"""

from __future__ import annotations

import importlib
from typing import Any

from trace_train.policies.base import Policy


def load_policy(
    spec: str, adapter: str | None = None, dtype: str = "float32", device: str | None = None
) -> Policy:
    """The policy a spec names (see the module docstring); raises ``ValueError`` naming what is wrong."""
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
    if not isinstance(policy, Policy):
        raise ValueError(
            f"{spec!r} did not give a Policy (an object with name and act()), got {type(policy).__name__}"
        )
    return policy
