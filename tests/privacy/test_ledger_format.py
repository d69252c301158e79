"""Issue 18, item 4: a ledger carries a format marker and version; anything else given as a
ledger is refused in one line and left byte for byte as it was."""

import sqlite3

import pytest

from fedvote.errors import ConfigError
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import (
    LEDGER_APPLICATION_ID,
    LEDGER_FORMAT_VERSION,
    PersistentLedger,
    ledger_report,
    verify_ledger,
)

TINY = ["--agents", "5", "--queries", "10", "--epochs", "2", "--teacher-model", "logistic",
        "--student-model", "logistic", "--noise-seed", "1", "--sigma", "5", "--accountant", "exact"]

# The schema of the ledgers fedvote wrote before the format marker (no application id,
# user_version 0): such a ledger is fedvote's own, and is accepted and marked.
UNMARKED_SCHEMA = """
CREATE TABLE records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, federation TEXT NOT NULL, run TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('charge', 'void')), target INTEGER REFERENCES records(id),
    agent_event TEXT, instance_event TEXT, agent_sensitivity REAL, instance_sensitivity REAL,
    created REAL NOT NULL
);
CREATE INDEX records_federation ON records (federation);
CREATE TABLE budgets (
    id INTEGER PRIMARY KEY AUTOINCREMENT, federation TEXT NOT NULL, epsilon REAL NOT NULL,
    delta REAL NOT NULL, level TEXT NOT NULL, accountant TEXT NOT NULL, created REAL NOT NULL
);
"""


RUN_PREFIX = "fedvote: error: --ledger: "
LEDGER_COMMAND_PREFIX = "fedvote: error: Invalid value for 'PATH': "  # `fedvote ledger ... PATH`


def one_error_line(err: str, prefix: str = RUN_PREFIX) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix) and "Traceback" not in err, lines[0]
    return lines[0]


def marker(path) -> tuple[int, int]:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


@pytest.fixture
def notes_db(tmp_path):
    """Someone else's SQLite database: a table `notes`."""
    path = tmp_path / "notes.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    db.execute("INSERT INTO notes (text) VALUES ('buy milk')")
    db.commit()
    db.close()
    return path


def test_a_new_ledger_carries_the_format_marker_and_version(tmp_path):
    path = tmp_path / "l.db"
    with PersistentLedger(path, federation="f") as ledger:
        ledger.charge(pate_fl_events(10.0, 5))
    assert marker(path) == (LEDGER_APPLICATION_ID, LEDGER_FORMAT_VERSION) == (0x46564C47, 2)
    with PersistentLedger(path, federation="f") as ledger:  # and opens again as it is
        assert len(ledger.history()) == 1


def test_someone_elses_sqlite_database_is_refused_and_left_byte_identical(notes_db, tmp_path, invoke):
    # Issue 18, item 4: `--ledger` pointed at someone else's SQLite database (a table `notes`).
    before = notes_db.read_bytes()
    code, out, err = invoke(["run", *TINY, "--ledger", notes_db, "--out", tmp_path / "out"])
    assert code == 2 and out == ""
    assert one_error_line(err) == (
        f"fedvote: error: --ledger: {notes_db} is an SQLite database but not a fedvote ledger "
        "(it holds table(s) notes); it was left as it is; give a new file name or an existing fedvote ledger"
    )
    assert notes_db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no journal, no result
    for command in (["ledger", "show", notes_db], ["ledger", "verify", notes_db],
                    ["ledger", "set-budget", notes_db, "--federation", "f", "--epsilon", "1"]):
        code, out, err = invoke(command)
        line = one_error_line(err, LEDGER_COMMAND_PREFIX)
        assert code == 2 and out == "" and "is an SQLite database but not a fedvote ledger" in line
        assert notes_db.read_bytes() == before
    with pytest.raises(ConfigError, match="not a fedvote ledger"):
        PersistentLedger(notes_db, federation="f")
    assert notes_db.read_bytes() == before


def test_a_text_file_as_ledger_is_refused_in_one_line(tmp_path, invoke):
    # Issue 18, items 3 and 4: `--ledger notes.txt` (a sqlite3.DatabaseError traceback before).
    notes = tmp_path / "notes.txt"
    notes.write_text("remember: epsilon is not a typo\n")
    before = notes.read_bytes()
    code, out, err = invoke(["run", *TINY, "--ledger", notes])
    assert code == 2 and out == ""
    assert one_error_line(err) == (
        f"fedvote: error: --ledger: {notes} is not a fedvote ledger (not an SQLite database); "
        "give a new file name or an existing fedvote ledger"
    )
    for command in (["ledger", "show", notes], ["ledger", "verify", notes]):
        code, _, err = invoke(command)
        assert code == 2 and "not an SQLite database" in one_error_line(err, LEDGER_COMMAND_PREFIX)
    assert notes.read_bytes() == before


def test_a_ledger_of_a_newer_format_is_refused_with_its_version_named(tmp_path, invoke):
    path = tmp_path / "l.db"
    PersistentLedger(path, federation="f").close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {LEDGER_FORMAT_VERSION + 1}")
    db.commit()
    db.close()
    before = path.read_bytes()
    code, _, err = invoke(["run", *TINY, "--ledger", path])
    assert code == 2
    assert one_error_line(err) == (
        f"fedvote: error: --ledger: {path} is a fedvote ledger of format version {LEDGER_FORMAT_VERSION + 1}, "
        f"newer than this fedvote reads (version {LEDGER_FORMAT_VERSION}); upgrade fedvote to use it"
    )
    code, _, err = invoke(["ledger", "show", path])
    assert code == 2 and f"format version {LEDGER_FORMAT_VERSION + 1}" in one_error_line(err, LEDGER_COMMAND_PREFIX)
    assert path.read_bytes() == before


def test_another_applications_database_is_refused_by_its_application_id(tmp_path):
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id = 1234")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="another application, id 0x000004d2"):
        PersistentLedger(path, federation="f")
    assert path.read_bytes() == before


def test_a_fedvote_ledger_from_before_the_marker_is_accepted_and_marked(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(UNMARKED_SCHEMA)
    db.execute(
        "INSERT INTO budgets (federation, epsilon, delta, level, accountant, created) "
        "VALUES ('f', 2.0, 0.001, 'agent', 'pld', 0.0)"
    )
    db.commit()
    db.close()
    assert marker(path) == (0, 0)
    assert verify_ledger(path) == []  # the audit reads it (and marks it)
    assert marker(path) == (LEDGER_APPLICATION_ID, LEDGER_FORMAT_VERSION)
    with PersistentLedger(path, federation="f") as ledger:
        assert ledger.budget_epsilon == 2.0  # its stored budget still binds
        ledger.charge(pate_fl_events(10.0, 5))
    assert [entry["federation"] for entry in ledger_report(path)] == ["f"]
    db = sqlite3.connect(path)  # and it is append-only like any new ledger
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM records")
    db.close()


def test_an_empty_file_becomes_a_new_ledger(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with PersistentLedger(path, federation="f") as ledger:
        assert ledger.history() == []
    assert marker(path) == (LEDGER_APPLICATION_ID, LEDGER_FORMAT_VERSION)
