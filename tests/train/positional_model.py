"""A tiny test model that tells positions apart (issue 31), built locally in a few seconds.

The random tiny model of :func:`trace_train.models.build_tiny_model` attends almost uniformly and emits one
token id over and over, never the end of turn: an engine that gives the second turn's tokens the wrong
positions generates the same tokens with log-probs 5e-5 off. This one is the same architecture fitted, here,
on a toy language: after ``<|im_start|>assistant`` it copies the digits of the last message (then ``ok``) and
ends the turn with ``<|im_end|>``. Counting where a reply is and what to copy takes the positions (RoPE), so
its greedy replies vary from conversation to conversation, end, and change when a position is wrong.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from trace_train.models import build_tiny_model

STEPS = 80
SEED = 3


def _conversation(rng: np.random.Generator, tok) -> tuple[list[int], list[int]]:
    """A chat of one to three exchanges (user, then tool replies), and the mask of the assistant tokens."""
    n = int(rng.integers(1, 4))
    messages = [{"role": "system", "content": "You look records up with tools. Be brief."}]
    for i in range(n):
        number = str(int(rng.integers(0, 10 ** int(rng.integers(1, 4)))))
        words = " please" * int(rng.integers(0, 3))
        if i == 0:
            messages.append({"role": "user", "content": f"Find record {number}{words}"})
        else:
            messages.append({"role": "tool", "content": f"record {'ab' * int(rng.integers(0, 4))} {number}"})
        messages.append({"role": "assistant", "content": f"{number} ok"})
    ids: list[int] = []
    mask: list[int] = []
    for m in messages:
        head = tok.encode(f"<|im_start|>{m['role']}\n", add_special_tokens=False)
        body = tok.encode(f"{m['content']}<|im_end|>", add_special_tokens=False)
        tail = tok.encode("\n", add_special_tokens=False)
        ids += head + body + tail
        mask += [0] * len(head) + [int(m["role"] == "assistant")] * len(body) + [0] * len(tail)
    return ids, mask


@functools.cache
def _fitted_state() -> tuple[dict[str, torch.Tensor], object]:
    model, tok = build_tiny_model(seed=SEED)
    rng = np.random.default_rng(SEED)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(STEPS):
        batch = [_conversation(rng, tok) for _ in range(12)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attn = torch.zeros((len(batch), width), dtype=torch.long)
        for r, (x, m) in enumerate(batch):
            ids[r, : len(x)] = torch.tensor(x)
            attn[r, : len(x)] = 1
            labels[r, : len(x)] = torch.where(torch.tensor(m) > 0, torch.tensor(x), -100)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, tok


def build_positional_model(dtype: torch.dtype = torch.float32):
    """A fresh copy of the fitted model (and its tokenizer): ``(model, tokenizer)``."""
    state, tok = _fitted_state()
    model, _ = build_tiny_model(seed=SEED)
    model.load_state_dict(state)
    model.eval()
    return model.to(dtype), tok
