"""compare and label keep one ledger per federation as run does: the path recorded absolute, probed
before anything is loaded, and a recorded config whose ledger is missing refused.

(`fedvote compare` built its config apart from the settings path, so `--ledger cmp.db` was recorded
relative and a bad ledger failed only after the data was loaded; `compare --config` and `label
--config` of a result.json from another directory opened a new, empty ledger.)
"""

from __future__ import annotations

import json
import os

import pytest

from fedvote import compare as comparison
from fedvote import runner
from fedvote.labelling import session

TINY = ["--agents", "3", "--queries", "5", "--epochs", "1", "--noise-seed", "1", "--sigma", "5",
        "--accountant", "exact"]  # fmt: skip


COMPARE_TINY = ["--agents", "3", "--queries", "5", "--epochs", "1", "--noise-seed", "1"]


def nothing_loaded(monkeypatch) -> list[object]:
    """From now on, every federation built is recorded: a refusal must come before the data is loaded."""
    loaded: list[object] = []
    for module in (runner, comparison, session):  # each binds make_federation when it is imported
        monkeypatch.setattr(module, "make_federation", lambda *a, **k: loaded.append(a))
    return loaded


@pytest.mark.parametrize("command", [["compare", "--methods", "pate-fl"], ["label", "--queries", "QUERIES"]])
def test_a_recorded_config_whose_ledger_is_missing_is_refused(
    command, tmp_path, invoke, monkeypatch, relative_ledger_result
):
    recorded = relative_ledger_result([*TINY, "--teacher-model", "logistic", "--student-model", "logistic"])
    (tmp_path / "queries.npy").write_bytes(b"")  # label's --queries must exist; it is read after the check
    command = [str(tmp_path / "queries.npy") if part == "QUERIES" else part for part in command]
    loaded = nothing_loaded(monkeypatch)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    code, stdout, err = invoke([*command, "--config", recorded])
    assert code == 2 and stdout == "", err
    assert err.startswith(f"fedvote: error: --config: {recorded}: privacy.ledger: the ledger recorded, rel.db "), err
    assert "is missing" in err and loaded == [] and os.listdir(tmp_path / "sub") == []


def test_compare_records_the_ledger_absolute_and_refuses_a_bad_one_before_loading(tmp_path, invoke, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(["compare", "--methods", "pate-fl", *COMPARE_TINY, "--ledger", "cmp.db", "--out", "cmp"])
    assert code == 0, err
    recorded = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert str(tmp_path / "cmp.db") in json.dumps(recorded) and '"cmp.db"' not in json.dumps(recorded)
    loaded = nothing_loaded(monkeypatch)
    code, stdout, err = invoke(["compare", "--methods", "pate-fl", *COMPARE_TINY, "--ledger", "/proc/x/l.db"])
    assert code == 2 and stdout == "" and err.startswith("fedvote: error: --ledger: "), err
    assert "/proc/x" in err and loaded == []
