"""One thread for small problems: torch's intra-op pool and every BLAS / OpenMP pool.

An agent's step is a few small matrix products: on a busy 2-core machine a second thread
only adds synchronisation (torch 10-30x slower; NumPy's BLAS norm of 10⁵ floats 12 ms with
two threads, 0.01 ms with one, load average 6). threadpoolctl finds the loaded BLAS and
OpenMP libraries by reading the process's memory map, 2.5 ms a call with torch loaded
(0.25 s of a 100-round DP-FedAvg run on digits); the libraries are found once and reused,
0.02 ms a call, and found again only after a module was imported (a new extension module
may have brought its own BLAS or OpenMP pool, which would otherwise keep its thread count).

Large products inside such a block may take torch's threads back
(:func:`threads_for_products`): a batched-SGD round of m MNIST agents (32 × 784 by 784 × 128
products) ran 1.3-1.6x faster on two threads than on one, digits' (64-wide inputs) no faster
(2 cores, OpenMP's default wait policy; the whole rounds in benchmarks/bench_batched_clients.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None
_modules_when_found = -1  # len(sys.modules) when _controller looked for the libraries
# torch's thread count outside each enclosing single_threaded block, innermost last.
_outer_threads: list[int] = []

# A step of at least this many multiply-adds pays for torch's second thread: measured on 2
# cores, one batched-SGD step of m agents' MLPs took as long on one thread as on two at
# 1.5-2.4 million (digits, m = 5-8) and 1.3x less time on two at 3.2 million (MNIST, m = 1).
PARALLEL_MULTIPLY_ADDS = 3_000_000


def _libraries() -> ThreadpoolController:
    """The process's BLAS and OpenMP libraries, found again only when modules were imported since."""
    global _controller, _modules_when_found
    if _controller is None or len(sys.modules) != _modules_when_found:
        _controller = ThreadpoolController()
        _modules_when_found = len(sys.modules)
    return _controller


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS and OpenMP pools limited to one thread inside the block (torch's own pool untouched)."""
    with _libraries().limit(limits=1):
        yield


@contextmanager
def single_threaded(*, blas: bool = True) -> Iterator[None]:
    """One intra-op thread for torch inside the block and (``blas``) one for the BLAS / OpenMP pools."""
    threads = torch.get_num_threads()
    _outer_threads.append(threads)
    torch.set_num_threads(1)
    try:
        if blas:
            with single_threaded_blas():
                yield
        else:
            yield
    finally:
        _outer_threads.pop()
        torch.set_num_threads(threads)


def outer_threads() -> int:
    """Torch's thread count outside the innermost :func:`single_threaded` block (now, outside any)."""
    return _outer_threads[-1] if _outer_threads else torch.get_num_threads()


@contextmanager
def threads_for_products(multiply_adds: float) -> Iterator[None]:
    """Torch's own thread count again inside a :func:`single_threaded` block, for large products.

    ``multiply_adds``: the work of one step of the computation inside. Below
    :data:`PARALLEL_MULTIPLY_ADDS`, or outside any single-threaded block, nothing changes;
    the BLAS / OpenMP pools stay as the block set them (torch's own kernels take the threads).
    """
    if not _outer_threads or multiply_adds < PARALLEL_MULTIPLY_ADDS:
        yield
        return
    current = torch.get_num_threads()
    torch.set_num_threads(outer_threads())
    try:
        yield
    finally:
        torch.set_num_threads(current)
