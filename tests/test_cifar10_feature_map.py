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


def test_the_rows_are_the_four_refinements_the_defaults_row_and_two_larger_maps(feature_map):
    options = [PatchSettings(**row[1]) for row in feature_map.VARIANTS]
    refinements = options[: feature_map.DEFAULTS_ROW + 1]
    assert {(o.mirror_symmetric, o.square_root) for o in refinements} == {(a, b) for a in (0, 1) for b in (0, 1)}
    assert options[feature_map.DEFAULTS_ROW] == PatchSettings() and options[0].dim() == 2 * PatchSettings().dim()
    larger = options[feature_map.DEFAULTS_ROW + 1 :]
    assert [o.dim() for o in larger] == [2 * PatchSettings().dim(), 9 * PatchSettings().dim() // 4]
    assert all(o.mirror_symmetric and o.square_root for o in larger)


def test_the_section_compares_the_larger_maps_with_the_defaults_row(feature_map):
    def row(what, dim, true_labels, clean, noisy, seconds):
        return {"what": what, "dim": dim, "sigma": 45.0, "true_labels": true_labels, "clean": clean,
                "noisy": noisy, "map_seconds": seconds}  # fmt: skip

    rows = [row(f"refinement {i}", 1600, 0.6, 0.6, [0.5, 0.5], 100.0) for i in range(3)]
    rows += [row("defaults", 1600, 0.64, 0.63, [0.54, 0.56], 50.0), row("wide", 3200, 0.66, 0.63, [0.55, 0.55], 100.0)]
    record = {"date": "d", "machine": "m", "wall_seconds": 1.0, "draws": 2, "rows": rows}
    text = feature_map.section(record)
    assert "0.550 at agent ε 4 against the defaults' 0.550" in text  # the defaults row, not the last
    assert "true labels 0.640 → up to 0.660" in text and "(+0.0 points)" in text
