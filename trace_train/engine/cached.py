"""The cached rollout engine: a KV cache per conversation across turns and a shared system/tools prefix.

``CachedEngine.session(sampling)`` returns a rollout generator (the ``Generator`` of
:func:`trace_train.rollout.collect`): called once per turn with every unfinished conversation's full token ids,
it prefills only what its cache does not hold yet (the previous turn's last generated token, the env's reply,
the next generation prompt), then decodes all conversations together, one token per row per step; rows whose
turn is over leave the decode steps (a turn lasts as long as its longest answer, and on retail most rows finish
far earlier: decode 1.65x faster on a 32-row stream of the demo's agent).

- Shared prefix: at the first turn, the longest common prefix of all prompts (the system prompt and tool
  schemas: ~2,600 SmolLM2 tokens on retail) is prefilled once as a single row. On CPU with sdpa attention the
  rows then hold only what follows it and attend to it through the ``shared_prefix`` attention
  (:mod:`trace_train.engine.attention`); elsewhere it is copied into every row. The engine keeps it, and the
  next session reuses the part it shares, while the trainable weights are unchanged (their in-place versions
  are the fingerprint: an optimiser step invalidates it).
- Ragged batch: see :class:`trace_train.engine.cache.RaggedCache` (no re-padding per turn; finished
  conversations leave the batch; holes are squeezed out when compaction would remove more than
  ``max_hole_fraction`` of the columns; conversations may join a running batch, see ``Session.can_join``).
- Decode steps of a Llama model run from its weights (:mod:`trace_train.engine.lean_decode`: fused projections,
  small kernels for norms, rotary and SiLU) wherever that computes what the model's forward does; otherwise, and
  for every prefill, the model is called.
- Sampling: :func:`trace_train.engine.sampling.next_tokens`, transformers' own warpers, so the distribution is
  the simple engine's; greedy picks the same tokens (tested in float32).

The model is any transformers causal LM (or a PeftModel, or a module that behaves like one: ``forward`` with
``input_ids``, ``attention_mask``, ``position_ids``, ``cache``, ``use_cache``). Where it exposes
``get_decoder``/``get_output_embeddings``, the LM head runs only on the positions whose next token is needed.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from trace_train.engine.attention import packed_gqa
from trace_train.engine.cache import RaggedCache, cache_argument
from trace_train.engine.lean_decode import LeanDecoder
from trace_train.engine.linears import DecodeLinears
from trace_train.engine.sampling import next_tokens
from trace_train.policies.base import SamplingConfig
from trace_train.roofline import LEDGER, record_blocks

LEAN_SWITCH = "TRACE_LEAN_DECODE"  # "0": decode steps through the model's forward


@dataclass
class EngineStats:
    prefill_tokens: int = 0  # tokens pushed through the model to fill caches (shared prefix included once)
    prefix_tokens_reused: int = 0  # prompt tokens served from the kept shared prefix instead of a prefill
    decode_tokens: int = 0  # row-steps of decoding (real tokens; holes excluded)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    compactions: int = 0
    joins: int = 0  # conversations that joined a running batch (continuous batching)
    row_shrinks: int = 0  # decode steps that dropped finished rows (see ``Session._decode``)
    prompts_deduplicated: int = 0  # first prompts prefilled once for several conversations (a GRPO group)


def common_prefix_length(seqs: list[list[int]]) -> int:
    """Length of the longest prefix that every token sequence shares."""
    n = min(len(s) for s in seqs)
    first = seqs[0]
    for j in range(n):
        t = first[j]
        if any(s[j] != t for s in seqs):
            return j
    return n


def _fingerprint(model: torch.nn.Module) -> tuple:
    """Changes whenever a trainable weight is modified in place (``Tensor._version``), e.g. by an optimiser."""
    return (id(model), tuple((id(p), p._version) for p in model.parameters() if p.requires_grad))


class ModelRunner:
    """Calls the model on a cache; the LM head only at the positions asked for when the model allows it."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.calls = 0  # model calls so far (the roofline account reads the weights once per call)
        get_decoder = getattr(model, "get_decoder", None)
        get_head = getattr(model, "get_output_embeddings", None)
        self.decoder = get_decoder() if callable(get_decoder) else None
        self.head = get_head() if callable(get_head) else None
        if self.decoder is None or self.head is None or self.decoder is model:
            self.decoder = self.head = None

    def __call__(
        self, ids, attention_mask, position_ids, cache: RaggedCache, pick: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Run ``ids`` ``[B, W]``; return the logits ``[B, V]`` at column ``pick[b]`` of each row (None: none)."""
        called = self.decoder if self.decoder is not None else self.model
        self.calls += 1
        kw = {"attention_mask": attention_mask, "position_ids": position_ids, "use_cache": True}
        kw[cache_argument(called)] = cache.cache
        if cache.prefix is not None:
            kw["shared_prefix"] = cache.prefix
        try:
            return self._forward(ids, kw, pick)
        finally:
            if cache.prefix is not None:
                cache.prefix.check()

    def _forward(self, ids, kw, pick):
        if self.decoder is not None:
            hidden = self.decoder(input_ids=ids, **kw).last_hidden_state
            if pick is None:
                return None
            rows = torch.arange(ids.shape[0], device=hidden.device)
            return self.head(hidden[rows, pick.to(hidden.device)])
        logits = self.model(input_ids=ids, **kw).logits
        if pick is None:
            return None
        return logits[torch.arange(ids.shape[0], device=logits.device), pick.to(logits.device)]


class CachedEngine:
    """Keeps the shared prefix between sessions; see the module docstring."""

    def __init__(
        self,
        model: torch.nn.Module,
        eos_ids: set[int],
        pad_id: int,
        generation_context=None,
        prefill_chunk_tokens: int = 4096,
        max_hole_fraction: float = 0.5,
        share_prefix: bool = True,
        max_prefill_padding: float = 0.25,
        min_idle_fraction: float = 0.25,
        decode_linears: bool | None = None,
        lean_decode: bool | None = None,
    ):
        self.model = model
        # decode steps' bf16 matmuls on the kernel that suits their few rows (None: wherever torch can)
        self.linears = DecodeLinears(model, enabled=decode_linears)
        self.eos_ids = set(eos_ids)
        self.pad_id = pad_id
        self.generation_context = generation_context
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.max_hole_fraction = max_hole_fraction
        self.max_prefill_padding = (
            max_prefill_padding  # above this padding share, a turn's prefill goes row by row
        )
        # a decode step drops finished rows once they are this share of those it runs (1.01: never)
        self.min_idle_fraction = min_idle_fraction
        self.share_prefix = share_prefix  # keep the shared prefix once per batch, not once per row (CPU sdpa)
        # decode steps from the weights, not through the model's modules, where that computes the same
        # (None: unless TRACE_LEAN_DECODE=0; see trace_train.engine.lean_decode)
        self.lean_decode = os.environ.get(LEAN_SWITCH, "1") != "0" if lean_decode is None else lean_decode
        self._lean: LeanDecoder | None = None
        self.stats = EngineStats()
        self._prefix_ids: list[int] = []
        self._prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._prefix_key: tuple | None = None

    def clear(self) -> None:
        """Forget the kept prefix (call after changing frozen weights in place)."""
        self._prefix_ids, self._prefix_kv, self._prefix_key = [], [], None

    def lean_decoder(self) -> LeanDecoder | None:
        """The lean decode step for the model as it is now (None: decode through the model's forward)."""
        if not self.lean_decode:
            return None
        lean = LeanDecoder.for_model(self.model, self.linears, self._lean)
        if lean is not None:  # kept while the model is not eligible (a context that enables LoRA), with its
            self._lean = lean  # fused weights
        return lean

    def session(
        self,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        prefix_cap: int | None = None,
    ) -> Session:
        """A rollout session. ``prefix_cap``: keep at most this many leading tokens as the shared prefix (a
        continuously batched rollout caps it at the system/tools segment, so later conversations can join)."""
        return Session(self, sampling, generator, prefix_cap)

    @property
    def num_layers(self) -> int:
        config = getattr(self.model, "config", None)
        n = getattr(config, "num_hidden_layers", None)
        if n is None:
            raise ValueError("the cached engine needs model.config.num_hidden_layers")
        return int(n)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ----- the shared prefix ----------------------------------------------------------------------------------
    def prefix_kv(self, runner: ModelRunner, prefix: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """K/V ``[1, H, len(prefix), D]`` per layer, reusing the kept prefix as far as it matches."""
        key = _fingerprint(self.model)
        if key != self._prefix_key:
            self.clear()
        keep = common_prefix_length([self._prefix_ids, prefix]) if self._prefix_ids else 0
        cache = RaggedCache(self.num_layers, capacity=max(len(prefix), 1))
        if keep:
            kept = [(k[:, :, :keep], v[:, :, :keep]) for k, v in self._prefix_kv]
            cache.start_from_prefix(kept, prefix[:keep], 1, len(prefix))
            self.stats.prefix_tokens_reused += keep
        else:
            cache.mask = torch.zeros((1, 0), dtype=torch.bool)
            cache.ids = [[]]
        if len(prefix) > keep:
            t0 = time.perf_counter()
            _prefill(
                runner, cache, [prefix[keep:]], self.pad_id, self.prefill_chunk_tokens, want_logits=False
            )
            self.stats.prefill_tokens += len(prefix) - keep
            dt = time.perf_counter() - t0
            self.stats.prefill_seconds += dt
            LEDGER.add_seconds("prefill", dt)
        kv = [(layer.keys[:, :, : layer.used], layer.values[:, :, : layer.used]) for layer in cache.layers]
        if len(prefix) >= len(self._prefix_ids) or keep < len(self._prefix_ids):
            self._prefix_ids, self._prefix_kv, self._prefix_key = list(prefix), kv, key
        return kv


def _prefill(
    runner: ModelRunner,
    cache: RaggedCache,
    deltas: list[list[int]],
    pad_id: int,
    chunk_tokens: int,
    want_logits: bool = True,
    max_padding: float = 0.25,
) -> torch.Tensor | None:
    """Append each row's ``deltas[r]`` and return the logits after each row's last real token.

    The rows' new tokens share one block of columns (as wide as the longest; a shorter row's rest are holes).
    When padding every row to the longest would waste more than ``max_padding`` of the computation (an env
    reply of 600 tokens next to replies of 30), each row runs alone (:meth:`RaggedCache.open_window`); else all
    rows run together, right-padded. Long blocks go in column chunks so no forward sees more than
    ``chunk_tokens`` query tokens."""
    rows = cache.rows
    lengths = [len(d) for d in deltas]
    if min(lengths) == 0:
        raise ValueError("the cached engine got a prompt that adds no token to its conversation")
    width = max(lengths)
    device = next(runner.model.parameters()).device
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    real = torch.zeros((rows, width), dtype=torch.bool)
    for r, d in enumerate(deltas):
        ids[r, : len(d)] = torch.tensor(d, dtype=torch.long)
        real[r, : len(d)] = True
    start = cache.positions()
    calls = runner.calls
    if rows > 1 and 1.0 - sum(lengths) / (rows * width) > max_padding:
        logits = _prefill_rows(runner, cache, ids, real, lengths, start, chunk_tokens, want_logits, device)
    else:
        logits = _prefill_padded(runner, cache, ids, real, lengths, start, chunk_tokens, want_logits, device)
    record_blocks(
        "prefill",
        runner.model,
        list(zip(lengths, start.tolist(), strict=True)),
        logits=rows if want_logits else 0,
        calls=runner.calls - calls,
        shared_context=len(cache.prefix_ids) if cache.prefix is not None else 0,
    )
    for r, d in enumerate(deltas):
        cache.ids[r] += d
    return logits


def _prefill_padded(runner, cache, ids, real, lengths, start, chunk_tokens, want_logits, device):
    rows, width = ids.shape
    lengths = torch.tensor(lengths)
    step = max(1, chunk_tokens // max(rows, 1))
    logits = None
    for c0 in range(0, width, step):
        c1 = min(width, c0 + step)
        mask = cache.append_columns(real[:, c0:c1])
        pos = start[:, None] + torch.arange(c0, c1)[None, :]
        last = lengths - 1
        in_chunk = (last >= c0) & (last < c1)
        pick = (last - c0).clamp(0, c1 - c0 - 1) if want_logits and bool(in_chunk.any()) else None
        # no hole anywhere (e.g. the shared prefix): no mask, so attention can take its causal kernel (2x on CPU)
        attn = None if bool(mask.all()) else mask.to(device)
        out = runner(ids[:, c0:c1].to(device), attn, pos.to(device), cache, pick)
        if out is not None:
            logits = out if logits is None else torch.where(in_chunk.to(out.device)[:, None], out, logits)
    return logits


def _prefill_rows(runner, cache, ids, real, lengths, start, chunk_tokens, want_logits, device):
    first = cache.width
    cache.open_block(ids.shape[1])
    mask = cache.append_columns(real)
    picked = []
    try:
        for r, n in enumerate(lengths):
            out = None
            for c0 in range(0, n, chunk_tokens):
                c1 = min(n, c0 + chunk_tokens)
                cache.open_window(r, first + c0)
                row_mask = mask[r : r + 1, : first + c1]
                attn = None if bool(row_mask.all()) else row_mask.to(device)
                pos = (start[r] + torch.arange(c0, c1))[None, :]
                pick = torch.tensor([c1 - c0 - 1]) if want_logits and c1 == n else None
                out = runner(ids[r : r + 1, c0:c1].to(device), attn, pos.to(device), cache, pick)
            picked.append(out)
    finally:
        cache.close_block()
    return torch.cat(picked) if want_logits else None


class Session:
    """One rollout: a :class:`RaggedCache` over its conversations, alive for the rollout's turns."""

    def __init__(
        self,
        engine: CachedEngine,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        prefix_cap: int | None = None,
    ):
        self.engine = engine
        self.prefix_cap = prefix_cap
        self.sampling = sampling
        self.generator = generator
        self.runner = ModelRunner(engine.model)
        self.cache: RaggedCache | None = None
        self.row_of: dict[int, int] = {}  # conversation index -> row
        # the last turn's decode steps: the rows each ran (see _decode)
        self.decode_rows: list[list[int]] = []
        self.lean: LeanDecoder | None = None  # this turn's lean decode step (None: the model's forward)

    def __call__(self, prompts: list[list[int]], active: list[int], turn: int):
        if not prompts:
            return [], []
        model = self.engine.model
        was_training = model.training
        model.eval()
        try:
            ctx = self.engine.generation_context() if self.engine.generation_context else _null()
            with ctx, torch.no_grad(), packed_gqa(model) as packed:
                # the lean step calls the engine's attention function: only where the model does too
                self.lean = self.engine.lean_decoder() if packed else None
                return self._turn(prompts, active, share_prefix=packed)
        finally:
            model.train(was_training)

    def can_join(self, prompt: list[int]) -> bool:
        """Whether a new conversation with this first prompt can join the running batch: its rows hold only
        their own columns, so it must start with the kept shared prefix (and add something to it)."""
        cache = self.cache
        if cache is None:
            return True
        if cache.copied_prefix:
            return False
        n = len(cache.prefix_ids)
        return len(prompt) > n and prompt[:n] == cache.prefix_ids

    def _turn(self, prompts: list[list[int]], active: list[int], share_prefix: bool):
        eng, st = self.engine, self.engine.stats
        source = None  # at the start: the first row of each distinct prompt, for each conversation
        if self.cache is None:
            first_row: dict[tuple[int, ...], int] = {}
            source = [first_row.setdefault(tuple(p), len(first_row)) for p in prompts]
            distinct = list({tuple(p): p for p in prompts}.values())
            if len(distinct) == len(prompts):
                source = None
            else:  # a GRPO group's rollouts share their prompt: prefill it once, then a row for each
                prompts = distinct
            self._start(prompts, active if source is None else list(range(len(prompts))), share_prefix)
        else:
            self._follow(active, prompts)
        cache = self.cache
        deltas = []
        for row, prompt in enumerate(prompts):
            held = cache.ids[row]
            if prompt[: len(held)] != held:
                raise ValueError(
                    f"conversation {active[row]}: the prompt does not extend the cached tokens (rollout ids "
                    "must grow by appending only)"
                )
            deltas.append(prompt[len(held) :])
        t0 = time.perf_counter()
        logits = _prefill(
            self.runner,
            cache,
            deltas,
            eng.pad_id,
            eng.prefill_chunk_tokens,
            max_padding=eng.max_prefill_padding,
        )
        st.prefill_tokens += sum(len(d) for d in deltas)
        if source is not None:
            cache.repeat_rows(source)
            logits = logits[torch.tensor(source, device=logits.device)]
            self.row_of = {conv: r for r, conv in enumerate(active)}
            st.prompts_deduplicated += len(source) - len(prompts)
        dt = time.perf_counter() - t0
        st.prefill_seconds += dt
        LEDGER.add_seconds("prefill", dt)
        t0 = time.perf_counter()
        out = self._decode(logits)
        dt = time.perf_counter() - t0
        st.decode_seconds += dt
        LEDGER.add_seconds("decode", dt)
        return out

    def _start(self, prompts: list[list[int]], active: list[int], share_prefix: bool) -> None:
        eng = self.engine
        # the shared part, but at least one token of each prompt stays per row (its logits start decoding)
        n = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        if self.prefix_cap is not None:
            n = min(n, self.prefix_cap)
        prefix = prompts[0][: max(n, 0)]
        # rows keep the prefix once (shared_prefix attention) where the model runs it; else a copy per row
        share = share_prefix and eng.share_prefix
        cache = RaggedCache(eng.num_layers, capacity=512 if share else len(prefix) + 512)
        if prefix:
            kv = eng.prefix_kv(self.runner, prefix)
            cache.start_from_prefix(kv, prefix, len(prompts), len(prefix) + 512, share=share)
        else:
            cache.mask = torch.zeros((len(prompts), 0), dtype=torch.bool)
            cache.ids = [[] for _ in prompts]
        self.cache = cache
        self.row_of = {conv: r for r, conv in enumerate(active)}

    def _follow(self, active: list[int], prompts: list[list[int]]) -> None:
        """Drop the rows of finished conversations; squeeze holes when compaction would remove enough of the
        cache; add rows for conversations that join (continuous batching: they follow the running ones)."""
        cache = self.cache
        old = [conv for conv in active if conv in self.row_of]
        new = [k for k, conv in enumerate(active) if conv not in self.row_of]
        if active[: len(old)] != old:
            raise ValueError("conversations that join a session must follow the running ones in `active`")
        for k in new:
            if not self.can_join(prompts[k]):
                raise ValueError(
                    f"conversation {active[k]} cannot join this session: its prompt does not start with the "
                    "kept shared prefix (or the prefix is copied into every row); start a new session"
                )
        keep = [self.row_of[conv] for conv in old]
        if keep != list(range(cache.rows)) or cache.removable_fraction() > self.engine.max_hole_fraction:
            cache.compact(keep)
            self.engine.stats.compactions += 1
        if new:
            cache.add_rows(len(new))
            self.engine.stats.joins += len(new)
        self.row_of = {conv: r for r, conv in enumerate(active)}

    def _decode(self, logits: torch.Tensor) -> tuple[list[list[int]], list[list[float]]]:
        """Sample every row's turn. A row that has finished (its last token fed) leaves the decode steps: when
        enough rows have, the cache's rows are permuted so the running ones come first and the steps run only
        those (a turn lasts as long as its longest answer; most rows finish far earlier). The rows are put back
        in order at the end. ``self.decode_rows[j]`` lists the rows decode step ``j`` ran, in its row order."""
        eng, cache = self.engine, self.cache
        rows = cache.rows
        out: list[list[int]] = [[] for _ in range(rows)]
        lps: list[list[float]] = [[] for _ in range(rows)]
        order = list(range(rows))  # cache row p holds conversation row order[p]
        done = [False] * rows  # per cache row: its turn is over
        fed = [True] * rows  # per cache row: its latest token is in the cache
        self.decode_rows = []
        device = logits.device
        try:
            # the lean step routes its own linears; the model's forward needs its modules routed
            with nullcontext() if self.lean is not None else eng.linears.active():
                self._steps(logits, out, lps, order, done, fed, device)
        finally:
            cache.set_live_rows(None)
            if order != list(range(rows)):  # conversation row r back in cache row r
                where = {o: p for p, o in enumerate(order)}
                cache.permute_rows([where[r] for r in range(rows)])
        return out, lps

    def _steps(self, logits, out, lps, order, done, fed, device) -> None:
        """The decode steps of :meth:`_decode` (which owns the lists they fill and permute)."""
        eng, s, cache = self.engine, self.sampling, self.cache
        rows, live = cache.rows, cache.rows  # decode steps run cache rows [0, live)
        eos = sorted(eng.eos_ids)
        for step in range(s.max_new_tokens):
            suppress = eos if step < s.min_new_tokens else None
            # one draw per conversation row whether or not it still runs: the random stream, hence what is
            # sampled, does not depend on when rows leave the decode steps
            u = None
            if not s.greedy:
                u = torch.rand((rows, 1), generator=self.generator, dtype=torch.float64, device=device)
                u = u[torch.tensor(order[:live], device=device)]
            tok, lp = next_tokens(logits, s, self.generator, suppress, uniforms=u)
            tok, lp = tok.tolist(), lp.tolist()
            for p in range(live):
                if not done[p]:
                    r = order[p]
                    out[r].append(tok[p])
                    lps[r].append(float(lp[p]))
                    fed[p] = False
                    done[p] = tok[p] in eng.eos_ids or len(out[r]) >= s.max_new_tokens
            if all(done):
                break
            idle = sum(done[p] and fed[p] for p in range(live))
            if idle and idle >= live * self.engine.min_idle_fraction:
                live = self._shrink(order, done, fed, live)
            # feed each running row's newest token; a row that finished and fed its last gets a masked hole
            feed = [not f for f in fed[:live]]
            ids = torch.tensor([out[order[p]][-1] if feed[p] else eng.pad_id for p in range(live)])
            mask = cache.append_columns(torch.tensor(feed + [False] * (rows - live))[:, None])
            pos = cache.positions()[:live, None]
            zero = torch.zeros(live, dtype=torch.long)
            cache.set_live_rows(live if live < rows else None)
            if self.lean is not None:
                self.runner.calls += 1
                logits = self.lean(ids.to(device), mask[:live].to(device), pos[:, 0].to(device), cache)
            else:
                logits = self.runner(
                    ids[:, None].to(device), mask[:live].to(device), pos.to(device), cache, zero
                )
            self.decode_rows.append(order[:live])
            record_blocks(
                "decode",
                self.runner.model,
                [(1, int(pos[p])) for p in range(live) if feed[p]],
                logits=live,
                calls=1,
                shared_context=len(cache.prefix_ids) if cache.prefix is not None else 0,
            )
            for p in range(live):
                if feed[p]:
                    cache.ids[p].append(out[order[p]][-1])
                    fed[p] = True
            eng.stats.decode_tokens += sum(feed)

    def _shrink(self, order: list[int], done: list[bool], fed: list[bool], live: int) -> int:
        """Move the rows still running to the front of ``[0, live)`` (swapping each with an idle row there);
        returns the new number of running rows. ``order``, ``done``, ``fed`` are permuted alongside."""
        running = [p for p in range(live) if not (done[p] and fed[p])]
        n = len(running)
        late = [p for p in running if p >= n]  # running rows past the new end
        holes = [p for p in range(n) if done[p] and fed[p]]  # idle rows before it
        swap = list(range(self.cache.rows))
        for a, b in zip(late, holes, strict=True):
            swap[a], swap[b] = b, a
            for lst in (order, done, fed):
                lst[a], lst[b] = lst[b], lst[a]
        self.cache.permute_rows(swap)
        self.engine.stats.row_shrinks += 1
        return n


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False
