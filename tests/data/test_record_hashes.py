"""Records are identified by their features' content (fedvote.data.record_hashes)."""

import numpy as np

from fedvote.data.record_hashes import overlap_count, record_hashes, shared_record_count, sorted_record_hashes


def test_same_features_same_hash_whatever_the_dtype_or_sign_of_zero() -> None:
    rng = np.random.default_rng(0)
    features = rng.random((20, 1, 4, 4)).astype(np.float32)
    assert np.array_equal(record_hashes(features), record_hashes(features.astype(np.float64)))
    assert np.array_equal(record_hashes(np.zeros((2, 3))), record_hashes(-np.zeros((2, 3))))
    assert np.unique(record_hashes(features)).size == 20


def test_a_changed_value_or_shape_gives_another_hash() -> None:
    features = np.zeros((2, 1, 2, 2), dtype=np.float32)
    changed = features.copy()
    changed[1, 0, 1, 1] = 1e-6
    assert record_hashes(features)[1] != record_hashes(changed)[1]
    assert record_hashes(features)[0] != record_hashes(features.reshape(2, 4))[0]


def test_shared_counts_count_each_shared_record() -> None:
    rng = np.random.default_rng(1)
    agents = rng.random((30, 5)).astype(np.float32)
    public = np.concatenate([agents[:7], rng.random((10, 5)).astype(np.float32), agents[:2]])
    stored = sorted_record_hashes(agents)
    assert shared_record_count(stored, public) == 9
    assert overlap_count(stored, sorted_record_hashes(public)) == 7
    assert shared_record_count(stored, public[:0]) == 0
