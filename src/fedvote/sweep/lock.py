"""One sweep at a time in an output directory: an exclusive lock on ``D/.lock`` for the sweep's life.

Two ``fedvote sweep --out D`` started together would otherwise both run, both charge their
points and both write ``D/sweep.json``, the second grid replacing the first. The sweep that
takes the lock first runs; the other is refused in one line naming ``--out`` before it
reads, trains or charges anything. The lock is ``fcntl.flock`` on ``D/.lock``: the kernel
drops it when its holder exits, however it exits, so a killed sweep never leaves ``D``
locked (the empty ``.lock`` file it leaves is not a sweep's content: :data:`LOCK_NAME`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from fedvote.errors import ConfigError

LOCK_NAME = ".lock"

# A lock taken on a ``.lock`` file that its holder removed meanwhile (a sweep that wrote
# nothing cleans up after itself) is retaken on the new file, at most this many times.
_ATTEMPTS = 5


class SweepLock:
    """The exclusive lock of one sweep's output directory (:meth:`acquire`, then :meth:`release`).

    ``created`` lists the directories :meth:`acquire` made for it (``D`` and its missing
    parents, outermost first), which :meth:`release` removes with ``remove=True`` when the
    sweep left nothing in them.
    """

    def __init__(self, out: Path, fd: int, created: list[Path]) -> None:
        self.out = out
        self.path = out / LOCK_NAME
        self.created = created
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, out: str | Path) -> SweepLock:
        """Create ``out`` if needed and lock ``out/.lock``; refuse (naming ``--out``) a held one."""
        directory = Path(out)
        created: list[Path] = []
        try:
            for parent in reversed([directory, *directory.parents]):
                if not parent.exists():
                    parent.mkdir()
                    created.append(parent)
            for _ in range(_ATTEMPTS):
                fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise ConfigError(
                        "out",
                        f"another sweep holds {directory} (it has locked {directory / LOCK_NAME}); "
                        "wait for it to finish, or write to another directory",
                    ) from None
                if _same_file(fd, directory / LOCK_NAME):
                    return cls(directory, fd, created)
                os.close(fd)  # its holder removed that file before letting go: lock the new one
        except OSError as error:
            raise ConfigError("out", f"cannot lock {directory}: {error.strerror or error}") from error
        raise ConfigError("out", f"cannot lock {directory}: its {LOCK_NAME} keeps being replaced")

    def release(self, *, remove: bool = False) -> None:
        """Let go of the lock; with ``remove``, first delete ``.lock`` and the empty directories it made."""
        if self._fd is None:
            return
        try:
            if remove:
                self.path.unlink(missing_ok=True)  # before unlocking: a waiter then sees another file
                for made in reversed(self.created):
                    try:
                        made.rmdir()
                    except OSError:
                        break  # not empty: another writer's, or the sweep left something
        except OSError:
            pass
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
