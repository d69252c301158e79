"""``fedvote ledger show/verify/set-budget PATH``: a refusal of the file names PATH, as the help shows it.

These commands take the ledger as their positional PATH and have no ``--ledger``; the ledger
store names ``--ledger`` (right for run, compare, sweep and label). One line, exit 2, the
file left as it was.
"""

from __future__ import annotations

import sqlite3

import pytest

from fedvote.privacy.ledger import PersistentLedger

COMMANDS = (
    ["ledger", "show"],
    ["ledger", "show", "--json"],
    ["ledger", "verify"],
    ["ledger", "set-budget", "--federation", "f", "--epsilon", "1"],
)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("fedvote: error: Invalid value for 'PATH': "), lines[0]
    assert "--ledger" not in lines[0]
    return lines[0]


def _with_path(command: list[str], path: object) -> list[object]:
    return [*command[:2], path, *command[2:]]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_ledger_names_path(tmp_path, invoke, command):
    missing = tmp_path / "none.db"
    code, out, err = invoke(_with_path(command, missing))
    assert code == 2 and out == ""
    assert _one_line(err).endswith(f"no ledger at {missing}")
    assert not missing.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_a_ledger_names_path_and_what_to_give(tmp_path, invoke, command):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a ledger\n")
    code, out, err = invoke(_with_path(command, notes))
    assert code == 2 and out == ""
    line = _one_line(err)
    assert f"{notes} is not a fedvote ledger (not an SQLite database)" in line
    # these commands read an existing ledger: "give a new file name" is run's advice, not theirs
    assert line.endswith("give the path of a fedvote ledger") and "new file name" not in line
    assert notes.read_text() == "not a ledger\n"


def test_a_damaged_ledger_names_path_and_verify_still_says_what_reads(tmp_path, invoke):
    path = tmp_path / "ledger.db"
    PersistentLedger(path, "fed", budget_epsilon=50.0).close()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE filler (x BLOB)")
    db.executemany("INSERT INTO filler VALUES (?)", [(bytes(2000),)] * 20)
    db.commit()
    db.close()
    with path.open("r+b") as handle:
        handle.seek(4096)
        handle.write(bytes(range(256)) * 16)
    before = path.read_bytes()
    for command in (["ledger", "show"], ["ledger", "verify"]):
        code, out, err = invoke(_with_path(command, path))
        assert code == 2
        assert f"Invalid value for 'PATH': {path} is damaged" in _one_line(err)
    assert out.startswith("SQLite integrity_check: ")  # verify's report of what still reads
    assert path.read_bytes() == before


def test_other_refusals_keep_their_flags(tmp_path, invoke):
    path = tmp_path / "ledger.db"
    PersistentLedger(path, "fed", budget_epsilon=50.0).close()
    code, _, err = invoke(["ledger", "set-budget", path, "--federation", "other", "--epsilon", "1"])
    assert code == 2 and err.startswith("fedvote: error: --federation: no federation 'other'"), err
