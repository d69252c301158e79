"""One atomic writer (``write_atomic``) and one non-finite → None helper (``finite_or_none``)."""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from fedvote.compare import Comparison, write_comparison
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.models.training import TrainingConfig
from fedvote.results import finite_or_none, write_atomic
from fedvote.sweep import parse_grid, run_sweep, write_sweep

SMALL = ["--agents", "10", "--queries", "40", "--epochs", "5", "--teacher-model", "logistic",
         "--student-model", "logistic", "--noise-seed", "1"]
TINY = RunConfig(
    federation=FederationConfig(agents=10),
    privacy=PrivacyConfig(noise_seed=0),
    teacher=TrainingConfig(model="logistic", epochs=5),
    student=TrainingConfig(model="logistic", epochs=5),
    queries=40,
    self_training_rounds=0,
)


@pytest.fixture
def umask():
    """Set the process umask for one test (``umask(0o077)``); the old one is restored after."""
    previous = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(previous)


@pytest.fixture
def replaced(monkeypatch):
    """Every ``os.replace`` of the test: target path → the temporary file's name."""
    calls: dict[Path, str] = {}
    real = os.replace

    def spy(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        calls[Path(dst).resolve()] = Path(src).name

    monkeypatch.setattr(os, "replace", spy)
    return calls


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def assert_written_by_write_atomic(directory: Path, replaced: dict[Path, str], file_mode: int) -> list[str]:
    """Every file under ``directory`` was renamed into place from write_atomic's temporary, with ``file_mode``."""
    found = files_under(directory)
    assert found, f"nothing written under {directory}"
    for path in found:
        temporary = replaced.get(path.resolve())
        assert temporary is not None, f"{path} was not renamed into place"
        assert re.fullmatch(rf"\.{re.escape(path.name)}\.[0-9a-f]+\.tmp", temporary), (path, temporary)
        assert mode(path) == file_mode, f"{path}: {oct(mode(path))} != {oct(file_mode)}"
    return [p.relative_to(directory).as_posix() for p in found]


# --- write_atomic ------------------------------------------------------------------------------


def test_text_and_bytes_are_written_and_no_temporary_is_left(tmp_path):
    text = tmp_path / "a.json"
    assert write_atomic(text, '{"ε": 1}\n') == text
    assert text.read_text(encoding="utf-8") == '{"ε": 1}\n'
    blob = tmp_path / "b.bin"
    payload = bytes(range(256))
    assert write_atomic(blob, payload) == blob
    assert blob.read_bytes() == payload
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.bin"]


def test_an_existing_file_is_replaced(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old, and longer than the new text")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_npz_bytes_round_trip(tmp_path):
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x=np.arange(5))
    target = write_atomic(tmp_path / "analysis.npz", buffer.getvalue())
    with np.load(target) as data:
        np.testing.assert_array_equal(data["x"], np.arange(5))


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_failure_mid_write_leaves_no_temporary_and_the_old_file(tmp_path, monkeypatch, failing):
    target = tmp_path / "sweep.json"
    target.write_text("old")

    def boom(*args, **kwargs):
        raise OSError(f"{failing} failed")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError, match=f"{failing} failed"):
        write_atomic(target, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.json"]
    assert target.read_text() == "old"


def test_an_interrupt_mid_write_leaves_no_temporary(tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "report.html", b"<html></html>")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o027, 0o640), (0o002, 0o664)])
def test_the_mode_is_what_the_umask_gives_a_new_file(tmp_path, umask, mask, expected):
    umask(mask)
    assert mode(write_atomic(tmp_path / "new.json", "{}")) == expected
    existing = tmp_path / "existing.json"
    existing.write_text("{}")
    existing.chmod(0o600 if expected != 0o600 else 0o644)
    assert mode(write_atomic(existing, "{}")) == expected  # the new file's mode, not the old file's


# --- finite_or_none ------------------------------------------------------------------------------


def test_finite_or_none_on_nested_structures():
    value = {
        "a": math.inf,
        "b": [1.0, math.nan, (2.5, -math.inf)],
        "c": {"d": float("nan"), "e": "inf", "f": 3, "g": None, "h": True, "i": {"j": [np.float64(np.inf)]}},
        "k": (),
    }
    assert finite_or_none(value) == {
        "a": None,
        "b": [1.0, None, [2.5, None]],
        "c": {"d": None, "e": "inf", "f": 3, "g": None, "h": True, "i": {"j": [None]}},
        "k": [],
    }
    json.dumps(finite_or_none(value), allow_nan=False)  # standard JSON


@pytest.mark.parametrize(
    ("value", "expected"),
    [(math.inf, None), (-math.inf, None), (math.nan, None), (0.5, 0.5), (np.float64(2.0), 2.0), (7, 7),
     ("x", "x"), (None, None)],
)
def test_finite_or_none_on_scalars(value, expected):
    assert finite_or_none(value) == expected


def test_finite_or_none_leaves_the_input_alone():
    value = {"a": [math.inf]}
    finite_or_none(value)
    assert value["a"][0] == math.inf


# --- every fedvote writer goes through write_atomic -------------------------------------------------


def test_run_and_report_write_every_file_atomically_with_the_umask_mode(tmp_path, invoke, umask, replaced):
    umask(0o027)  # 0o640: neither mkstemp's 0o600 nor a fixed 0o644
    expected = 0o640
    out = tmp_path / "run"
    code, _, err = invoke(["run", *SMALL, "--epsilon", "4", "--delta", "1e-3", "--out", str(out)])
    assert code == 0, err
    written = assert_written_by_write_atomic(out, replaced, expected)
    assert {"result.json", "analysis.npz"} <= set(written)
    code, _, err = invoke(["report", str(out)])
    assert code == 0, err
    written = assert_written_by_write_atomic(out, replaced, expected)
    assert "report.html" in written and any(name.startswith("plots/") for name in written)


def test_sweep_files_are_written_atomically(tmp_path, umask, replaced):
    umask(0o027)
    result = run_sweep([TINY], parse_grid("sigma=4"), seeds=[0])
    write_sweep(result, tmp_path)
    assert assert_written_by_write_atomic(tmp_path, replaced, 0o640) == ["sweep.csv", "sweep.json"]


def test_compare_json_is_written_atomically(tmp_path, umask, replaced):
    umask(0o027)
    write_comparison(Comparison(rows=[], total_epsilon={"agent": None}), TINY, epsilon=1.0, delta=1e-3,
                     out_dir=tmp_path)
    assert assert_written_by_write_atomic(tmp_path, replaced, 0o640) == ["compare.json"]


def test_flower_deployment_files_are_written_atomically(tmp_path, umask, replaced):
    from fedvote.flower.app import write_app_project
    from fedvote.flower.files import write_deployment_files

    umask(0o027)
    config = RunConfig(federation=FederationConfig(dataset="digits", agents=3), privacy=PrivacyConfig(sigma=1.0))
    write_deployment_files(config, tmp_path / "files")
    written = assert_written_by_write_atomic(tmp_path / "files", replaced, 0o640)
    assert written == ["agent-0.npz", "agent-1.npz", "agent-2.npz", "run.json", "server.npz"]
    write_app_project(tmp_path / "app")
    assert assert_written_by_write_atomic(tmp_path / "app", replaced, 0o640) == ["pyproject.toml"]
