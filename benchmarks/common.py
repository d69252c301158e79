"""Shared pieces of the benchmarks: the machine, peak memory, timing, the results files.

Every benchmark writes ``benchmarks/results/<name>.json``::

    {"benchmark": name, "title": ..., "command": ..., "machine": {...}, "notes": ...,
     "columns": [{"key": ..., "label": ..., "format": ...}, ...],   # the table to draw
     "results": [row, ...], "summary": ["a line of the report", ...]}

``benchmarks/report.py`` turns every such file into one section of ``docs/performance.md``;
``columns`` and ``summary`` are optional (without ``columns`` every key of the rows is a column).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional

from fedvote.models.precision import resolve_precision, training_arithmetic
from fedvote.models.zoo import build_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"


def fedvote_command() -> list[str]:
    """The installed ``fedvote`` script beside this interpreter, else ``python -m fedvote.cli``."""
    script = Path(sys.executable).with_name("fedvote")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fedvote.cli"]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "platform": platform.platform(),
        "processor": _cpu_model() or platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpus_available": affinity,
        "memory_gb": _memory_gb(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def command_line() -> str:
    """The command that is running, as typed from the repository root."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        argv = ["python", "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    else:
        script = Path(sys.argv[0]).resolve()
        shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
        argv = ["python", str(shown), *sys.argv[1:]]
    return shlex.join(argv)


# --- peak memory --------------------------------------------------------------------------


def _status_kb(field_name: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """Resident memory of this process now, MB."""
    kb = _status_kb("VmRSS")
    return kb / 1024 if kb is not None else peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident memory since the last :func:`reset_peak` (or the start), MB."""
    kb = _status_kb("VmHWM")
    if kb is None:  # no /proc: the whole process's peak (ru_maxrss is kB on Linux, bytes on macOS)
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20
    return kb / 1024


def reset_peak() -> bool:
    """Restart the peak-RSS counter (Linux ``clear_refs``); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class Measure:
    """Wall time and memory of one block: ``seconds``, ``peak_mb`` (process peak during the
    block), ``extra_mb`` (that peak above the memory held when the block started)."""

    seconds: float = 0.0
    peak_mb: float = 0.0
    base_mb: float = 0.0
    cuda_peak_mb: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def extra_mb(self) -> float:
        return max(0.0, self.peak_mb - self.base_mb)


@contextmanager
def measured(device: str | torch.device = "cpu") -> Iterator[Measure]:
    """Time the block and record its peak memory (host RSS, and CUDA's allocator on a GPU)."""
    result = Measure()
    if not reset_peak():
        result.notes.append("peak RSS is the process's since start (no clear_refs)")
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    result.base_mb = rss_mb()
    start = time.perf_counter()
    try:
        yield result
    finally:
        if cuda:
            torch.cuda.synchronize()
            result.cuda_peak_mb = torch.cuda.max_memory_allocated() / 2**20
        result.seconds = time.perf_counter() - start
        result.peak_mb = peak_rss_mb()


def best_of(repeats: int, fn: Callable[[], Measure]) -> Measure:
    """The fastest of ``repeats`` runs (with its own memory figures)."""
    runs = [fn() for _ in range(max(1, repeats))]
    return min(runs, key=lambda m: m.seconds)


# --- results files ------------------------------------------------------------------------


def write_results(
    name: str,
    *,
    title: str,
    rows: list[dict[str, Any]],
    columns: list[dict[str, str]] | None = None,
    notes: str = "",
    summary: list[str] | None = None,
    command: str | None = None,
    path: Path | None = None,
) -> Path:
    """Write ``benchmarks/results/<name>.json`` (or ``path``) for ``benchmarks/report.py``."""
    report = {
        "benchmark": name,
        "title": title,
        "command": command or command_line(),
        "machine": machine(),
        "notes": notes,
        "columns": columns,
        "results": rows,
        "summary": summary or [],
    }
    out = path or RESULTS_DIR / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return out


def print_table(rows: list[dict[str, Any]], columns: list[dict[str, str]]) -> None:
    """A plain-text table of ``rows`` with the given columns (key, label, format)."""
    cells = [[format_cell(row.get(c["key"]), c.get("format", "")) for c in columns] for row in rows]
    widths = [max([len(c["label"])] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c["label"].rjust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))


def format_cell(value: Any, fmt: str = "") -> str:
    """One table cell: ``fmt`` applied to numbers, ``-`` for missing values."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and fmt:
        return format(value, fmt)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def default_data_dir() -> Path | None:
    """$FEDVOTE_DATA, else ../shared/datasets beside the repository, if it exists."""
    env = os.environ.get("FEDVOTE_DATA")
    candidates = [Path(env)] if env else [ROOT.parent / "shared" / "datasets"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return None


def reference_step_ms(steps: int = 40) -> float:
    """Median ms of the MNIST student's step: the wide CNN (24, 48), 256 images, bfloat16 where native.

    Forward, backward and Adam on fixed random data, after 5 warm-up steps: the kind of
    arithmetic that is three quarters of the timed run, so its variation tracks the host's.
    """
    generator = torch.Generator().manual_seed(0)
    model = build_model("cnn", (1, 28, 28), 10, cnn_widths=(24, 48), generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.rand(256, 1, 28, 28, generator=generator)  # (B, C, H, W)
    labels = torch.randint(0, 10, (256,), generator=generator)
    arithmetic = resolve_precision("auto", (1, 28, 28))
    times = []
    for step in range(steps + 5):
        start = time.perf_counter()
        with training_arithmetic(arithmetic):
            loss = functional.cross_entropy(model(images).float(), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= 5:
            times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)
