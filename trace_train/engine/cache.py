"""A batched KV cache over conversations of different lengths, built on transformers' cache classes.

Every conversation owns one row. All rows share physical columns: a turn appends a block of columns to every row
at once (the env's new tokens, right-padded to the longest; then one column per decoded token), and a 2-D
attention mask marks which columns of a row hold real tokens. Rotary positions are per row (``position_ids`` =
the row's own token count), so a hole in a row changes nothing in what its tokens see. Nothing is re-padded when
conversations grow unevenly; rows are dropped (conversation over) or holes squeezed out only by an occasional
:meth:`RaggedCache.compact`, one gather per layer. Within a turn, rows that finished decoding are moved behind the
running ones (:meth:`RaggedCache.permute_rows`, copying only the moved rows) and the decode steps run the first
rows only (:meth:`RaggedCache.set_live_rows`); the others get zeroed holes.

With a shared prefix (:meth:`RaggedCache.start_from_prefix` with ``share=True``) the rows' layers hold only the
columns after the prefix, whose K/V is kept once (:class:`trace_train.engine.attention.SharedPrefix`); the mask,
too, covers only the columns after it, while ``ids`` and positions count the prefix.

Each layer's keys and values live in a preallocated buffer written in place (capacity doubles when full):
``DynamicLayer`` concatenates, which copies the whole cache on every decoded token.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers.cache_utils import Cache, DynamicLayer

from trace_train.engine.attention import SharedPrefix


def cache_argument(module: torch.nn.Module) -> str:
    """The keyword under which ``module.forward`` takes its KV cache: transformers 5.24 renamed
    ``past_key_values`` to ``cache`` (the old name deprecated until 5.40). The package supports releases before
    5.24 too, where an unknown ``cache=`` is swallowed by ``**kwargs`` and the cache silently ignored."""
    return _cache_argument(type(module))


@functools.cache
def _cache_argument(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


class GrowingLayer(DynamicLayer):
    """One layer's K/V in a ``[B, H, capacity, D]`` buffer; ``update`` writes in place and returns views."""

    def __init__(self, capacity: int = 256):
        super().__init__()
        self.capacity = capacity
        self.used = 0
        # (row, rows, column): the next update writes one row of a ``rows``-row batch at ``column`` (a prefill
        # row by row, so no row is padded to the longest); None: updates write every row at ``used``
        self.window: tuple[int, int, int] | None = None
        self.block_end = 0  # the end of the block of columns the rows are writing through windows
        # None: updates run every row; n: a decode step runs rows [0, n) only (the others finished their turn),
        # and the others' new column is a zeroed hole
        self.live_rows: int | None = None

    def open_block(self, rows: int, end: int) -> None:
        """Rows are about to write columns ``used:end`` one at a time: make room and zero them (a column a row
        does not write is a hole, masked; zero, not garbage, because masked weights times NaN are NaN)."""
        self.block_end = end
        if not self.is_initialized:
            return  # allocated (zeroed) by the first window's update
        if end > self.capacity:
            self._grow(end)
        self.keys[:, :, self.used : end] = 0
        self.values[:, :, self.used : end] = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        b, h, _, d = key_states.shape
        if self.window is not None:  # a block written row by row: room for all of it, holes zero
            b, self.capacity = self.window[1], max(self.capacity, self.block_end)
            self.keys = key_states.new_zeros((b, h, self.capacity, d))
            self.values = value_states.new_zeros(
                (b, value_states.shape[1], self.capacity, value_states.shape[3])
            )
        else:
            self.keys = key_states.new_empty((b, h, self.capacity, d))
            self.values = value_states.new_empty(
                (b, value_states.shape[1], self.capacity, value_states.shape[3])
            )
        self.used = 0
        self.is_initialized = True

    def _grow(self, need: int) -> None:
        cap = max(
            need, self.capacity + max(self.capacity // 2, 64)
        )  # 1.5x: old and new coexist while copying
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:2], cap, old.shape[3]))
            new[:, :, : self.used] = old[:, :, : self.used]
            setattr(self, name, new)
        self.capacity = cap

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.window is not None:
            row, _, col = self.window
            if col + n > self.capacity:
                raise RuntimeError(f"a window write to columns {col}:{col + n} outside the open block")
            self.keys[row : row + 1, :, col : col + n] = key_states
            self.values[row : row + 1, :, col : col + n] = value_states
            return self.keys[row : row + 1, :, : col + n], self.values[row : row + 1, :, : col + n]
        if self.used + n > self.capacity:
            self._grow(self.used + n)
        live = self.keys.shape[0] if self.live_rows is None else self.live_rows
        self.keys[:live, :, self.used : self.used + n] = key_states
        self.values[:live, :, self.used : self.used + n] = value_states
        if live < self.keys.shape[0]:
            self.keys[live:, :, self.used : self.used + n] = 0
            self.values[live:, :, self.used : self.used + n] = 0
        self.used += n
        return self.keys[:live, :, : self.used], self.values[:live, :, : self.used]

    def get_seq_length(self) -> int:
        if self.window is not None:  # what the row attends to before the tokens being written
            return self.window[2]
        return self.used if self.is_initialized else 0

    def load(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        """Start from given K/V ``[B, H, T, D]`` (copied into a fresh buffer of ``capacity`` columns)."""
        self.capacity = max(capacity, keys.shape[2])
        self.lazy_initialization(keys, values)
        self.keys[:, :, : keys.shape[2]] = keys
        self.values[:, :, : values.shape[2]] = values
        self.used = keys.shape[2]

    def add_rows(self, n: int) -> None:
        """``n`` more rows (their columns are holes until written)."""
        for name in ("keys", "values"):
            buf = getattr(self, name)
            setattr(self, name, torch.cat([buf, buf.new_zeros((n, *buf.shape[1:]))], dim=0))

    def permute_rows(self, source: torch.Tensor, moved: torch.Tensor) -> None:
        """Row ``moved[i]`` takes what row ``source[i]`` holds (a permutation restricted to the rows it moves)."""
        if not self.is_initialized:
            return
        for buf in (self.keys, self.values):
            buf[moved, :, : self.used] = buf[source, :, : self.used]  # the right side is a copy: safe

    def select_rows(self, rows: torch.Tensor) -> None:
        """Row ``r`` becomes a copy of row ``rows[r]`` (rows may repeat)."""
        if self.is_initialized:
            self.keys, self.values = self.keys[rows], self.values[rows]

    def gather(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        """Keep ``rows`` and, for each, the columns ``cols[r]`` (``[R, T']`` indices), in a fresh buffer."""
        idx = cols[:, None, :, None]
        for name in ("keys", "values"):
            buf = getattr(self, name)[rows, :, : self.used]
            picked = buf.gather(2, idx.expand(-1, buf.shape[1], -1, buf.shape[3]))
            new = buf.new_empty((picked.shape[0], picked.shape[1], max(self.capacity, 1), picked.shape[3]))
            new[:, :, : picked.shape[2]] = picked
            setattr(self, name, new)
        self.used = cols.shape[1]


class RaggedCache:
    """The cache of a batch of conversations: K/V (one :class:`GrowingLayer` per decoder layer), the mask of real
    columns per row, each row's cached token ids and its next rotary position."""

    def __init__(self, num_layers: int, capacity: int):
        self.layers = [GrowingLayer(capacity) for _ in range(num_layers)]
        self.cache = Cache(layers=self.layers)
        self.mask = torch.zeros((0, 0), dtype=torch.bool)
        self.ids: list[list[int]] = []  # the tokens each row's cache holds, in order (prefix included)
        self.prefix: SharedPrefix | None = None  # K/V of the prefix all rows share, kept once
        self.prefix_ids: list[int] = []  # its tokens
        self.copied_prefix = False  # the prefix is copied into every row instead (no row can join later)

    @property
    def rows(self) -> int:
        return len(self.ids)

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    def positions(self) -> torch.Tensor:
        return torch.tensor([len(x) for x in self.ids], dtype=torch.long)

    def start_from_prefix(
        self,
        prefix_kv: list[tuple[torch.Tensor, torch.Tensor]],
        prefix_ids: list[int],
        rows: int,
        capacity: int,
        share: bool = False,
    ) -> None:
        """Every row starts with the same prefix (K/V of one row, computed once). ``share``: keep it once and let
        the rows' layers hold only what follows (the model must be called with ``shared_prefix=self.prefix``);
        else copy it into every row."""
        if len(prefix_kv) != len(self.layers):
            raise ValueError(f"prefix K/V for {len(prefix_kv)} layers, the cache has {len(self.layers)}")
        self.ids = [list(prefix_ids) for _ in range(rows)]
        if share:
            self.prefix = SharedPrefix(prefix_kv)
            self.prefix_ids = list(prefix_ids)
            self.mask = torch.zeros((rows, 0), dtype=torch.bool)
            return
        self.copied_prefix = bool(prefix_ids)
        for layer, (k, v) in zip(self.layers, prefix_kv, strict=True):
            layer.load(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), capacity)
        self.mask = torch.ones((rows, len(prefix_ids)), dtype=torch.bool)

    def open_block(self, width: int) -> None:
        """The next ``width`` columns will be written one row at a time (:meth:`open_window`)."""
        for layer in self.layers:
            layer.open_block(self.rows, self.width + width)

    def open_window(self, row: int, column: int) -> None:
        """Until :meth:`close_block`, the model's forward reads and writes row ``row`` alone, its new tokens at
        ``column`` (its cache holding the columns before it)."""
        for layer in self.layers:
            layer.window = (row, self.rows, column)

    def close_block(self) -> None:
        """Every row now holds the block's columns (those a row did not write are holes in its mask)."""
        for layer in self.layers:
            layer.window = None
            if layer.is_initialized:
                layer.used = layer.block_end

    def append_columns(self, real: torch.Tensor) -> torch.Tensor:
        """Extend the mask by ``real`` ``[B, W]`` (True = a real token); returns the full 2-D attention mask."""
        self.mask = torch.cat([self.mask, real.to(torch.bool)], dim=1)
        return self.mask

    def removable_fraction(self) -> float:
        """The share of columns :meth:`compact` would remove (rows of uneven length keep left padding)."""
        if not self.mask.numel():
            return 0.0
        return 1.0 - float(self.mask.sum(1).max()) / self.width

    def permute_rows(self, order: list[int]) -> None:
        """Row ``r`` becomes what row ``order[r]`` was (``order`` a permutation); only moved rows are copied."""
        if sorted(order) != list(range(self.rows)):
            raise ValueError(f"not a permutation of the cache's {self.rows} rows: {order}")
        moved = [r for r, o in enumerate(order) if o != r]
        if not moved:
            return
        source = torch.tensor([order[r] for r in moved], dtype=torch.long)
        dest = torch.tensor(moved, dtype=torch.long)
        self.mask[dest] = self.mask[source]
        self.ids = [self.ids[o] for o in order]
        for layer in self.layers:
            device = layer.keys.device if layer.is_initialized else "cpu"
            layer.permute_rows(source.to(device), dest.to(device))

    def repeat_rows(self, source: list[int]) -> None:
        """Row ``r`` becomes a copy of row ``source[r]`` (rows may repeat: conversations with the same prompt,
        prefilled once, each get their own row to continue it)."""
        index = torch.tensor(source, dtype=torch.long)
        self.mask = self.mask[index]
        self.ids = [list(self.ids[i]) for i in source]
        for layer in self.layers:
            layer.select_rows(index.to(layer.keys.device) if layer.is_initialized else index)

    def set_live_rows(self, n: int | None) -> None:
        """Forward passes run rows ``[0, n)`` only (None: all rows); see :attr:`GrowingLayer.live_rows`."""
        for layer in self.layers:
            layer.live_rows = n

    def add_rows(self, n: int) -> None:
        """Append ``n`` rows holding only the shared prefix (or nothing): holes in every existing column.
        Only for caches whose prefix is shared (or empty): a row's own columns are all it holds."""
        if self.copied_prefix:
            raise ValueError("rows cannot join a cache whose prefix is copied into every row")
        self.ids += [list(self.prefix_ids) for _ in range(n)]
        self.mask = torch.cat([self.mask, torch.zeros((n, self.width), dtype=torch.bool)], dim=0)
        for layer in self.layers:
            if layer.is_initialized:
                layer.add_rows(n)

    def compact(self, keep_rows: list[int]) -> None:
        """Keep ``keep_rows`` (in that order) and squeeze out holes: each row's real columns, right-aligned
        after left padding to the longest row (one gather per layer)."""
        rows = torch.tensor(keep_rows, dtype=torch.long)
        mask = self.mask[rows]
        counts = mask.sum(1)
        width = int(counts.max()) if len(keep_rows) else 0
        cols = torch.zeros((len(keep_rows), width), dtype=torch.long)
        new_mask = torch.zeros((len(keep_rows), width), dtype=torch.bool)
        for r in range(len(keep_rows)):
            real = mask[r].nonzero().squeeze(1)
            cols[r, width - len(real) :] = real
            new_mask[r, width - len(real) :] = True
        device = self.layers[0].keys.device if self.layers and self.layers[0].is_initialized else "cpu"
        for layer in self.layers:
            if layer.is_initialized:
                layer.gather(rows.to(device), cols.to(device))
        self.mask = new_mask
        self.ids = [self.ids[r] for r in keep_rows]
