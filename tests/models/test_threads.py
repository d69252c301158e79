"""One thread inside the block for torch and every BLAS / OpenMP pool, restored after it."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from threadpoolctl import threadpool_info

from fedvote.models import threads


def _pool_threads(api: str | None = None) -> list[int]:
    return [int(library["num_threads"]) for library in threadpool_info() if api in (None, library["user_api"])]


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_single_threaded_limits_torch_and_the_pools_then_restores_them(two_threads):
    pools_before = _pool_threads()
    with threads.single_threaded():
        assert torch.get_num_threads() == 1
        assert _pool_threads() and set(_pool_threads()) == {1}
    assert torch.get_num_threads() == 2
    assert _pool_threads() == pools_before


def test_without_blas_only_torch_is_limited(two_threads):
    blas_before = _pool_threads("blas")
    with threads.single_threaded(blas=False):
        assert torch.get_num_threads() == 1
        assert blas_before and _pool_threads("blas") == blas_before


def test_the_thread_counts_come_back_after_an_error(two_threads):
    pools_before = _pool_threads()
    with pytest.raises(RuntimeError), threads.single_threaded():
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2
    assert _pool_threads() == pools_before


@pytest.fixture
def lookups(monkeypatch):
    """Each time threads looks for the libraries, from a fresh start: the list grows by one."""
    built = []

    class CountingController(threads.ThreadpoolController):
        def __init__(self) -> None:
            built.append(1)
            super().__init__()

    monkeypatch.setattr(threads, "ThreadpoolController", CountingController)
    monkeypatch.setattr(threads, "_controller", None)
    return built


def test_the_libraries_are_found_once_per_process(lookups):
    for _ in range(3):
        with threads.single_threaded_blas():
            assert set(_pool_threads()) == {1}
    assert len(lookups) == 1


def test_the_libraries_are_found_again_after_an_import(lookups, monkeypatch):
    """A module imported after the first lookup may bring its own pool: the next block looks again."""
    with threads.single_threaded_blas():
        pass
    monkeypatch.setitem(sys.modules, "fedvote_test_freshly_imported", types.ModuleType("fresh"))
    for _ in range(2):
        with threads.single_threaded_blas():
            assert set(_pool_threads()) == {1}
    assert len(lookups) == 2


def test_large_products_take_torchs_threads_back_inside_the_block(two_threads):
    """Above the threshold: the count outside the block; below it, or outside any block: unchanged."""
    with threads.single_threaded():
        with threads.threads_for_products(threads.PARALLEL_MULTIPLY_ADDS):
            assert torch.get_num_threads() == 2
            assert set(_pool_threads("blas")) == {1}  # the pools stay limited
        assert torch.get_num_threads() == 1
        with threads.threads_for_products(threads.PARALLEL_MULTIPLY_ADDS - 1):
            assert torch.get_num_threads() == 1
    with threads.threads_for_products(10 * threads.PARALLEL_MULTIPLY_ADDS):
        assert torch.get_num_threads() == 2
    assert threads._outer_threads == []  # noqa: SLF001 - nothing left on the stack


def test_the_innermost_blocks_outer_count_is_taken(two_threads):
    with threads.single_threaded(), threads.single_threaded():
        with threads.threads_for_products(threads.PARALLEL_MULTIPLY_ADDS):
            assert torch.get_num_threads() == 1  # the inner block's outside was already one thread
    with pytest.raises(RuntimeError), threads.single_threaded():
        raise RuntimeError("inside")
    assert threads._outer_threads == []  # noqa: SLF001


def test_outer_threads_is_the_count_outside_the_innermost_block(two_threads):
    assert threads.outer_threads() == 2
    with threads.single_threaded():
        assert threads.outer_threads() == 2 and torch.get_num_threads() == 1
        with threads.single_threaded():
            assert threads.outer_threads() == 1
    assert threads.outer_threads() == 2
