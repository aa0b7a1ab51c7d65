"""``gym.make_vec`` support for trace envs in both vectorization modes.

``"sync"`` works out of the box: observations come back as a tuple of conversations (Gymnasium batches a
custom space as a ``Tuple``). ``"async"`` defaults to ``shared_memory=True``, which Gymnasium implements with
fixed-size numpy buffers: impossible for conversations, which grow without bound. Rather than fail by
default, this module registers Gymnasium's three shared-memory hooks for :class:`ChatObservationSpace`: the
"shared memory" is a ``multiprocessing`` manager list (one slot per sub-env) that the workers write each
conversation into and the main process reads through a live :class:`SharedConversations` view. That costs one
manager process per vector env; ``vector_kwargs={"shared_memory": False}`` sends observations through the
workers' pipes instead (no manager, usually faster) and is what :func:`make_vec` below picks.

Importing :mod:`trace_gym` registers the hooks, so ``gym.make_vec("trace_gym:trace/<name>-v0", num_envs=8,
vectorization_mode="async")`` just works.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import gymnasium as gym
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from trace_gym.core.spaces import ChatObservationSpace


class SharedConversations(Sequence):
    """Live, read-only view of the conversations the async workers wrote (one per sub-env).

    ``AsyncVectorEnv`` reads shared memory once and hands out (a deep copy of) that view after every step, so
    the view must follow the buffer; a deep copy is a plain tuple of conversations, which is what users get
    with the default ``copy=True``.
    """

    def __init__(self, slots: Any):
        self._slots = slots  # a manager ListProxy; picklable, shared with the workers

    def __len__(self) -> int:
        return len(self._slots)

    def __getitem__(self, index: Any) -> Any:
        return self._slots[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._slots[:])

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[Any, ...]:
        return tuple(copy.deepcopy(self._slots[:], memo))

    def __repr__(self) -> str:
        return f"SharedConversations({len(self)} envs)"


@create_shared_memory.register(ChatObservationSpace)
def _create_conversation_memory(space: ChatObservationSpace, n: int = 1, ctx: ModuleType = mp) -> Any:
    manager = ctx.Manager()
    slots = manager.list([None] * n)
    # The proxy keeps its manager alive in this process (BaseProxy holds ``_manager``); workers reconnect by
    # address when the proxy is unpickled in them.
    return slots


@read_from_shared_memory.register(ChatObservationSpace)
def _read_conversations(space: ChatObservationSpace, shared_memory: Any, n: int = 1) -> SharedConversations:
    return SharedConversations(shared_memory)


@write_to_shared_memory.register(ChatObservationSpace)
def _write_conversation(space: ChatObservationSpace, index: int, value: Any, shared_memory: Any) -> None:
    shared_memory[index] = value


def make_vec(
    env_id: str,
    num_envs: int = 8,
    vectorization_mode: str = "sync",
    vector_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> gym.vector.VectorEnv:
    """``gym.make_vec`` with the faster pipe transport as the async default (``shared_memory=False``).

    Plain ``gym.make_vec`` works too (see the module docstring); this only picks better defaults.
    """
    vector_kwargs = dict(vector_kwargs or {})
    if vectorization_mode == "async":
        vector_kwargs.setdefault("shared_memory", False)
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        vector_kwargs=vector_kwargs,
        **kwargs,
    )
