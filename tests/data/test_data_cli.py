"""``fedvote data list``: availability, where fedvote looked, sizes; text and JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fedvote.cli.data import data


def _run(args, env=None):
    result = CliRunner().invoke(data, args, env=env or {"FEDVOTE_DATA": None})
    assert result.exit_code == 0, result.output
    return result.output


def test_list_on_the_samples_shows_counts_and_shapes(samples_dir):
    out = _run(["list", "--data-dir", str(samples_dir)])
    lines = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    assert "available" in lines["mnist"] and "train 500 x (1, 28, 28)" in lines["mnist"]
    assert "test 200 x (1, 28, 28)" in lines["mnist"]
    assert "train 500 x (1, 16, 16)" in lines["usps"] and "all 1797 x (1, 8, 8)" in lines["digits"]
    assert str(samples_dir / "mnist") in out and "npz:PATH" in out and "csv:PATH" in out


def test_list_json_reads_the_environment(samples_dir):
    payload = json.loads(_run(["list", "--json"], env={"FEDVOTE_DATA": str(samples_dir)}))
    assert payload["data_dir"] == str(samples_dir)
    by_name = {d["name"]: d for d in payload["datasets"]}
    assert by_name["usps"]["available"] and by_name["usps"]["splits"]["test"]["count"] == 200
    assert by_name["mnist"]["searched"] == [str(samples_dir / "mnist"), str(samples_dir)]
    assert len(by_name["mnist"]["splits"]["train"]["files"]) == 2
    assert by_name["digits"]["splits"]["all"]["shape"] == [1, 8, 8]


def test_list_reports_missing_and_corrupt_data_without_failing(tmp_path):
    (tmp_path / "usps").mkdir()
    (tmp_path / "usps" / "zip.train.gz").write_bytes(b"\x1f\x8bgarbage")
    payload = json.loads(_run(["list", "--json", "--data-dir", str(tmp_path)]))
    by_name = {d["name"]: d for d in payload["datasets"]}
    assert not by_name["mnist"]["available"] and "train-images-idx3-ubyte" in by_name["mnist"]["error"]
    assert not by_name["usps"]["available"] and "gzip" in by_name["usps"]["error"]
    assert by_name["digits"]["available"]
    text = _run(["list", "--data-dir", str(tmp_path)])
    assert "missing" in text and "yann.lecun.com" in text


def test_list_without_a_data_directory_says_how_to_give_one():
    out = _run(["list"])
    assert "give --data-dir DIR or set FEDVOTE_DATA" in out
    assert "digits  available" in out
