"""Fixtures shared by the command-line tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from fedvote import runner


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Every call of the runner, recorded: a refusal must come before anything is loaded or trained."""
    calls: list[tuple[object, ...]] = []
    real = runner.run

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run", spy)
    return calls


@pytest.fixture
def relative_ledger_result(tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch) -> Callable[[Sequence[str]], Path]:
    """A run with ``flags`` in ``tmp_path``, its result.json rewritten as fedvote wrote them before ledger
    paths were recorded absolute: ``"ledger": "rel.db"``."""

    def make(flags: Sequence[str]) -> Path:
        monkeypatch.chdir(tmp_path)
        code, _, err = invoke(["run", *flags, "--ledger", "rel.db", "--out", "rr"])
        assert code == 0, err
        path = tmp_path / "rr" / "result.json"
        data = json.loads(path.read_text())
        data["config"]["privacy"]["ledger"] = "rel.db"
        path.write_text(json.dumps(data))
        return path

    return make
