"""The GPU figures issues 43 and 46 ask for, in one prepared run on a lent device. Not a test.

Issue 43 item 4: the CIFAR-10 command of its Bar on a GPU (≤ 2 minutes, recorded). Issue 46
item 4: DP-FedAvg and PATE-FL at scale on a GPU. MNIST has 60,000 training records, and every
agent needs one (``fedvote run --agents 100000 --dataset mnist`` is refused: ``--agents: 100000
agents but only 60000 records``), so the largest MNIST federation, N = 60,000, stands in for the
issue's 100,000.

A device machine starts bare, from an image whose ``python3`` holds PyTorch but neither
fedvote's accounting packages nor the datasets, and the ``../shared`` beside a checkout does
not travel. So, here, once::

    .venv/bin/python benchmarks/device_figures.py --prepare --data-dir ../shared/datasets

copies dp-accounting and opacus (pure Python) into ``.device/site`` and the CIFAR-10 and MNIST
files into ``.device/data`` (``.device/`` is git-ignored; about 35 MB, under the 64 MiB a run may
carry). Then one device call, carrying ``.device``::

    python3 benchmarks/device_figures.py --out $OUT        # device run, timeout_s 600, carry [".device"]

runs each step in a fresh process (``PYTHONPATH`` = ``src`` and ``.device/site``, so nothing is
installed there) with its own time limit, and writes ``device_figures.json`` to ``--out`` after
every step, so a step that runs out of time loses only itself. ``--smoke`` runs the same steps
at toy sizes (any machine: the check that the script works before device time is spent on it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEVICE = ROOT / ".device"
PACKAGES = ("dp_accounting", "opacus")  # what fedvote imports that the device image lacks
DATASETS = ("cifar10", "mnist")
MNIST_RECORDS = 60_000  # the most agents an MNIST federation can have (one record each)
CIFAR10_COMMAND = ["--dataset", "cifar10", "--agents", "100", "--partition", "dirichlet",
                   "--dirichlet-alpha", "0.5", "--epsilon", "4"]  # fmt: skip


def steps(smoke: bool) -> list[tuple[str, list[str], float]]:
    """(name, ``fedvote run`` flags, seconds allowed) for each figure, at toy sizes with ``smoke``."""
    if smoke:
        return [
            ("cifar10_command", [*CIFAR10_COMMAND[:2], "--agents", "4", "--epsilon", "4"], 300.0),
            ("dp_fedavg_round_n100", _round("dp-fedavg", 100), 300.0),
            ("pate_fl_n100", ["--method", "pate-fl", "--dataset", "mnist", "--agents", "100", "--epsilon", "4"], 300.0),
        ]  # fmt: skip
    return [
        ("cifar10_command", CIFAR10_COMMAND, 150.0),
        ("dp_fedavg_round_n10000", _round("dp-fedavg", 10_000), 75.0),
        (f"dp_fedavg_round_n{MNIST_RECORDS}", _round("dp-fedavg", MNIST_RECORDS), 150.0),
        (f"pate_fl_n{MNIST_RECORDS}", ["--method", "pate-fl", "--dataset", "mnist", "--agents",
                                       str(MNIST_RECORDS), "--epsilon", "4"], 150.0),
    ]  # fmt: skip  (525 s in all: inside one device call's 600 s, start-up included)


def _round(method: str, agents: int) -> list[str]:
    """``method`` for two rounds at a given σ on MNIST: its time per round at N = ``agents`` (as bench_gradient_scale)."""
    return ["--method", method, "--dataset", "mnist", "--agents", str(agents), "--sigma", "1", "--rounds", "2",
            "--noise-seed", "0"]  # fmt: skip


def _refused(message: str) -> SystemExit:
    """Bad input: one line on stderr, exit status 2 (nothing written)."""
    print(f"device_figures: error: {message}", file=sys.stderr)
    return SystemExit(2)


def prepare(data_dir: Path) -> None:
    """Fill ``.device/``: the packages fedvote imports that the device image lacks, and the datasets."""
    site = DEVICE / "site"
    if data_dir.resolve() == (DEVICE / "data").resolve():
        raise _refused("--data-dir: --prepare copies from the datasets, e.g. ../shared/datasets")
    site.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        try:
            source = Path(__import__(name).__file__).parent
        except ImportError:
            raise _refused(f"{name} is not installed here: run --prepare with .venv/bin/python") from None
        shutil.copytree(source, site / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*_test.py", "__pycache__"))
    for name in DATASETS:
        if not (data_dir / name).is_dir():
            raise _refused(f"--data-dir: {data_dir / name} is not a directory")
        shutil.copytree(data_dir / name, DEVICE / "data" / name, dirs_exist_ok=True)
    size = sum(path.stat().st_size for path in DEVICE.rglob("*") if path.is_file())
    print(f"prepared {DEVICE} ({size / 2**20:.1f} MiB): carry it with the device run", file=sys.stderr)


def run_step(name: str, flags: list[str], limit: float, data_dir: Path, out: Path) -> dict[str, Any]:
    """``fedvote run FLAGS --data-dir DATA --json`` in a fresh process: wall, CPU and peak memory, its result."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(DEVICE / "site")]),
           "PYTHONUNBUFFERED": "1", "FEDVOTE_CACHE": str(out / "cache")}  # fmt: skip
    command = [sys.executable, "-c", PEAK_WRAPPER, sys.executable, "-m", "fedvote.cli", "run", *flags,
               "--data-dir", str(data_dir), "--json"]  # fmt: skip
    before, children = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit)
        status, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        status, stdout, stderr = None, "", (expired.stderr or b"").decode(errors="replace") if isinstance(
            expired.stderr, bytes) else (expired.stderr or "")  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    row: dict[str, Any] = {
        "step": name, "command": "fedvote run " + " ".join(flags), "exit_status": status,
        "timed_out_after_s": None if status is not None else limit, "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime), 2),
        "peak_rss_mb": _peak_mb(stderr),
        "load_before": before, "load_after": os.getloadavg(), "stderr_tail": stderr[-1500:],
    }  # fmt: skip
    if status == 0:
        result = json.loads(stdout)
        privacy = result["privacy"]
        row.update(
            accuracy=result["accuracy"], agent_epsilon=privacy["agent"]["epsilon"], timings=result["timings"],
            rounds=result["communication"].get("rounds"), sigma=result.get("sigma"),
        )  # fmt: skip
    return row


# Runs argv[1:] and ends its stderr with the run's own peak resident set (a fresh process per
# step, so the figure is that step's, not the largest of the steps so far).
PEAK_WRAPPER = (
    "import resource, subprocess, sys\n"
    "status = subprocess.run(sys.argv[1:]).returncode\n"
    "print(f'peak_rss_kb={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr)\n"
    "sys.exit(status)\n"
)


def _peak_mb(stderr: str) -> float | None:
    """The step's peak resident set in MB, from :data:`PEAK_WRAPPER`'s last line (None if it was killed)."""
    lines = [line for line in stderr.splitlines() if line.startswith("peak_rss_kb=")]
    return round(int(lines[-1].removeprefix("peak_rss_kb=")) / 1024, 1) if lines else None


def machine() -> dict[str, Any]:
    """What the figures ran on: the GPU as nvidia-smi names it, torch and the host."""
    import torch

    smi = shutil.which("nvidia-smi")
    gpu = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.strip() if smi else None
    return {
        "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "nvidia_smi": gpu, "cpu_count": os.cpu_count(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip() or "unknown (no git there)",
    }  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", action="store_true", help="fill .device/ here (before the device run)")
    parser.add_argument("--data-dir", type=Path, default=DEVICE / "data")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "out")))
    parser.add_argument("--smoke", action="store_true", help="the same steps at toy sizes, on any machine")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.data_dir)
        return
    if not (DEVICE / "site").is_dir() or not args.data_dir.is_dir():
        raise _refused(f"{DEVICE} is not prepared here: run --prepare, then carry it")
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "smoke": args.smoke, "steps": []}  # fmt: skip
    for name, flags, limit in steps(args.smoke):
        row = run_step(name, flags, limit, args.data_dir, args.out)
        record["steps"].append(row)
        (args.out / "device_figures.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"[device_figures] {name}: exit {row['exit_status']}, {row['wall_s']} s wall, "
              f"accuracy {row.get('accuracy')}, agent ε {row.get('agent_epsilon')}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
