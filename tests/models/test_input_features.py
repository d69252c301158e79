"""fedvote.models.input_features: every record seen through a map fitted on the public pool alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fedvote
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models.input_features import fit_input_map, resolve_input_features, with_input_features


def _part(n: int, seed: int, shape=(3, 10, 10)) -> LabeledData:
    rng = np.random.default_rng(seed)
    return LabeledData(
        features=rng.uniform(size=(n, *shape)).astype(np.float32),
        labels=rng.integers(0, 3, size=n).astype(np.int64),
    )


def _federation(agent_seed: int = 1) -> Federation:
    return Federation(
        dataset_name="tiny",
        agents=(_part(12, agent_seed), _part(9, agent_seed + 10)),
        public=_part(30, 100),
        test=_part(7, 200),
        num_classes=3,
        example_shape=(3, 10, 10),
    )


@pytest.mark.parametrize(
    ("name", "dataset", "expected"),
    [
        ("auto", "cifar10", "patch"),
        ("auto", "CIFAR10", "patch"),
        ("auto", "digits", "none"),
        ("auto", "fashion-mnist", "patch"),
        ("auto", "mnist", "none"),
        ("auto", "usps", "none"),
        ("auto", "cifar10,mnist", "none"),  # a domain mix is not all photos
        ("none", "cifar10", "none"),
        ("patch", "digits", "patch"),
    ],
)
def test_auto_is_chosen_from_the_dataset_name_alone(name, dataset, expected):
    assert resolve_input_features(name, dataset) == expected


def test_every_method_sees_cifar10_through_the_patch_features_and_fashion_mnist_unless_it_fits_its_own_pca():
    """The runner resolves "auto" with the method's auto_patch_datasets: CIFAR-10 for every method,
    Fashion-MNIST for every method but those that fit their own PCA of the inputs."""
    from fedvote.methods import METHODS

    own_pca = {"private-knn-fl", "fedaux-fdp", "fedaux-f", "fedd-p", "fedavg-p"}
    for name, method in METHODS.items():
        photos = method.auto_patch_datasets
        assert resolve_input_features("auto", "cifar10", photos) == "patch", name
        expected = "none" if name in own_pca else "patch"
        assert resolve_input_features("auto", "fashion-mnist", photos) == expected, name
        assert resolve_input_features("auto", "mnist", photos) == "none", name
        assert resolve_input_features("patch", "fashion-mnist", photos) == "patch", name  # given: kept


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(ConfigError, match="input_features"):
        resolve_input_features("sift", "cifar10")


@pytest.mark.parametrize("pool", [np.zeros((6, 20), np.float32), np.zeros((6, 3, 4, 4), np.float32)])
def test_a_pool_patch_features_cannot_read_is_refused_naming_the_flag(pool):
    """Vectors, or images smaller than a patch: the refusal names --input-features, which asked for them."""
    with pytest.raises(ConfigError, match=r"^input_features: patch: ") as refused:
        fit_input_map("patch", pool, seed=0)
    assert refused.value.argument == "input_features"


def test_every_part_is_mapped_and_labels_kept():
    federation = _federation()
    seen = with_input_features(federation, "patch", seed=0)
    dim = seen.example_shape[0]
    assert seen.input_features == "patch" and len(seen.example_shape) == 1 and dim > 0
    for before, after in zip(
        (*federation.agents, federation.public, federation.test),
        (*seen.agents, seen.public, seen.test),
        strict=True,
    ):
        assert after.features.shape == (len(before), dim) and after.features.dtype == np.float32
        np.testing.assert_array_equal(after.labels, before.labels)
    assert seen.public_metadata().agent_records == federation.public_metadata().agent_records
    # standardised by the pool's own statistics (public): the pool has mean 0 and deviation ≤ 1
    np.testing.assert_allclose(seen.public.features.mean(axis=0), 0.0, atol=1e-4)
    assert seen.public.features.std(axis=0).max() <= 1.0 + 1e-4


def test_the_map_depends_on_the_public_pool_only():
    # Agents with other records: the pool and test set are mapped identically, so φ read no agent.
    a = with_input_features(_federation(agent_seed=1), "patch", seed=0)
    b = with_input_features(_federation(agent_seed=5), "patch", seed=0)
    np.testing.assert_array_equal(a.public.features, b.public.features)
    np.testing.assert_array_equal(a.test.features, b.test.features)
    assert not np.array_equal(a.agents[0].features, b.agents[0].features)
    # ... and another pool gives another map.
    other_pool = dataclasses.replace(_federation(agent_seed=1), public=_part(30, 101))
    c = with_input_features(other_pool, "patch", seed=0)
    assert not np.array_equal(a.test.features, c.test.features)


def test_none_and_a_second_call_change_nothing():
    federation = _federation()
    assert with_input_features(federation, "none", seed=0) is federation
    seen = with_input_features(federation, "patch", seed=0)
    assert with_input_features(seen, "patch", seed=0) is seen  # idempotent: not mapped twice
    assert with_input_features(federation, "patch", seed=0) is seen  # one federation, one fit


def test_a_run_on_patch_features_keeps_its_privacy_and_records_the_setting():
    settings = dict(
        agents=10, epsilon=4.0, queries=20, epochs=2, noise_seed=0, teacher_model="logistic",
        student_model="logistic", semi_supervised="supervised",
    )
    plain = fedvote.run("pate-fl", input_features="none", **settings)
    seen = fedvote.run("pate-fl", input_features="patch", **settings)
    # φ is public: the plan, σ and ε depend on public sizes only, not on what the records look like.
    assert seen.privacy.agent.epsilon == pytest.approx(plain.privacy.agent.epsilon, rel=1e-12)
    assert seen.config["federation"]["input_features"] == "patch"
    assert plain.config["federation"]["input_features"] == "none"
    assert 0.0 <= seen.accuracy <= 1.0
    assert "input_features_s" in seen.timings


def test_the_flag_is_refused_in_one_line_before_anything_runs():
    with pytest.raises(ConfigError, match="input_features"):
        fedvote.run("pate-fl", input_features="sift")


@pytest.mark.parametrize(("method", "expected"), [("pate-fl", "patch"), ("private-knn-fl", "none"), ("fedd-p", "none")])
def test_the_runner_resolves_auto_with_the_methods_datasets(method, expected, monkeypatch):
    """prepare_public hands with_input_features what the method's auto_patch_datasets make of the name."""
    from fedvote import runner
    from fedvote.settings import build_config

    kinds: list[str] = []
    monkeypatch.setattr(runner, "with_input_features", lambda federation, kind, **_: kinds.append(kind) or federation)
    config = build_config(method, dataset="fashion-mnist")
    federation = runner.make_federation(build_config(method))  # digits records; only the name is read
    runner.prepare_public(config, federation)
    assert kinds == [expected]
