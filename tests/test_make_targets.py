"""`make test` stays fast and CI still runs everything (issue 18, item 8).

The fast selection excludes the ``slow`` and ``full_data`` markers and runs on two
workers; ``make test-slow`` runs exactly those markers; ``.ci/run`` runs both, so nothing
a slow test proves is lost. The README says what ``make test`` installs and where it
finds the datasets. (The time itself is measured, not asserted: see the closing notes.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _recipe(target: str) -> str:
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert found, f"no {target} target"
    return found.group(1)


def test_make_test_runs_the_fast_selection_on_two_workers():
    recipe = _recipe("test")
    assert '-m "not slow and not full_data"' in recipe and "$(PYTEST_PARALLEL)" in recipe
    assert re.search(r"^PYTEST_PARALLEL \?= -n 2\b", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)


def test_make_test_slow_runs_exactly_the_excluded_markers_and_ci_runs_both():
    assert '-m "slow or full_data"' in _recipe("test-slow")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test\n" in ci and "make test-slow" in ci


def test_the_markers_are_registered():
    config = (ROOT / "pyproject.toml").read_text()
    for marker in ("slow", "full_data"):
        assert re.search(rf'"{marker}:', config), marker


def test_the_readme_says_make_test_installs_chromium_and_finds_the_datasets():
    readme = (ROOT / "README.md").read_text()
    assert "installs Debian's `chromium`" in readme
    assert "../shared/datasets" in readme and "make test-slow" in readme


@pytest.mark.parametrize("target", ["test", "test-slow"])
def test_the_test_targets_install_chromium_first(target):
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^{re.escape(target)}: install-dev chromium$", makefile, flags=re.MULTILINE)


# Scripts of experiments/ that `make results` does not call itself, and who does.
NOT_IN_RESULTS = {
    "audit_table.py": "make audit",
    "prifedsync_epsilon.py": "imported by prifedsync_mnist.py, whose section prints its table",
    "bar_federations.py": "no experiment: the Bar federations projected_votes.py and teacher_variants.py share",
}


def test_make_results_reruns_every_experiment_and_renders_last():
    recipe = _recipe("results")
    called = re.findall(r"experiments/(\w+\.py)", recipe)
    scripts = {path.name for path in (ROOT / "experiments").glob("*.py")}
    assert set(NOT_IN_RESULTS) <= scripts, "a listed exception no longer exists"
    assert sorted(scripts - set(NOT_IN_RESULTS)) == sorted(called), "make results must call each experiment once"
    assert called[-1] == "run.py", "run.py renders docs/results.md from every saved result: it runs last"


@pytest.mark.parametrize(("fonts", "installs"), [("dejavu", False), ("dejavu no-such-font-dir", True)])
def test_make_fonts_installs_what_is_missing_and_succeeds(fonts: str, installs: bool) -> None:
    """A missing font directory leads to the install (here a stand-in that succeeds), not to a failed make."""
    done = subprocess.run(
        ["make", "--no-print-directory", "fonts", f"SYNDIGITS_FONTS={fonts}", "APT_GET=true"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert ("installing" in done.stdout) == installs
