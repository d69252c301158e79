"""The pool's documented class prior: which datasets declare one, how it reaches the vote-sum student.

CIFAR-10 and Fashion-MNIST are published with as many images of each class in every split
(their full files' counts are checked by ``tests/data``'s ``full_data`` tests), so a pool drawn
from them has uniform class shares, known before any record is read. The runner puts that
prior in the server's view, ``fedvote deploy split`` writes it in the server's file, and the
vote-sum student matches its predictions on the pool to it (post-processing). Small generated
Fashion-MNIST files stand in for the real ones.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data import idx_files
from fedvote.data.datasets import available_datasets, documents_balanced_classes
from fedvote.errors import ConfigError
from fedvote.flower.files import load_server_file, write_deployment_files
from fedvote.methods import voting
from fedvote.runner import build_config, make_federation, prepare_public, run


@pytest.fixture(autouse=True)
def _no_env_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)


def _write_fashion(folder: Path, n_train: int = 300, n_test: int = 200, seed: int = 0) -> None:
    """Gzipped IDX files under Fashion-MNIST's names: images whose mean brightness follows the class."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = np.clip(rng.normal(20.0 * labels[:, None, None], 30.0, size=(n, 28, 28)), 0, 255).astype(np.uint8)
        image_name, label_name = idx_files.IDX_FILES[split]
        (folder / f"{image_name}.gz").write_bytes(gzip.compress(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes()))
        (folder / f"{label_name}.gz").write_bytes(gzip.compress(struct.pack(">II", 0x801, n) + labels.tobytes()))


def _config(data_dir: Path | None, dataset: str = "fashion-mnist", **privacy: object) -> RunConfig:
    return RunConfig(
        method="pate-fl",
        federation=FederationConfig(
            dataset=dataset, data_dir=None if data_dir is None else str(data_dir), agents=3, input_features="none"
        ),
        privacy=PrivacyConfig(epsilon=4.0, noise_seed=1, **privacy),  # type: ignore[arg-type]
        seed=0,
    )


def test_only_datasets_published_balanced_document_a_prior() -> None:
    documented = {name for name in available_datasets() if documents_balanced_classes(name)}
    assert documented == {"cifar10", "fashion-mnist"}  # MNIST's and USPS's splits are not balanced
    assert not documents_balanced_classes("npz:/tmp/anything.npz")
    assert not documents_balanced_classes("no-such-dataset")


def test_a_fashion_pool_gets_the_uniform_prior_and_digits_none(tmp_path: Path) -> None:
    _write_fashion(tmp_path / "fashion-mnist")
    federation = make_federation(_config(tmp_path))
    assert federation.pool_class_prior == (0.1,) * 10
    assert prepare_public(_config(tmp_path), federation).server_data().pool_class_prior == (0.1,) * 10
    digits = make_federation(_config(None, dataset="digits"))  # one split: nothing documented of its pool
    assert digits.pool_class_prior is None and digits.server_data().pool_class_prior is None


def test_the_server_file_carries_the_prior_and_refuses_a_damaged_one(tmp_path: Path) -> None:
    _write_fashion(tmp_path / "data" / "fashion-mnist")
    out = tmp_path / "deploy"
    write_deployment_files(_config(tmp_path / "data"), out)
    assert load_server_file(out / "server.npz").server.pool_class_prior == (0.1,) * 10

    with np.load(out / "server.npz") as archive:
        arrays = {key: archive[key] for key in archive.files}
    older = {key: value for key, value in arrays.items() if key != "pool_class_prior"}
    np.savez(tmp_path / "older.npz", **older)  # a server file written before the prior existed
    assert load_server_file(tmp_path / "older.npz").server.pool_class_prior is None
    for damaged in (np.full(9, 1 / 9), np.full(10, 0.2), np.array([np.nan] * 10)):
        np.savez(tmp_path / "damaged.npz", **{**arrays, "pool_class_prior": damaged})
        with pytest.raises(ConfigError, match="pool_class_prior must be 10 shares summing to 1"):
            load_server_file(tmp_path / "damaged.npz")


def test_the_vote_sum_student_predicts_the_pool_in_the_prior_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: the run records the prior, and its student's argmax shares on the pool are uniform."""
    _write_fashion(tmp_path / "fashion-mnist")
    students: list[torch.nn.Module] = []
    fit_student = voting.vote_regression_student

    def kept(*args: object, **kwargs: object) -> torch.nn.Module:
        students.append(fit_student(*args, **kwargs))  # type: ignore[arg-type]
        return students[-1]

    monkeypatch.setattr(voting, "vote_regression_student", kept)
    settings = {"agents": 3, "sigma": 3.0, "teacher_model": "logistic", "epochs": 3, "seed": 0,
                "noise_seed": 1, "student_targets": "vote-sums", "input_features": "none"}  # fmt: skip
    config = build_config("pate-fl", dataset="fashion-mnist", data_dir=str(tmp_path), **settings)
    result = run(config)
    assert result.details["student_class_prior"] == [0.1] * 10
    pool = make_federation(config).public.features
    with torch.no_grad():
        predicted = students[-1](torch.as_tensor(pool)).argmax(dim=1).numpy()
    rows = len(predicted)
    np.testing.assert_allclose(np.bincount(predicted, minlength=10) / rows, 0.1, atol=3.0 / rows)
    digits = run(build_config("pate-fl", **{**settings, "input_features": "auto"}))
    assert digits.details["student_class_prior"] is None
