"""The public pool and the test set never hold an agent's private records.

The server queries the pool and trains on it, and the test set is scored in the open, so
a record of an agent found in either would be used without the noise the reported ε
accounts for. A target that is one of the sources is refused by dataset identity (name
and split) before anything is loaded; every federation ``make_federation`` builds is
checked by content (a hash of each record's bytes and label).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import fedvote.runner as runner
from fedvote.cli import main
from fedvote.config import FederationConfig, RunConfig
from fedvote.data import datasets
from fedvote.data.datasets import Dataset, load_dataset
from fedvote.data.federation import Federation, LabeledData, build_domain_federation
from fedvote.errors import ConfigError

SAMPLES = Path(__file__).resolve().parent / "samples"


def record_hashes(part: LabeledData) -> set[bytes]:
    """One SHA-256 per record of its feature bytes (float32, C order) and its label."""
    features = np.ascontiguousarray(part.features, dtype=np.float32).reshape(len(part), -1)
    return {
        hashlib.sha256(row.tobytes() + int(label).to_bytes(8, "little")).digest()
        for row, label in zip(features, part.labels, strict=True)
    }


def shared_records(federation: Federation) -> int:
    """How many public-pool and test records equal some agent's record."""
    private: set[bytes] = set()
    for agent in federation.agents:
        private |= record_hashes(agent)
    return len((record_hashes(federation.public) | record_hashes(federation.test)) & private)


def write_npz(path: Path, *, with_test: bool, seed: int = 0) -> Path:
    """A small labelled .npz (distinct rows), with an official test part when asked."""
    rng = np.random.default_rng(seed)
    arrays = {"x": rng.random((120, 6)).astype(np.float32), "y": np.arange(120) % 3}
    if with_test:
        arrays |= {"x_test": rng.random((40, 6)).astype(np.float32), "y_test": np.arange(40) % 3}
    np.savez(path, **arrays)
    return path


def config(dataset: str, target: str | None = None, data_dir: Path | str | None = SAMPLES) -> RunConfig:
    """A run on 5 agents of ``dataset`` (pool and test from ``target`` when given)."""
    directory = str(data_dir) if data_dir else None
    return RunConfig(federation=FederationConfig(dataset=dataset, target=target, data_dir=directory, agents=5))


def scenarios(tmp_path: Path) -> dict[str, RunConfig]:
    """Every way ``make_federation`` builds a federation, on data a fresh clone has."""
    plain = write_npz(tmp_path / "plain.npz", with_test=False)
    split = write_npz(tmp_path / "split.npz", with_test=True, seed=1)
    return {
        "digits alone": config("digits", data_dir=None),
        "mnist with its official test split": config("mnist"),
        "usps with its official test split": config("usps"),
        "mnist to usps": config("mnist", "usps"),
        "usps to mnist": config("usps", "mnist"),
        "mnist and digits to usps": config("mnist,digits", "usps"),
        "npz alone": config(f"npz:{plain}"),
        "npz with a test part to another npz": config(f"npz:{split}", f"npz:{plain}"),
        # The ones a user could get wrong: each is refused, or holds no agent record.
        "digits to digits": config("digits", "digits", data_dir=None),
        "mnist and usps to usps": config("mnist,usps", "usps"),
        "usps to USPS": config("usps", " USPS "),
        "npz to itself by another path": config(f"npz:{plain}", f"npz:{tmp_path}/./plain.npz"),
    }


SCENARIOS = [
    "digits alone", "mnist with its official test split", "usps with its official test split",
    "mnist to usps", "usps to mnist", "mnist and digits to usps", "npz alone",
    "npz with a test part to another npz", "digits to digits", "mnist and usps to usps",
    "usps to USPS", "npz to itself by another path",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_public_pool_never_holds_agent_records(scenario, tmp_path):
    run_config = scenarios(tmp_path)[scenario]
    try:
        federation = runner.make_federation(run_config)
    except ConfigError as error:  # refused: nothing was built, nothing can leak
        assert error.argument == "target", error
        return
    assert federation.num_agents == 5 and len(federation.public) and len(federation.test)
    assert shared_records(federation) == 0


@pytest.mark.full_data
@pytest.mark.parametrize(
    ("dataset", "target"), [("mnist", None), ("usps", None), ("mnist", "usps"), ("usps", "mnist")]
)
def test_public_pool_never_holds_agent_records_on_the_full_datasets(dataset, target, full_data_dir):
    federation = runner.make_federation(config(dataset, target, data_dir=full_data_dir))
    assert shared_records(federation) == 0


@pytest.mark.parametrize(
    ("dataset", "target"),
    [
        ("digits", "digits"),
        ("mnist,usps", "usps"),
        ("usps, mnist", "usps"),
        ("digits", " Digits "),
        ("MNIST,usps", "mnist"),
    ],
)
def test_target_equal_to_a_source_is_refused_by_name(dataset, target, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("loaded data before refusing the target")

    monkeypatch.setattr(runner, "load_splits", never)
    monkeypatch.setattr(runner, "load_dataset", never)
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(dataset, target))
    assert error.value.argument == "target"
    assert "\n" not in error.value.detail


def test_target_equal_to_a_source_by_another_path_is_refused(tmp_path, monkeypatch):
    write_npz(tmp_path / "a.npz", with_test=False)
    monkeypatch.chdir(tmp_path)
    key = datasets.dataset_key("npz:a.npz")
    assert key == datasets.dataset_key(f"npz:{tmp_path}/sub/../a.npz") == datasets.dataset_key(" npz:./a.npz")
    assert datasets.dataset_key("npz:a.npz", tmp_path) == datasets.dataset_key(f"npz:{tmp_path / 'a.npz'}")
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config("npz:a.npz", "npz:./a.npz", data_dir=None))
    assert error.value.argument == "target"


def test_a_source_named_twice_is_refused(monkeypatch):
    monkeypatch.setattr(runner, "load_splits", lambda *a, **k: pytest.fail("loaded data"))
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config("mnist, MNIST", "usps"))
    assert error.value.argument == "dataset"


def test_run_with_the_target_among_the_sources_exits_2_with_one_line_naming_target(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--dataset", "digits", "--target", "digits", "--queries", "5"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedvote: error: --target: ")
    assert captured.out == ""


def test_separately_loaded_copies_of_the_target_are_refused_as_sources():
    # Two loads are two objects: identity of objects must not decide, identity of data must.
    target, again = load_dataset("usps", SAMPLES), load_dataset("usps", SAMPLES)
    everything = load_dataset("usps", SAMPLES, split="all")
    target_test = load_dataset("usps", SAMPLES, split="test")
    mnist = load_dataset("mnist", SAMPLES)
    cases = [
        ([again], None),  # the target's training part, loaded again
        ([mnist, again], target_test),  # among other sources
        ([everything], None),  # both official parts hold the target's
        ([mnist, load_dataset("usps", SAMPLES, split="test")], target_test),  # the test set's
    ]
    for sources, test in cases:
        with pytest.raises(ConfigError) as error:
            build_domain_federation(sources, target, target_test=test, num_agents=4)
        assert error.value.argument == "target"


def test_a_source_given_twice_to_build_domain_federation_is_refused():
    mnist, target = load_dataset("mnist", SAMPLES), load_dataset("usps", SAMPLES)
    with pytest.raises(ConfigError) as error:
        build_domain_federation([mnist, load_dataset("mnist", SAMPLES)], target, num_agents=4)
    assert error.value.argument == "dataset"


def test_one_dataset_split_into_train_and_test_parts_is_allowed():
    train, test = load_dataset("mnist", SAMPLES), load_dataset("mnist", SAMPLES, split="test")
    assert (train.split, test.split) == ("train", "test") and not train.overlaps(test)
    assert train.subset(np.arange(3)).split == "train" and test.resized((16, 16)).split == "test"
    federation = build_domain_federation([train], test, num_agents=4, test_fraction=0.5)
    assert shared_records(federation) == 0


def test_dataset_identity_ignores_case_and_spaces_of_registered_names():
    assert datasets.dataset_key(" MNIST ") == datasets.dataset_key("mnist") != datasets.dataset_key("usps")
    blobs = Dataset("blobs", np.zeros((2, 2), np.float32), np.zeros(2, np.int64), ("0",))
    assert blobs.overlaps(Dataset("Blobs", np.ones((2, 2), np.float32), np.zeros(2, np.int64), ("0",)))
