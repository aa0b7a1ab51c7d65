"""A decoder with transformers < 5.24's forward signature, to test code that hands a decoder its KV cache.

5.24 renamed the keyword ``past_key_values`` to ``cache``. Before it, a ``cache=`` keyword fell into
``**kwargs`` and was ignored: the decoder ran without the cache, silently. This subclass behaves that way on the
installed transformers."""

from __future__ import annotations

import inspect

import torch
from transformers.models.llama.modeling_llama import LlamaModel

# the installed version's own name for it (on < 5.24 this subclass changes nothing)
INSTALLED = "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else "past_key_values"


class PastKeyValuesLlamaModel(LlamaModel):
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        inputs_embeds=None,
        use_cache=None,
        **kwargs,
    ):
        kwargs.pop("cache", None)  # an unknown keyword, swallowed as < 5.24 did
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **{INSTALLED: past_key_values},
            **kwargs,
        )


def with_past_key_values_signature(model: torch.nn.Module) -> torch.nn.Module:
    """Give every Llama decoder inside ``model`` the < 5.24 signature (in place); returns ``model``."""
    decoders = [m for m in model.modules() if type(m) is LlamaModel]
    assert decoders, "no LlamaModel inside the model"
    for m in decoders:
        m.__class__ = PastKeyValuesLlamaModel
    return model
