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

**A busy host** (:func:`apply_host_policy`, called by the command line before torch is
imported): OpenMP threads sleep rather than spin while they wait (``OMP_WAIT_POLICY=PASSIVE``)
and torch takes only the CPUs other processes leave idle (:func:`fair_threads`). At load 5.5 on
2 cores, ``fedvote run --noise-seed 0`` took 93 s and 21 s with OpenMP's defaults, 5.3 s and 5.5 s
with one thread, at the same accuracy; the passive wait policy alone halved it. A variable the
user set is never overridden, and ``fedvote run --threads N`` asks for N threads whatever the load.
This module imports torch only when a function that needs it is called.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None
_modules_when_found = -1  # len(sys.modules) when _controller looked for the libraries
# torch's thread count outside each enclosing single_threaded block, innermost last.
_outer_threads: list[int] = []

# A step of at least this many multiply-adds pays for torch's second thread: measured on 2
# cores, one batched-SGD step of m agents' MLPs took as long on one thread as on two at
# 1.5-2.4 million (digits, m = 5-8) and 1.3x less time on two at 3.2 million (MNIST, m = 1).
PARALLEL_MULTIPLY_ADDS = 3_000_000


# How often, and how far apart, /proc/loadavg's count of runnable tasks is read: the median of
# a few readings, not the 1-minute load average, which lags a load that just began or ended by
# a minute (back-to-back runs would each see the last one's load).
LOAD_SAMPLES = 5
LOAD_SAMPLE_INTERVAL_S = 0.004


def _torch() -> ModuleType:
    """torch, imported when first needed (the command line sets the OpenMP policy before)."""
    import torch

    return torch


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; else every CPU)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def busy_cpus(loadavg: Path = Path("/proc/loadavg")) -> float:
    """How many CPUs other processes keep busy now: runnable tasks besides this one.

    The median of :data:`LOAD_SAMPLES` readings of the kernel's count of runnable tasks
    (``/proc/loadavg``'s fourth field, ``running/total``), less this process; where that file
    is missing (macOS), the 1-minute load average.
    """
    readings = []
    for index in range(LOAD_SAMPLES):
        try:
            running = int(loadavg.read_text().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        readings.append(max(0, running - 1))
        if index + 1 < LOAD_SAMPLES:
            time.sleep(LOAD_SAMPLE_INTERVAL_S)
    readings.sort()
    return float(readings[len(readings) // 2])


def fair_threads(available: int, busy: float) -> int:
    """Threads that take no more than the idle CPUs: ``available − busy`` rounded, 1 to ``available``.

    On 2 CPUs: 2 threads on a quiet host, 1 beside one busy process or more. A second thread
    on a CPU another process wants spends its time waiting on that process (4-18x slower,
    issue 47); one thread costs the run at most its fair share.
    """
    if not math.isfinite(busy):
        return 1
    return max(1, min(available, math.floor(available - busy + 0.5)))


def apply_host_policy(
    environ: MutableMapping[str, str] | None = None,
    *,
    available: int | None = None,
    busy: float | None = None,
) -> dict[str, str]:
    """Set the OpenMP wait policy and thread count for this host in ``environ``; what was set.

    Must run before torch is imported (OpenMP reads its variables when it loads):
    ``OMP_WAIT_POLICY=PASSIVE`` unless the user set a policy, and ``OMP_NUM_THREADS`` =
    :func:`fair_threads` when the host is busy (fewer threads than CPUs) and the user set no
    count. On a quiet host torch keeps its own default. ``environ`` defaults to
    ``os.environ``; ``available`` and ``busy`` to :func:`available_cpus` and :func:`busy_cpus`.
    """
    env = os.environ if environ is None else environ
    chosen: dict[str, str] = {}
    if "OMP_WAIT_POLICY" not in env:
        chosen["OMP_WAIT_POLICY"] = "PASSIVE"
    if "OMP_NUM_THREADS" not in env:
        cpus = available_cpus() if available is None else available
        threads = fair_threads(cpus, busy_cpus() if busy is None else busy)
        if threads < cpus:
            chosen["OMP_NUM_THREADS"] = str(threads)
    env.update(chosen)
    return chosen


def set_threads(count: int) -> None:
    """Torch's intra-op threads (and its OpenMP pool) set to ``count`` (``fedvote run --threads``)."""
    _torch().set_num_threads(count)


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
    torch = _torch()
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
    return _outer_threads[-1] if _outer_threads else _torch().get_num_threads()


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
    torch = _torch()
    current = torch.get_num_threads()
    torch.set_num_threads(outer_threads())
    try:
        yield
    finally:
        torch.set_num_threads(current)
