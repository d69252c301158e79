"""A data directory that is a file is refused naming where the value came from.

``--data-dir`` defaults to ``$FEDVOTE_DATA``: a file given by the environment is refused
naming ``FEDVOTE_DATA`` (the user typed no ``--data-dir``), a typed one naming
``--data-dir``. One line, exit 2, nothing run. :func:`fedvote.settings.build_config` (the
Python API) refuses the same, naming ``FEDVOTE_DATA`` or ``data_dir``.
"""

from __future__ import annotations

import pytest

from fedvote.cli.options import flag_for
from fedvote.errors import ConfigError
from fedvote.settings import build_config


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "datasets.txt"
    path.write_text("not a directory\n")
    return path


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["run", "--dataset", "mnist"],
        ["compare", "--methods", "pate-fl,majority-vote"],
        ["sweep", "--grid", "epsilon=1", "--out", "never"],
        ["data", "list"],
    ],
)
def test_fedvote_data_naming_a_file_is_refused_naming_fedvote_data(a_file, monkeypatch, invoke, no_run, command,
                                                                    tmp_path):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDVOTE_DATA", str(a_file))
    code, out, err = invoke(command)
    assert code == 2 and out == "" and no_run == []
    assert _one_line(err) == (
        f"fedvote: error: FEDVOTE_DATA: {a_file} is a file, not a directory; set FEDVOTE_DATA to the "
        "directory holding the datasets (or unset it), or give --data-dir DIR"
    )
    assert "--data-dir:" not in err and not (tmp_path / "never").exists()


@pytest.mark.parametrize("command", [["run"], ["compare", "--methods", "pate-fl"], ["data", "list"]])
def test_data_dir_naming_a_file_is_refused_naming_the_flag(a_file, monkeypatch, invoke, no_run, command):
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)
    code, out, err = invoke([*command, "--data-dir", a_file])
    assert code == 2 and out == "" and no_run == []
    assert _one_line(err) == (
        f"fedvote: error: --data-dir: {a_file} is a file, not a directory; give the directory holding the datasets"
    )


def test_a_typed_data_dir_wins_over_fedvote_data(a_file, tmp_path, monkeypatch, invoke, no_run):
    monkeypatch.setenv("FEDVOTE_DATA", str(a_file))
    code, _, err = invoke(["run", "--data-dir", tmp_path, "--agents", "0"])
    assert code == 2 and _one_line(err) == "fedvote: error: --agents: must be at least 1, got 0"
    monkeypatch.setenv("FEDVOTE_DATA", str(tmp_path))
    code, _, err = invoke(["run", "--data-dir", a_file])
    assert code == 2 and _one_line(err).startswith("fedvote: error: --data-dir: ")


def test_a_missing_directory_still_passes_the_flag(tmp_path, monkeypatch, invoke):
    monkeypatch.setenv("FEDVOTE_DATA", str(tmp_path / "not-yet"))
    code, out, err = invoke(["data", "list", "--json"])
    assert code == 0, err
    assert str(tmp_path / "not-yet") in out


def test_build_config_names_fedvote_data_or_data_dir(a_file, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDVOTE_DATA", str(a_file))
    with pytest.raises(ConfigError) as error:
        build_config()
    assert error.value.argument == "FEDVOTE_DATA" and "is a file, not a directory" in error.value.detail
    assert build_config(data_dir=tmp_path).federation.data_dir == str(tmp_path)  # the keyword wins
    monkeypatch.delenv("FEDVOTE_DATA")
    with pytest.raises(ConfigError) as error:
        build_config(data_dir=a_file)
    assert error.value.argument == "data_dir"


def test_an_argument_in_capitals_is_printed_as_it_is():
    assert flag_for("FEDVOTE_DATA") == "FEDVOTE_DATA"
    assert flag_for("data_dir") == "--data-dir"


def test_a_data_dir_name_too_long_for_the_system_is_one_line(tmp_path, monkeypatch, invoke, no_run):
    # Found by tests/test_fuzz_boundaries.py: Path.exists() raised OSError (ENAMETOOLONG), a traceback.
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)
    long_name = tmp_path / ("n" * 300)
    code, out, err = invoke(["run", "--data-dir", long_name])
    assert code == 2 and out == "" and no_run == []
    assert _one_line(err) == (
        f"fedvote: error: --data-dir: {long_name} cannot be read as a directory (File name too long); "
        "give the directory holding the datasets"
    )


def test_a_dataset_missing_from_fedvote_data_names_fedvote_data(tmp_path, monkeypatch, invoke, no_run):
    # The directory the environment gave lacks MNIST: the refusal names the variable, not a flag not typed.
    monkeypatch.setenv("FEDVOTE_DATA", str(tmp_path))
    code, _, err = invoke(["run", "--dataset", "mnist", "--agents", "3"])
    assert code == 2 and _one_line(err.splitlines()[-1]).startswith(
        f"fedvote: error: FEDVOTE_DATA: mnist: train-images-idx3-ubyte.gz not found in {tmp_path}/mnist"
    )
    code, _, err = invoke(["run", "--dataset", "mnist", "--agents", "3", "--data-dir", tmp_path])
    assert code == 2 and err.splitlines()[-1].startswith("fedvote: error: --data-dir: mnist: ")


def test_a_bad_target_file_is_named_as_the_target(tmp_path, invoke, no_run):
    bad = tmp_path / "bad.npz"
    bad.write_text("not an archive\n")
    code, _, err = invoke(["run", "--dataset", "digits", "--target", f"npz:{bad}", "--agents", "3"])
    assert code == 2 and err.splitlines()[-1].startswith(f"fedvote: error: --target: {bad}: not a readable .npz")
    code, _, err = invoke(["run", "--dataset", "digits", "--target", f"npz:{tmp_path / 'gone.npz'}", "--agents", "3"])
    assert code == 2 and err.splitlines()[-1].startswith("fedvote: error: --target: npz file ")
