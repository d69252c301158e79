"""Flower's processes under the deploy commands: their home, environment, start, stop and signals.

One job: run Flower's executables (``flower-superlink``, ``flower-supernode``, ``flwr``) as
children of a ``fedvote deploy`` command so that none outlives it and its temporary Flower
home (FLWR_HOME: an agent's mapped records, the SuperLink's log) is removed on every way
out, signals included (:func:`stop_on_signals`, :func:`flower_home`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import click


class LogKept(click.ClickException):
    """A failed run whose message names Flower's log in its temporary home: that home is kept."""


@contextmanager
def flower_home(workdir: str | None, prefix: str) -> Iterator[Path]:
    """FLWR_HOME for Flower's processes: ``workdir``, or a temporary directory removed after.

    The temporary directory is removed on every way out — success, an error, Ctrl-C, SIGTERM,
    SIGHUP (:func:`stop_on_signals`) — but one: a :class:`LogKept` failure, whose message
    names the log in it, which must still be there to read. An agent's node keeps no log there
    (its output is the terminal's), only its mapped records: it is always removed.
    """
    if workdir is not None:
        home = Path(workdir).resolve()
        home.mkdir(parents=True, exist_ok=True)
        yield home
        return
    home = Path(tempfile.mkdtemp(prefix=prefix))
    keep = False
    try:
        yield home
    except LogKept:
        keep = True
        raise
    finally:
        if not keep:
            with signals_deferred():  # a stop signal now would leave the home half removed
                shutil.rmtree(home, ignore_errors=True)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP held back while the block runs, delivered after it (POSIX)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def flower_environment(home: Path) -> dict[str, str]:
    """The environment for Flower's processes: FLWR_HOME, this environment's scripts first on PATH.

    Flower starts its helpers (flower-superexec, flwr-serverapp, flwr-clientapp) by name.
    """
    scripts = str(Path(sys.executable).parent)
    path = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    # Flower reports usage to telemetry.flower.ai and checks PyPI for updates unless told
    # not to; a privacy tool keeps quiet unless the user set these variables.
    quiet = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    return {**quiet, **os.environ, "FLWR_HOME": str(home), "PYTHONUNBUFFERED": "1", "PATH": path}


def run_foreground(command: Sequence[str], home: Path) -> int:
    """Run ``command`` to its end; on SIGTERM / Ctrl-C stop it first. Returns its exit status."""
    process = subprocess.Popen(list(command), env=flower_environment(home))
    with stop_on_signals(process):
        return process.wait()


@contextmanager
def background(
    command: Sequence[str] | None, home: Path, log_name: str = "superlink.log"
) -> Iterator[subprocess.Popen[bytes] | None]:
    """Run ``command`` (if any) beside the block, its output in ``home/log_name``; stop it after."""
    if command is None:
        yield None
        return
    with (home / log_name).open("ab") as log:
        process = subprocess.Popen(
            list(command), env=flower_environment(home), stdout=log, stderr=subprocess.STDOUT
        )
    with stop_on_signals(process):
        try:
            yield process
        finally:
            stop(process)


@contextmanager
def stop_on_signals(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the block runs, SIGTERM, SIGINT and SIGHUP stop ``process`` before this one exits.

    The first signal stops ``process`` (SIGTERM, a grace period, SIGKILL) and exits; a second
    one while it stops (a double Ctrl-C, or ``timeout`` forwarding the SIGTERM that ``pkill``
    also sent here) kills it at once and lets the exit finish: with the default handler back,
    it used to end this process before the caller removed its temporary Flower home.
    """
    stopping = False

    def handler(signum: int, frame: object) -> None:
        nonlocal stopping
        # Only signal here: waiting inside a handler that interrupted Popen.wait deadlocks.
        if stopping:
            if process.poll() is None:
                process.kill()
            return
        stopping = True
        if process.poll() is None:
            process.terminate()
        raise SystemExit(128 + signum)

    # SIGHUP too (a closed terminal): ended by it unhandled, the temporary Flower home stayed
    signals = [signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        stopping = True  # from here on a signal only hurries the child's stop
        try:
            if process.poll() is None:
                stop(process)
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


def stop(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
