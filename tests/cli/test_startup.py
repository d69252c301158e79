"""Start-up stays light: help and one-line errors never import torch (issue 21, item 5).

``fedvote --help`` took 2.1 s when the command line imported torch, dp_accounting and
scipy to build its choices. Each case runs in a fresh interpreter and lists the heavy
packages loaded by then. Timing targets live in ``benchmarks/bench_startup.py``, not here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedvote.cli.app import cli

HEAVY = ("torch", "torchvision", "scipy", "sklearn", "dp_accounting", "opacus", "flwr", "matplotlib", "rich")

HELP = [["--help"]] + [[name, "--help"] for name in sorted(cli.commands)]
ERRORS = [
    (["run", "--agents", "0"], "fedvote: error: --agents: must be at least 1, got 0"),
    (["run", "--dataset", "nope"], "fedvote: error: --dataset: unknown dataset 'nope'"),
    (["run", "--method", "private-knn-fl", "--k", "0"], "fedvote: error: --k: must be an integer in [1, "),
    (["run", "--k", "3"], "fedvote: error: --k: is not an option of method 'pate-fl'"),
    (["run", "--dataset", "digits", "--target", "digits"], "fedvote: error: --target: 'digits' is also a source"),
    (["compare", "--methods", "nope"], "fedvote: error: --methods: unknown method(s) nope"),
]


def _run(argv: list[str]) -> tuple[int, str, list[str]]:
    """Exit status, stderr and the heavy packages imported by ``fedvote ARGV``, in a fresh interpreter."""
    code = (
        "import sys\n"
        "from fedvote.cli import main\n"
        "status = 0\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exit:\n"
        "    status = exit.code or 0\n"
        f"loaded = [name for name in {HEAVY!r} if name in sys.modules]\n"
        "print('loaded:', *loaded)\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), done.stdout + done.stderr
    return done.returncode, done.stderr, last.split()[1:]


@pytest.mark.parametrize("argv", HELP, ids=" ".join)
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    status, err, loaded = _run(argv)
    assert status == 0, err
    assert loaded == [], f"fedvote {' '.join(argv)} imported {loaded}"


@pytest.mark.parametrize(("argv", "message"), ERRORS, ids=[" ".join(argv) for argv, _ in ERRORS])
def test_one_line_errors_import_nothing_heavy(argv: list[str], message: str) -> None:
    status, err, loaded = _run(argv)
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, err
    assert loaded == [], f"fedvote {' '.join(argv)} imported {loaded}"


def test_the_light_registry_is_what_discovery_finds() -> None:
    from fedvote.methods import METHODS
    from fedvote.methods.registry import METHOD_NAMES, OPTIONS

    assert METHOD_NAMES == tuple(METHODS)
    assert {name: method.options_type for name, method in METHODS.items()} == OPTIONS


def test_a_method_missing_from_the_registry_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedvote.methods as methods

    registered = {name: options for name, options in methods.OPTIONS.items() if name != "pate-fl"}
    monkeypatch.setattr(methods, "OPTIONS", registered)
    monkeypatch.setattr(methods, "_discovered", {})
    with pytest.raises(TypeError, match="pate-fl"):
        methods.registered_methods()
