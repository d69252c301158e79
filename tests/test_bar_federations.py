"""experiments/bar_federations.py (issue 43): a ``--part`` measured into the saved record, with its provenance."""

from __future__ import annotations

import json
import sys

import pytest


@pytest.fixture(scope="module")
def bars(load_experiment):
    """The module the release scripts import (loading one puts experiments/ on the path and imports it)."""
    load_experiment("projected_votes")
    return sys.modules["bar_federations"]


def test_a_part_is_added_to_the_saved_record_with_when_where_and_how_long(bars, tmp_path, monkeypatch):
    (tmp_path / "data" / "cifar10").mkdir(parents=True)
    (tmp_path / "data" / "fashion-mnist").mkdir()
    monkeypatch.setenv("FEDVOTE_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(bars, "HERE", tmp_path)
    (tmp_path / "results").mkdir()
    path = tmp_path / "results" / "x.json"
    path.write_text(json.dumps({"parts": ["kept"]}))
    saved = {}
    monkeypatch.setattr(
        bars, "save_results", lambda name, record, text: saved.update(name=name, record=record, text=text)
    )
    monkeypatch.setattr(bars, "code_version", lambda: "commit abc1234-dirty")

    def measure_into(data_dir, record):  # noqa: ANN001, ANN202
        record["pools"] = [data_dir]

    bars.measure_part_into_saved("x", "pool", measure_into, lambda record: f"{len(record['pools'])} pool")
    record = saved["record"]
    assert saved["name"] == "x" and saved["text"] == "1 pool"
    assert record["parts"] == ["kept"] and record["pools"] == [str(tmp_path / "data")]
    assert record["parts_ran"]["pool"]["commit"] == "abc1234-dirty"
    line = bars.part_ran(record, "pool")
    assert (
        line.startswith("`--part pool`, ")
        and ", fedvote commit abc1234-dirty, " in line
        and line.endswith(" s")
    )
    assert bars.part_ran(record, "perfect") == ""
