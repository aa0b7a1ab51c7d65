"""A capability env's source pool is scanned once per code version and kept on disk: later processes read it
instead of replaying 1,000 target tasks, and never read a pool that other code (or a torn write) produced."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tests.derived.test_generic_target import TOY, ProtocolLibraryEnv  # noqa: F401 - the protocol toy target
from trace_gym.derived import pool

CAPABILITY = "precondition-checking"
WINDOW = 30


@pytest.fixture
def toy(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACE_CACHE", str(tmp_path))
    before = set(gym.registry)
    gym.register(id=TOY, entry_point="tests.derived.test_generic_target:ProtocolLibraryEnv")
    pool._cached.cache_clear()
    scans = []
    real_scan = pool.scan
    monkeypatch.setattr(pool, "scan", lambda *a: scans.append(a) or real_scan(*a))
    yield scans
    pool._cached.cache_clear()
    for name in set(gym.registry) - before:
        del gym.registry[name]


def fresh_process():
    """What a new process sees: no in-memory pool."""
    pool._cached.cache_clear()


def test_a_second_process_reads_the_pool_instead_of_scanning(toy):
    first = pool.sources(TOY, {}, CAPABILITY, WINDOW)
    assert len(toy) == 1 and first["train"] and first["test"]
    fresh_process()
    assert pool.sources(TOY, {}, CAPABILITY, WINDOW) == first
    assert len(toy) == 1  # read from disk, not scanned


def test_other_code_or_other_kwargs_scan_again(toy, monkeypatch):
    pool.sources(TOY, {}, CAPABILITY, WINDOW)
    fresh_process()
    pool.sources(TOY, {"max_turns": 30}, CAPABILITY, WINDOW)  # another target configuration
    assert len(toy) == 2
    fresh_process()
    monkeypatch.setattr(pool, "code_version", lambda target_id: "another-version")
    pool.sources(TOY, {}, CAPABILITY, WINDOW)
    assert len(toy) == 3


def test_a_torn_or_foreign_cache_file_is_scanned_again(toy):
    first = pool.sources(TOY, {}, CAPABILITY, WINDOW)
    path = pool._pool_file(TOY, (), CAPABILITY, WINDOW)
    for broken in ('{"train": [{"target_seed": 1', '{"train": [{"seed": 1}], "test": []}', "[]"):
        path.write_text(broken)
        fresh_process()
        assert pool.sources(TOY, {}, CAPABILITY, WINDOW) == first
    assert len(toy) == 4


def test_read_mode_never_writes_and_off_mode_always_scans(toy, monkeypatch):
    """synthesis's sandbox refuses file writes: there the pool is read (its parent scanned it), never written."""
    path = pool._pool_file(TOY, (), CAPABILITY, WINDOW)
    monkeypatch.setenv(pool.CACHE_MODE_VAR, "read")
    first = pool.sources(TOY, {}, CAPABILITY, WINDOW)
    assert not path.exists() and len(toy) == 1
    monkeypatch.setenv(pool.CACHE_MODE_VAR, "on")
    fresh_process()
    pool.sources(TOY, {}, CAPABILITY, WINDOW)
    assert path.exists() and len(toy) == 2
    monkeypatch.setenv(pool.CACHE_MODE_VAR, "read")
    fresh_process()
    assert pool.sources(TOY, {}, CAPABILITY, WINDOW) == first and len(toy) == 2
    monkeypatch.setenv(pool.CACHE_MODE_VAR, "off")
    fresh_process()
    pool.sources(TOY, {}, CAPABILITY, WINDOW)
    assert len(toy) == 3
    monkeypatch.setenv(pool.CACHE_MODE_VAR, "sometimes")
    fresh_process()
    with pytest.raises(ValueError, match="TRACE_POOL_CACHE must be one of"):
        pool.sources(TOY, {}, CAPABILITY, WINDOW)


def test_the_code_version_covers_a_target_defined_outside_trace_gym(toy):
    """The toy target lives in tests/: a change there must not reuse a pool scanned by the old toy."""
    assert pool.code_version(TOY) != pool.code_version("trace/retail-v2")
