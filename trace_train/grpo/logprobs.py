"""Token log-probs of policy tokens under the sampling distribution, computing only what is needed.

Two ways to get the same numbers (tested equal, gradients included):

- :func:`sequence_logprobs`: right-padded sequences, one forward each; the LM head runs on the last positions
  that contain a policy token (``logits_to_keep``).
- :func:`shared_prefix_logprobs`: the sequences of a micro-batch share a prompt prefix (a GRPO group shares its
  whole initial prompt; every retail conversation shares ~2,600 tokens of policy and tool schemas). The prefix is
  computed once, with gradient, as one row; the rest of every sequence is packed several to a row (no padding
  waste) and attends to the prefix's keys/values and to its own earlier tokens only (a 4-D mask); the LM head
  runs only on the hidden states that predict a policy token (gathered before ``lm_head``).
- :class:`PrefixKV`: the same prefix shared by *several* micro-batches (an SFT batch or a GRPO minibatch split
  to bound memory) is computed once per batch, not once per micro-batch: micro-batches read detached copies of
  its keys/values, their gradients add up there, and one backward pushes the sum through the prefix's forward.
- Several groups in one micro-batch: after what all sequences share, each group's own prompt is computed once on
  top of it (recursively: a trie over the prompts), not once per member.

Log-probs are those of the distribution the tokens were sampled from: logits divided by the sampling temperature,
and with top-k / top-p renormalised over the kept tokens (:func:`trace_train.engine.sampling.target_logprobs`,
the sampler's own warpers). Greedy decoding (temperature 0) is scored at temperature 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from trace_train.engine.attention import SharedPrefix, packed_gqa
from trace_train.engine.cache import cache_argument
from trace_train.engine.cached import common_prefix_length
from trace_train.engine.sampling import target_logprobs
from trace_train.policies.base import SamplingConfig
from trace_train.roofline import record_training


def _sampling(sampling: SamplingConfig | None, temperature: float | None) -> SamplingConfig:
    if sampling is not None and temperature is not None and temperature != sampling.temperature:
        raise ValueError("give the temperature either as `temperature` or inside `sampling`, not both")
    if sampling is None:
        sampling = SamplingConfig(temperature=1.0 if temperature is None else temperature)
    return sampling


def pad_batch(seqs: list[list[int]], masks: list[list[int]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-pad ids and masks to [B, T]; returns ids, attention mask, policy mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    pmask = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        pmask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, attn, pmask


def sequence_logprobs(
    model: torch.nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    pmask: torch.Tensor,
    sampling: SamplingConfig | None = None,
    temperature: float | None = None,
    share_prefix: bool = True,
):
    """Log-probs of tokens 1..T-1 under ``model`` and the matching policy mask, both [B, K].

    Right-padded batches (as :func:`pad_batch` makes them) go through :func:`shared_prefix_logprobs` unless
    ``share_prefix`` is False; otherwise one padded forward, where only the last K positions that contain a
    policy token are pushed through the LM head (``logits_to_keep``).
    """
    sampling = _sampling(sampling, temperature)
    lengths = attn.sum(1)
    right_padded = bool(
        (attn == (torch.arange(attn.shape[1], device=attn.device)[None] < lengths[:, None])).all()
    )
    if share_prefix and right_padded and int(lengths.max()) == ids.shape[1]:
        n = lengths.tolist()
        seqs = [row[:k] for row, k in zip(ids.tolist(), n, strict=True)]
        masks = [[int(x) for x in row[:k]] for row, k in zip(pmask.tolist(), n, strict=True)]
        pad = int(ids[0, -1]) if int(n[0]) < ids.shape[1] else 0
        return shared_prefix_logprobs(model, seqs, masks, pad, sampling)
    return _padded_logprobs(model, ids, attn, pmask, sampling)


def _padded_logprobs(model, ids, attn, pmask, sampling: SamplingConfig):
    targets = ids[:, 1:]
    tmask = pmask[:, 1:]
    has = tmask.sum(0).nonzero()
    first = int(has[0]) if len(has) else tmask.shape[1] - 1
    keep = tmask.shape[1] - first  # positions first..T-2 of the logits predict targets first..T-1
    out = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep + 1, use_cache=False)
    record_training(model, [(int(n), 0) for n in attn.sum(1).tolist()], ids.shape[0] * (keep + 1))
    logits = out.logits[:, :-1]  # drop the prediction after the last token
    tgt = targets[:, first:]
    b, k, v = logits.shape
    logp = target_logprobs(logits.reshape(b * k, v), tgt.reshape(-1), sampling).view(b, k)
    return logp, tmask[:, first:]


def _decoder_and_head(model: torch.nn.Module):
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    decoder = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    if decoder is None or head is None or decoder is model:
        return None, None
    return decoder, head


def _replays_safely(decoder: torch.nn.Module) -> bool:
    """Whether the shared-prefix path is exact under the decoder's gradient checkpointing: off, or non-reentrant
    with replays under their forward's attention (:func:`trace_train.grpo.trainer.enable_gradient_checkpointing`).
    A reentrant checkpoint would drop the gradient that reaches the prefix's K/V through the cache, and a replay
    under plain sdpa would ignore the prefix."""
    for m in decoder.modules():
        if getattr(m, "gradient_checkpointing", False):
            keywords = getattr(getattr(m, "_gradient_checkpointing_func", None), "keywords", {})
            context_fn = keywords.get("context_fn")
            if keywords.get("use_reentrant", True) or not getattr(context_fn, "replays_attention", False):
                return False
    return True


def _pack(lengths: list[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: sequence indices per row, each row holding at most ``capacity`` tokens."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(capacity - lengths[i])
    return rows


class _PrefixCache(DynamicCache):
    """A read-only cache over a prefix's ``[1, Hkv, P, D]`` K/V (or nothing), viewed for ``rows`` rows: ``update``
    returns the prefix followed by the new K/V without storing them, so gradients reach the prefix through it and a
    layer that gradient checkpointing replays in the backward pass sees exactly what its forward saw. ``kv[layer]``
    keeps the first forward's prefix + new K/V (a prefix computed on top of another)."""

    def __init__(self, prefix: list[tuple[torch.Tensor, torch.Tensor]] | None, rows: int = 1):
        super().__init__()
        for i, (k, v) in enumerate(prefix or []):
            super().update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), i)
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx < len(self.layers) and self.layers[layer_idx].is_initialized:
            layer = self.layers[layer_idx]
            key_states = torch.cat([layer.keys, key_states], dim=-2)
            value_states = torch.cat([layer.values, value_states], dim=-2)
        self.kv.setdefault(layer_idx, (key_states, value_states))
        return key_states, value_states

    def layer_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [self.kv[i] for i in sorted(self.kv)]


@contextmanager
def _cache_under_checkpointing(decoder: torch.nn.Module) -> Iterator[None]:
    """Let gradient-checkpointed layers keep a :class:`_PrefixCache` (transformers drops caches there because a
    replay would write a second time; this cache is never written)."""
    layers = [m for m in decoder.modules() if getattr(m, "gradient_checkpointing", False)]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m in layers:
            del m._can_checkpoint_with_cache


def _prefix_forward(
    decoder: torch.nn.Module,
    tokens: list[int],
    start: int,
    base: list[tuple[torch.Tensor, torch.Tensor]] | None,
    device: torch.device,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """K/V per layer of ``base`` followed by ``tokens`` (at positions ``start...``, attending to ``base``), with
    gradient when enabled, gradient checkpointing or not."""
    cache = _PrefixCache(base)
    # packed_gqa: on a CPU in bf16 a fresh prefix's causal attention and its backward run on the bf16 kernels
    with _cache_under_checkpointing(decoder), packed_gqa(decoder):
        decoder(
            input_ids=torch.tensor([tokens], dtype=torch.long, device=device),
            position_ids=torch.arange(start, start + len(tokens), device=device)[None],
            use_cache=True,
            **{cache_argument(decoder): cache},
        )
    record_training(decoder, [(len(tokens), start)], 0)
    return cache.layer_kv()


def _target_window(seqs: list[list[int]], masks: list[list[int]], firsts: list[int]) -> tuple[int, int]:
    """``(first, k)``: the ``[B, K]`` outputs' column c holds the log-prob of token ``first + 1 + c``."""
    t_max = max(len(s) for s in seqs)
    first = min(firsts) - 1 if any(f < len(m) for f, m in zip(firsts, masks, strict=True)) else t_max - 2
    first = max(first, 0)
    return first, t_max - 1 - first


# A group gets its own call on top of the common prefix when that saves at least this many tokens' forward and
# backward ((members - 1) x its own shared prompt): below it, another decoder call costs more than it saves.
MIN_SAVED_TOKENS = 16


def _subtrees(seqs: list[list[int]], masks: list[list[int]], shared: int) -> list[list[int]]:
    """Sequence indices in groups that share more than their first ``shared`` tokens (a GRPO group's task
    prompt), each worth its own call (:data:`MIN_SAVED_TOKENS`); the other sequences together as one more part.
    One part means: nothing to split."""
    # a prompt ends before the position that predicts the sequence's first policy token
    prompts = [
        s[: next((j for j, x in enumerate(m) if x), len(m)) - 1] for s, m in zip(seqs, masks, strict=True)
    ]
    order = sorted(range(len(seqs)), key=lambda i: prompts[i][shared:])
    clusters: list[list[int]] = [[order[0]]]
    common = [len(prompts[order[0]])]  # tokens every member of the cluster shares
    for a, b in zip(order, order[1:], strict=False):
        n = common_prefix_length([prompts[a], prompts[b]])
        if n > shared:  # sorted: a cluster's common prefix is the least over its neighbours
            clusters[-1].append(b)
            common[-1] = min(common[-1], n)
        else:
            clusters.append([b])
            common.append(len(prompts[b]))
    parts: list[list[int]] = []
    rest: list[int] = []
    for cluster, n in zip(clusters, common, strict=True):
        if (len(cluster) - 1) * (n - shared) >= MIN_SAVED_TOKENS:
            parts.append(sorted(cluster))
        else:
            rest += cluster
    return parts + ([sorted(rest)] if rest else [])


def shared_prefix_length(seqs: list[list[int]], masks: list[list[int]]) -> int:
    """Tokens every sequence shares before the position that predicts the earliest policy token of any."""
    if len(seqs) < 2:
        return 0
    firsts = [next((j for j, x in enumerate(m) if x), len(m)) for m in masks]
    return max(0, min(common_prefix_length(seqs), min(firsts) - 1))


@dataclass
class PrefixKV:
    """A shared prefix's keys/values, computed once (with gradient when enabled) for several micro-batches.

    ``keys``/``values`` hold the prefix forward's graph; micro-batches attend to the detached leaves
    (``cache()``), so their backward passes stop there and accumulate into the leaves' ``.grad``;
    :meth:`backward` then sends that sum through the prefix forward once. The gradients equal those of
    recomputing the prefix in every micro-batch (tested), at the cost of one prefix forward and backward.
    """

    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    leaf_keys: list[torch.Tensor]
    leaf_values: list[torch.Tensor]

    @classmethod
    def compute(cls, model: torch.nn.Module, tokens: list[int]) -> PrefixKV | None:
        """The prefix's keys/values, or None where :func:`shared_prefix_logprobs` would not use them (no
        decoder/head split, an empty prefix, gradient checkpointing set up by someone else)."""
        decoder, _ = _decoder_and_head(model)
        if not tokens or decoder is None or not _replays_safely(decoder):
            return None
        kv = _prefix_forward(decoder, list(tokens), 0, None, next(model.parameters()).device)
        keys, values = [k for k, _ in kv], [v for _, v in kv]

        def leaf(t: torch.Tensor) -> torch.Tensor:
            return t.detach().requires_grad_(t.requires_grad)

        return cls(list(tokens), keys, values, [leaf(k) for k in keys], [leaf(v) for v in values])

    @classmethod
    def attached(cls, tokens: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> PrefixKV:
        """K/V still attached to the graph that made them: gradients flow straight through (no
        :meth:`backward` to run)."""
        return cls(list(tokens), [], [], [k for k, _ in kv], [v for _, v in kv])

    def __len__(self) -> int:
        return len(self.tokens)

    def backward(self) -> None:
        """Push the gradients the micro-batches left on the leaves through the prefix forward (once)."""
        pairs = [
            (t, leaf.grad)
            for t, leaf in zip(self.keys + self.values, self.leaf_keys + self.leaf_values, strict=True)
            if t.requires_grad and leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        self.keys = self.values = []  # the graph is spent; free it


def shared_prefix_logprobs(
    model: torch.nn.Module,
    seqs: list[list[int]],
    masks: list[list[int]],
    pad_id: int,
    sampling: SamplingConfig | None = None,
    temperature: float | None = None,
    row_tokens: int | None = None,
    prefix: PrefixKV | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same ``(logp, tmask)`` ``[B, K]`` as :func:`sequence_logprobs` over ``pad_batch(seqs, masks)``,
    computing the shared prefix once and packing the rest (see the module docstring).

    ``row_tokens``: tokens per packed row (default: the longest remainder; larger packs more per row).
    Models without ``get_decoder``/``get_output_embeddings`` take the :func:`sequence_logprobs` path. Gradient
    checkpointing as :func:`trace_train.grpo.trainer.enable_gradient_checkpointing` sets it up keeps this path:
    the prefix's K/V reach the checkpointed layers through a cache that is never written (:class:`_PrefixCache`)
    and a replayed layer runs the attention of its forward; any other checkpointing takes the padded path.
    ``prefix``: keys/values of a prefix every sequence starts with, computed once for several calls
    (:class:`PrefixKV`); the caller runs ``prefix.backward()`` after the calls' backward passes.
    """
    sampling = _sampling(sampling, temperature)
    device = next(model.parameters()).device
    decoder, head = _decoder_and_head(model)
    if decoder is None or not _replays_safely(decoder):
        ids, attn, pmask = pad_batch(seqs, masks, pad_id)
        return _padded_logprobs(model, ids.to(device), attn.to(device), pmask.to(device), sampling)
    if any(len(m) != len(s) for s, m in zip(seqs, masks, strict=True)):
        raise ValueError("every mask must have its sequence's length")
    firsts = [next((j for j, x in enumerate(m) if x), len(m)) for m in masks]
    kv = None  # the shared prefix's keys/values per layer, each [1, Hkv, shared, D]
    shared = 0
    if prefix is not None:
        shared = len(prefix)
        for s, f in zip(seqs, firsts, strict=True):
            if len(s) <= shared or s[:shared] != prefix.tokens or f <= shared:
                raise ValueError(
                    "every sequence must start with the given prefix, continue past it and have no policy "
                    "token predicted inside it"
                )
        kv = list(zip(prefix.leaf_keys, prefix.leaf_values, strict=True))
    # the prefix ends before the position that predicts the earliest policy token of any sequence
    longer = shared_prefix_length(seqs, masks)
    if longer > shared:
        # what these sequences share past the given prefix (a GRPO group's task prompt after the system prompt
        # all groups share), once, attending to that prefix; then both are one prefix
        kv = _prefix_forward(decoder, seqs[0][shared:longer], shared, kv, device)
        shared = longer
    parts = _subtrees(seqs, masks, shared)
    if len(parts) > 1:
        # several groups in one micro-batch, each sharing its own prompt after the common prefix: one call per
        # group on top of that prefix (computed once above), so each prompt is computed once, not per member
        sub = PrefixKV.attached(seqs[0][:shared], kv) if kv else None
        first, k = _target_window(seqs, masks, firsts)
        logp = torch.zeros((len(seqs), k), dtype=torch.float32, device=device)
        tmask = torch.zeros((len(seqs), k), dtype=torch.float32, device=device)
        for part in parts:
            p_seqs, p_masks = [seqs[i] for i in part], [masks[i] for i in part]
            p_logp, p_tmask = shared_prefix_logprobs(
                model, p_seqs, p_masks, pad_id, sampling, row_tokens=row_tokens, prefix=sub
            )
            p_first, p_k = _target_window(p_seqs, p_masks, [firsts[i] for i in part])
            rows = torch.tensor(part, device=device)
            # the part's column c holds token p_first + 1 + c: here that is column p_first - first + c
            if p_tmask.any():
                logp[rows, p_first - first : p_first - first + p_k] = p_logp
                tmask[rows, p_first - first : p_first - first + p_k] = p_tmask
            elif p_logp.requires_grad:  # keep the graph (zero gradients) as the single-call path does
                logp = logp + 0.0 * p_logp.sum()
        return logp, tmask
    rests = [s[shared:] for s in seqs]
    capacity = max(row_tokens or 0, max(len(r) for r in rests))
    rows = _pack([len(r) for r in rests], capacity)
    n_rows = len(rows)
    width = max(sum(len(rests[i]) for i in row) for row in rows)
    dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    ids = torch.full((n_rows, width), pad_id, dtype=torch.long)
    pos = torch.zeros((n_rows, width), dtype=torch.long)
    seg = torch.full((n_rows, width), -1, dtype=torch.long)  # which sequence each column holds (-1: padding)
    where: list[tuple[int, int]] = [(0, 0)] * len(seqs)  # sequence -> (row, first column)
    for r, row in enumerate(rows):
        col = 0
        for i in row:
            n = len(rests[i])
            ids[r, col : col + n] = torch.tensor(rests[i], dtype=torch.long)
            pos[r, col : col + n] = torch.arange(shared, shared + n)
            seg[r, col : col + n] = i
            where[i] = (r, col)
            col += n
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    allowed = same & causal
    allowed |= torch.eye(width, dtype=torch.bool)  # padding attends to itself (no all-masked row, no NaN)
    cache = None
    with packed_gqa(model) as switched:
        if kv is not None and switched:
            # the prefix passed once to the attention (CascadeAttention), never copied per row; the mask
            # covers each row's own columns
            shared_kv = SharedPrefix(kv)
            kwargs = dict(shared_prefix=shared_kv, use_cache=False)
        else:
            shared_kv = None
            if kv is not None:  # every row reads the one prefix row through a cache
                allowed = torch.cat([(seg >= 0)[:, :, None].expand(-1, -1, shared), allowed], dim=2)
                cache = _PrefixCache(kv, rows=n_rows)
            kwargs = {cache_argument(decoder): cache, "use_cache": cache is not None}
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        with _cache_under_checkpointing(decoder):
            hidden = decoder(
                input_ids=ids.to(device),
                attention_mask=mask[:, None].to(device),
                position_ids=pos.to(device),
                **kwargs,
            ).last_hidden_state
        if shared_kv is not None:
            shared_kv.check()
    record_training(decoder, [(len(r), shared) for r in rests], 0)
    # gather the hidden states that predict policy tokens: token t of sequence i is predicted at t - 1
    row_idx, col_idx, seq_idx, tgt_pos, tgt_ids = [], [], [], [], []
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        r, c0 = where[i]
        for t in range(max(1, shared + 1), len(s)):
            if m[t]:
                row_idx.append(r)
                col_idx.append(c0 + t - 1 - shared)
                seq_idx.append(i)
                tgt_pos.append(t)
                tgt_ids.append(s[t])
    first, k = _target_window(seqs, masks, firsts)
    logp = torch.zeros((len(seqs), k), dtype=torch.float32, device=device)
    tmask = torch.zeros((len(seqs), k), dtype=torch.float32, device=device)
    if row_idx:
        picked = hidden[torch.tensor(row_idx, device=device), torch.tensor(col_idx, device=device)]
        record_training(model, [], len(row_idx))
        lp = target_logprobs(head(picked), torch.tensor(tgt_ids, device=device), sampling)
        si = torch.tensor(seq_idx, device=device)
        ci = torch.tensor(tgt_pos, device=device) - 1 - first
        logp = logp.index_put((si, ci), lp)
        tmask[si, ci] = 1.0
    elif torch.is_grad_enabled() and hidden.requires_grad:
        # no policy token left (e.g. all cut by a length cap): still a graph, so backward gives zero gradients
        # (and data-parallel ranks stay in step) instead of failing
        logp = logp + 0.0 * hidden.sum()
    return logp, tmask
