"""A refusal of a flag's value names the flag the user typed.

``--student-epochs 0`` was refused as ``--epochs`` (TrainingConfig names its own field), and
an unknown ``--target`` as ``--dataset``; the Python API (:func:`fedvote.settings.build_config`)
names the keyword the same way. One line, exit 2, nothing run.
"""

from __future__ import annotations

import pytest

from fedvote.errors import ConfigError


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--student-epochs", "0"], "--student-epochs: must be at least 1, got 0"),
        (["--epochs", "0"], "--epochs: must be at least 1, got 0"),
        (["--epochs", "0", "--student-epochs", "2"], "--epochs: must be at least 1, got 0"),
        (["--target", "nope"], "--target: unknown dataset 'nope'"),
        (["--dataset", "nope"], "--dataset: unknown dataset 'nope'"),
        (["--dataset", "digits", "--target", "nope"], "--target: unknown dataset 'nope'"),
    ],
)
def test_a_flag_is_named_as_typed(invoke, no_run, flags, line):
    code, out, err = invoke(["run", *flags])
    assert code == 2 and out == "" and no_run == []
    assert _one_line(err).startswith(f"fedvote: error: {line}")


def test_build_config_names_the_student_settings():
    from fedvote.settings import build_config

    with pytest.raises(ConfigError) as error:
        build_config(student_epochs=0)
    assert error.value.argument == "student_epochs"
    with pytest.raises(ConfigError) as error:
        build_config(epochs=0)
    assert error.value.argument == "epochs"


def test_an_image_size_for_vectors_names_image_size(tmp_path, invoke, no_run):
    """``--image-size`` on a dataset of vectors was refused as ``--resize-to``, a flag no command has."""
    import numpy as np

    path = tmp_path / "vectors.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.normal(size=(200, 5)).astype(np.float32), y=rng.integers(0, 3, 200))
    code, out, err = invoke(["run", "--dataset", f"npz:{path}", "--image-size", "8", "--agents", "2"])
    assert code == 2 and out == ""
    line = _one_line(err)
    assert line == f"fedvote: error: --image-size: npz:{path} holds vectors of shape (5,), not images"
    assert "--resize-to" not in line
