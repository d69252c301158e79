"""Issue 47, defect 2: a damaged ledger is one line naming the file, exit 2; never a traceback.

Bytes 4096–8191 (the second page: the records table) are overwritten. ``ledger show``,
``ledger verify`` and ``run --ledger`` ended in ``sqlite3.DatabaseError: database disk image
is malformed``. Now each says in one line that the file is damaged and exits 2, writing
nothing; ``verify`` first runs SQLite's integrity check and says what still reads.
"""

import pytest

from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import PersistentLedger

TINY = ["--agents", "5", "--queries", "10", "--epochs", "2", "--teacher-model", "logistic",
        "--student-model", "logistic", "--noise-seed", "1", "--sigma", "5", "--accountant", "exact"]


@pytest.fixture
def damaged(tmp_path):
    """A ledger with a budget and charges, its bytes 4096–8191 overwritten."""
    path = tmp_path / "ledger.db"
    with PersistentLedger(path, "fed", budget_epsilon=50.0) as ledger:
        for _ in range(3):
            ledger.charge(pate_fl_events(20.0, 40))
    with path.open("r+b") as handle:
        handle.seek(4096)
        handle.write(bytes(range(256)) * 16)
    return path


def one_damage_line(err: str, path, named: str = "--ledger") -> str:
    """The one refusal line; ``named`` is what it names: run's --ledger, or the ledger commands' PATH."""
    assert "Traceback" not in err and "DatabaseError" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"fedvote: error: {named}: {path} is damaged"), line
    return line


def test_ledger_show_on_a_damaged_ledger_is_one_line_exit_2(damaged, invoke):
    before = damaged.read_bytes()
    code, out, err = invoke(["ledger", "show", damaged])
    assert code == 2 and out == ""
    one_damage_line(err, damaged, "Invalid value for 'PATH'")
    assert damaged.read_bytes() == before  # left as it was


def test_ledger_verify_on_a_damaged_ledger_says_what_still_reads(damaged, invoke):
    before = damaged.read_bytes()
    code, out, err = invoke(["ledger", "verify", damaged])
    assert code == 2
    line = one_damage_line(err, damaged, "Invalid value for 'PATH'")
    assert "ledger verify" in line  # where to look next
    lines = out.splitlines()
    assert lines[0].startswith("SQLite integrity_check: ") and lines[0] != "SQLite integrity_check: ok"
    assert "table records: unreadable (database disk image is malformed)" in lines
    assert "table budgets: intact, 1 row(s) read" in lines
    assert any(x.startswith("federation fed: budgets read (agent), charges unreadable") for x in lines)
    assert damaged.read_bytes() == before


def test_run_with_a_damaged_ledger_is_one_line_exit_2_and_writes_nothing(damaged, tmp_path, invoke):
    before = damaged.read_bytes()
    out_dir = tmp_path / "out"
    code, _, err = invoke(["run", *TINY, "--ledger", damaged, "--out", out_dir])
    assert code == 2
    one_damage_line(err, damaged)
    assert not out_dir.exists()
    assert damaged.read_bytes() == before


def test_verify_of_an_intact_ledger_reports_the_integrity_check(tmp_path, invoke):
    path = tmp_path / "ledger.db"
    with PersistentLedger(path, "fed", budget_epsilon=50.0) as ledger:
        ledger.charge(pate_fl_events(20.0, 40))
    code, out, _ = invoke(["ledger", "verify", path])
    assert code == 0
    assert "SQLite integrity check ok; 1 federation(s), every spend within its budgets" in out
