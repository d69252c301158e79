"""fedvote.cli.flower_processes: a second stop signal while a deploy command stops keeps no Flower home.

Found by a CIFAR-10 deployment (4 agents under ``timeout``): ``pkill`` signalled both ``timeout``
and the agent, ``timeout`` forwarded its SIGTERM, and the second signal arrived while the agent
waited for its SuperNode to stop. The default handler was back by then, so the agent died
before removing its temporary Flower home (mapped records and all). A double Ctrl-C does the
same. Real processes: the command under test stops a child that takes a while to exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

# The deploy command's shape: a temporary Flower home, a child in the foreground. The child
# takes SLOW_STOP seconds to exit after SIGTERM, as a SuperNode winding down does.
SLOW_STOP = 1.5
COMMAND = textwrap.dedent(
    f"""
    import sys, tempfile
    import fedvote.cli.flower_processes as processes
    tempfile.tempdir = sys.argv[1]
    child = [sys.executable, "-c", (
        "import signal, sys, time\\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep({SLOW_STOP}), sys.exit(0)))\\n"
        "print('child up', flush=True)\\n"
        "time.sleep(60)\\n"
    )]
    with processes.flower_home(None, "fedvote-agent-") as home:
        (home / "mapped-records").mkdir()
        processes.run_foreground(child, home)
    """
)


def _start(tmp_path: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", COMMAND, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "child up"
    return process


def _left(tmp_path: Path) -> list[str]:
    return sorted(path.name for path in tmp_path.iterdir())


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGHUP)],
    ids=["sigterm-twice", "ctrl-c-twice", "sigterm-then-sighup"],
)
def test_a_second_signal_while_stopping_still_removes_the_home(tmp_path, first, second):
    process = _start(tmp_path)
    assert len(_left(tmp_path)) == 1
    os.kill(process.pid, first)
    time.sleep(0.3)  # the command is now waiting for its child to stop
    os.kill(process.pid, second)
    process.wait(timeout=30)
    assert process.returncode != 0  # stopped by the signal, not finished
    assert _left(tmp_path) == []


def test_a_second_signal_does_not_wait_out_the_childs_slow_stop(tmp_path):
    """The second signal means 'now': the child is killed, not given its grace period."""
    process = _start(tmp_path)
    os.kill(process.pid, signal.SIGTERM)
    time.sleep(0.3)
    began = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
    assert time.monotonic() - began < SLOW_STOP - 0.5 and _left(tmp_path) == []


def test_one_signal_stops_the_child_and_removes_the_home(tmp_path):
    process = _start(tmp_path)
    os.kill(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM and _left(tmp_path) == []
