"""Issues 42/47: the sources of a domain federation are compared with each other by content.

Sources were compared by name only (``Dataset.overlaps``): a byte copy of a source given as
a second source (``--dataset npz:a.npz,npz:b.npz``) dealt every record to two agents, one
person's record held by two agents, which agent-level accounting does not cover. Now the
records dealt from each source are compared by their features
(:func:`fedvote.data.public_pool_check.refuse_records_shared_by_sources`) before anything is
trained or charged, and the refusal is one line naming ``--dataset`` and the count. Records
repeated within one source are not compared: they are distinct rows of one load.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedvote.cli import main
from fedvote.data.container import Dataset
from fedvote.data.datasets import load_dataset
from fedvote.data.federation import build_domain_federation
from fedvote.data.public_pool_check import refuse_records_shared_by_sources
from fedvote.errors import ConfigError

AGENTS = 120  # digits records in the agents' file
TINY = ["--agents", "4", "--epochs", "1", "--teacher-model", "logistic", "--noise-seed", "1",
        "--sigma", "5", "--accountant", "exact"]
REFUSAL = re.compile(
    r"fedvote: error: --dataset: the sources (.+) and (.+) share ([\d,]+) records \(by content\); "
    r"one person's record would be dealt to two agents"
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Agents' npz, a byte copy under another name, a second distinct source and a target (all digits)."""
    digits = load_dataset("digits")
    x, y = digits.features, digits.labels
    np.savez(tmp_path / "a.npz", x=x[:AGENTS], y=y[:AGENTS])
    np.savez(tmp_path / "other.npz", x=x[AGENTS : 2 * AGENTS], y=y[AGENTS : 2 * AGENTS])
    np.savez(tmp_path / "target.npz", x=x[2 * AGENTS : 2 * AGENTS + 400], y=y[2 * AGENTS : 2 * AGENTS + 400])
    return {
        "a": tmp_path / "a.npz",
        "copy": Path(shutil.copyfile(tmp_path / "a.npz", tmp_path / "b.npz")),
        "other": tmp_path / "other.npz",
        "target": tmp_path / "target.npz",
    }


def npz(path: Path) -> Dataset:
    return load_dataset(f"npz:{path}")


def test_a_byte_copy_as_second_source_is_refused_by_build_domain_federation(files):
    with pytest.raises(ConfigError) as error:
        build_domain_federation([npz(files["a"]), npz(files["copy"])], npz(files["target"]), num_agents=4)
    assert error.value.argument == "dataset"
    # Every record of the copy (all dealt: no records_per_agent) is one of the first source's.
    assert f"share {AGENTS:,} records (by content)" in error.value.detail
    assert "\n" not in error.value.detail


def test_a_byte_copy_as_second_source_is_refused_when_sources_are_mixed(files):
    with pytest.raises(ConfigError) as error:
        build_domain_federation(
            [npz(files["a"]), npz(files["copy"])], npz(files["target"]), num_agents=4, mixing="mixed"
        )
    assert error.value.argument == "dataset"
    assert f"share {AGENTS:,} records" in error.value.detail


def test_a_byte_copy_as_second_source_exits_2_with_one_line(files, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ledger = tmp_path / "ledger.sqlite"
    args = ["run", "--dataset", f"npz:{files['a']},npz:{files['copy']}", "--target", f"npz:{files['target']}",
            *TINY, "--ledger", str(ledger), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    lines = err.strip().splitlines()
    errors = [line for line in lines if "error" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and errors[0] == lines[-1], err
    match = REFUSAL.match(errors[0])
    assert match is not None, err
    assert int(match.group(3).replace(",", "")) == AGENTS
    assert not ledger.exists() and not (tmp_path / "out" / "result.json").exists()  # nothing charged or written


def test_a_source_holding_some_of_anothers_records_is_refused_with_their_count(files, tmp_path):
    digits = load_dataset("digits")
    x, y = digits.features, digits.labels
    rows = np.r_[AGENTS : 2 * AGENTS - 7, 0:7]  # the other source with 7 of the first's records
    np.savez(tmp_path / "part.npz", x=x[rows], y=y[rows])
    with pytest.raises(ConfigError, match=r"share 7 records \(by content\)"):
        build_domain_federation([npz(files["a"]), npz(tmp_path / "part.npz")], npz(files["target"]), num_agents=4)


def test_two_distinct_sources_still_work(files, tmp_path, capsys):
    federation = build_domain_federation(
        [npz(files["a"]), npz(files["other"])], npz(files["target"]), num_agents=4
    )
    assert sum(len(agent) for agent in federation.agents) == 2 * AGENTS
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--dataset", f"npz:{files['a']},npz:{files['other']}", "--target",
              f"npz:{files['target']}", *TINY, "--json"])
        raise SystemExit(0)
    assert exit_info.value.code == 0, capsys.readouterr().err


def test_duplicates_within_one_source_are_not_refused(tmp_path, files):
    """One load's repeated rows are distinct records (people with equal features), whichever agents hold them."""
    digits = load_dataset("digits")
    x, y = digits.features, digits.labels
    rows = np.r_[0:AGENTS, 0:AGENTS]  # every record twice, dealt to different agents
    np.savez(tmp_path / "twice.npz", x=x[rows], y=y[rows])
    federation = build_domain_federation(
        [npz(tmp_path / "twice.npz"), npz(files["other"])], npz(files["target"]), num_agents=4
    )
    assert sum(len(agent) for agent in federation.agents) == 3 * AGENTS


def test_blank_records_are_left_aside():
    shape = (1, 4, 4)
    rng = np.random.default_rng(0)
    first, second = rng.random((5, *shape), dtype=np.float32), rng.random((5, *shape), dtype=np.float32)
    blank = np.zeros((2, *shape), dtype=np.float32)
    hashes = refuse_records_shared_by_sources(
        [("first", [np.concatenate([first, blank])]), ("second", [np.concatenate([second, blank])])]
    )
    assert hashes.size == 10  # the union of their non-blank records, for the public-pool check
    with pytest.raises(ConfigError, match=r"the sources first and third share 2 records"):
        refuse_records_shared_by_sources([("first", [first]), ("second", [second]), ("third", [first[:2]])])
    with pytest.raises(ConfigError, match=r"share 4 records \(by content: 2 between a and c, 2 between b and c\)"):
        refuse_records_shared_by_sources([("a", [first]), ("b", [second]), ("c", [first[:2], second[3:]])])
