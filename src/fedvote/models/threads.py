"""One thread for small problems: torch's intra-op pool and every BLAS / OpenMP pool.

An agent's step is a few small matrix products: on a busy 2-core machine a second thread
only adds synchronisation (torch 10-30x slower; NumPy's BLAS norm of 10⁵ floats 12 ms with
two threads, 0.01 ms with one, load average 6). threadpoolctl finds the loaded BLAS and
OpenMP libraries by reading the process's memory map, 2.5 ms a call with torch loaded
(0.25 s of a 100-round DP-FedAvg run on digits); the libraries are found once per process
here and reused, 0.02 ms a call. A library loaded after that first call keeps its own
thread count (a matter of speed only).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None


def _libraries() -> ThreadpoolController:
    """The process's BLAS and OpenMP libraries, found on the first call."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
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
    torch.set_num_threads(1)
    try:
        if blas:
            with single_threaded_blas():
                yield
        else:
            yield
    finally:
        torch.set_num_threads(threads)
