"""Progress reporting for long steps, to stderr, so that ``--json`` keeps stdout clean."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


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


class RichProgress:
    """A rich progress bar per step on stderr (shown on terminals only)."""

    def __init__(self) -> None:
        from rich.console import Console

        self._console = Console(stderr=True)

    @property
    def on_terminal(self) -> bool:
        """Whether stderr is a terminal (bars are drawn); else they are not, and commands log plain lines."""
        return bool(self._console.is_terminal)

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[StepBar]:
        """Progress bar for one step, replaced by a check mark when done."""
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
