"""Progress reporting for long steps, to stderr, so that ``--json`` keeps stdout clean.

On a terminal, a bar per step; elsewhere (a log file, a pipe, a batch job) a command may ask
for plain lines instead (:class:`RichProgress` ``log_lines``): one when a step starts, one at
most every :data:`LOG_INTERVAL_S` with its count and an ETA, one when it ends, each with the
time since the command started. A 35-minute ``fedvote run`` used to print nothing to a log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TextIO

# Plain progress lines of a step come at most this often (besides its start and its end).
LOG_INTERVAL_S = 30.0


class StepBar(Protocol):
    """Handle of one running step."""

    def advance(self, amount: int = 1) -> None:
        """Mark ``amount`` more units done."""


class Progress(Protocol):
    """Where long steps report how far they are."""

    def step(self, description: str, total: int) -> AbstractContextManager[StepBar]:
        """Context for a step of ``total`` units; call ``advance(n)`` on what it yields."""
        ...


class _Silent:
    def advance(self, amount: int = 1) -> None:
        """Ignore progress."""


class NullProgress:
    """Reports nothing (library use and tests)."""

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[StepBar]:
        """Step that reports nothing."""
        yield _Silent()


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss or m:ss."""
    whole = max(0, int(round(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class LineProgress:
    """Plain progress lines on ``stream``: a step's start, its count and ETA now and then, its end.

    Each line starts with ``prefix`` and the time since this object was made:
    ``fedvote run [0:42] training the teachers: 20/50, ETA 1:03``.
    """

    def __init__(
        self, prefix: str = "fedvote", stream: TextIO | None = None, interval_s: float = LOG_INTERVAL_S
    ) -> None:
        self.prefix = prefix
        self.stream = stream
        self.interval_s = interval_s
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        """One line: the prefix, the time since the start, ``text``."""
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"{self.prefix} [{clock(time.monotonic() - self.started)}] {text}", file=stream, flush=True)

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[StepBar]:
        """A step as lines: started, then done/total with an ETA at most every interval, then done."""
        began = time.monotonic()
        self.line(f"{description}: started" + (f" ({total} parts)" if total > 1 else ""))
        progress = self

        class _Lines:
            done = 0
            last = began

            def advance(self, amount: int = 1) -> None:
                self.done += amount
                now = time.monotonic()
                if now - self.last < progress.interval_s or not 0 < self.done < total:
                    return
                self.last = now
                remaining = (now - began) / self.done * (total - self.done)
                progress.line(f"{description}: {self.done}/{total}, ETA {clock(remaining)}")

        yield _Lines()
        self.line(f"{description}: done in {clock(time.monotonic() - began)}")


def is_file_not_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` writes to a file or a pipe (an OS descriptor that is no terminal).

    An in-memory stream (``io.StringIO``, a test's captured stderr) is neither: no lines go there.
    """
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both OSError and ValueError
        return False
    return not stream.isatty()


class RichProgress:
    """A rich progress bar per step on stderr (shown on terminals only).

    ``log_lines``: where stderr is a file or a pipe (:func:`is_file_not_terminal`: a log, a
    batch job), report each step as plain lines (:class:`LineProgress`, prefixed ``prefix``)
    instead of nothing.
    """

    def __init__(self, *, log_lines: bool = False, prefix: str = "fedvote") -> None:
        from rich.console import Console

        self._console = Console(stderr=True)
        wants_lines = log_lines and not self._console.is_terminal and is_file_not_terminal(sys.stderr)
        self._lines = LineProgress(prefix) if wants_lines else None

    @property
    def on_terminal(self) -> bool:
        """Whether stderr is a terminal (bars are drawn); else they are not, and commands log plain lines."""
        return bool(self._console.is_terminal)

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[StepBar]:
        """Progress bar for one step, replaced by a check mark when done (plain lines off a terminal)."""
        if self._lines is not None:
            with self._lines.step(description, total) as lines:
                yield lines
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichBar

        with RichBar(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self._console,
            transient=True,
            disable=not self._console.is_terminal,
        ) as bar:
            task = bar.add_task(description, total=total)

            class _Bar:
                def advance(self, amount: int = 1) -> None:
                    bar.advance(task, amount)

            yield _Bar()
        if self._console.is_terminal:
            self._console.print(f"[green]✓[/green] {description}")


# The shared "report nothing" instance used as a default argument.
NO_PROGRESS: Progress = NullProgress()
