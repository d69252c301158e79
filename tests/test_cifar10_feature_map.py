"""experiments/cifar10_feature_map.py (issue 43): its versions of φ, and that its mapping is the runner's."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.data.federation import Federation, LabeledData
from fedvote.models.input_features import with_input_features
from fedvote.models.patch_features import PatchSettings


@pytest.fixture(scope="module")
def feature_map(load_experiment):
    return load_experiment("cifar10_feature_map")


def _part(n: int, seed: int) -> LabeledData:
    rng = np.random.default_rng(seed)
    return LabeledData(
        features=rng.uniform(size=(n, 3, 10, 10)).astype(np.float32), labels=rng.integers(0, 3, size=n)
    )


def test_the_defaults_row_maps_the_federation_as_a_run_does(feature_map):
    """The script's φ at the default settings = the runner's ``--input-features patch`` (same pool, seed)."""
    federation = Federation(
        dataset_name="tiny",
        agents=(_part(12, 1), _part(9, 2)),
        public=_part(30, 100),
        test=_part(7, 200),
        num_classes=3,
        example_shape=(3, 10, 10),
    )
    assert feature_map.SEED == 0
    runners_patches = PatchSettings(patches=40 * 30)  # the runner's count for a 30-image pool
    ours = feature_map.seen_through(federation, runners_patches)
    theirs = with_input_features(federation, "patch", seed=feature_map.SEED)
    assert ours.example_shape == theirs.example_shape == (PatchSettings().dim(),)
    pairs = zip(
        (ours.public, ours.test, *ours.agents), (theirs.public, theirs.test, *theirs.agents), strict=True
    )
    for mine, runners in pairs:
        np.testing.assert_allclose(mine.features, runners.features, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(mine.labels, runners.labels)


def test_the_rows_are_the_four_versions_and_the_last_is_the_default(feature_map):
    options = [PatchSettings(**row[1]) for row in feature_map.VARIANTS]
    assert {(o.mirror_symmetric, o.square_root) for o in options} == {(a, b) for a in (0, 1) for b in (0, 1)}
    assert options[-1] == PatchSettings() and options[0].dim() == 2 * PatchSettings().dim()
