"""What a run records for its report: result.json's data-dependent ε (or why none) and analysis.npz."""

import json

import numpy as np
import pytest

from fedvote.analysis import (
    DIAGNOSTIC_TEST_SAMPLE,
    RunAnalysis,
    diagnostic_test_indices,
    diagnostic_test_sample,
)
from fedvote.data.federation import LabeledData, build_federation
from fedvote.data.partition import PartitionSpec
from fedvote.models.training import TrainingConfig
from fedvote.privacy.data_dependent import NOT_APPLICABLE_SUMS
from fedvote.results import LevelPrivacy, PrivacyReport, RunResult, write_result
from fedvote.runner import build_config, run
from fedvote.transport.local import LocalTransport


def test_a_run_that_releases_sums_records_why_it_has_no_data_dependent_epsilon(voting_run):
    # PATE-FL's default release is the noisy vote sums: the data-dependent analysis (an
    # argmax-only bound) does not apply, and result.json says so at both levels.
    result = json.loads((voting_run / "result.json").read_text())
    assert result["release"] == "sums"
    for level in ("agent", "instance"):
        entry = result["privacy"][level]
        assert "data_dependent_epsilon" not in entry and "data_dependent_accountant" not in entry
        assert entry["data_dependent_label"] == NOT_APPLICABLE_SUMS


def test_voting_run_writes_the_analysis_arrays(voting_run):
    result = json.loads((voting_run / "result.json").read_text())
    analysis = RunAnalysis.load(voting_run / "analysis.npz")
    n, q = result["agents"], result["queries"]
    assert analysis.class_counts.shape == (n, 10)
    assert analysis.class_counts.sum(axis=1).tolist() == result["agent_records"]
    assert analysis.teacher_accuracies.shape == (n,)
    assert analysis.teacher_accuracies.mean() == pytest.approx(result["diagnostics"]["teacher_accuracy"])
    # digits' test set is smaller than the diagnostic sample: the teachers are scored on all of it
    assert result["test_size"] < DIAGNOSTIC_TEST_SAMPLE
    assert result["diagnostics"]["teacher_accuracy_test_points"] == result["test_size"]
    assert int(analysis.teacher_accuracy_test_points) == result["test_size"]
    assert analysis.vote_histograms.shape == (q, 10)
    np.testing.assert_array_equal(analysis.vote_histograms.sum(axis=1), n)  # one one-hot vote per agent
    assert analysis.query_indices.shape == analysis.pseudo_labels.shape == analysis.true_labels.shape == (q,)
    assert np.mean(analysis.pseudo_labels == analysis.true_labels) == pytest.approx(result["label_accuracy"])


def test_the_diagnostic_sample_is_at_most_1000_points_seeded_and_the_whole_set_when_smaller():
    assert DIAGNOSTIC_TEST_SAMPLE == 1000
    indices = diagnostic_test_indices(7000, seed=0)
    assert indices.shape == (1000,) and indices.dtype == np.int64
    assert np.all(np.diff(indices) > 0) and indices[0] >= 0 and indices[-1] < 7000  # distinct, sorted, in range
    np.testing.assert_array_equal(indices, diagnostic_test_indices(7000, seed=0))  # deterministic
    assert not np.array_equal(indices, diagnostic_test_indices(7000, seed=1))
    for size in (0, 1, 999, 1000):  # the whole set, in order
        np.testing.assert_array_equal(diagnostic_test_indices(size, seed=3), np.arange(size))
    assert diagnostic_test_indices(1001, seed=3).shape == (1000,)
    small = LabeledData(features=np.zeros((600, 2), np.float32), labels=np.zeros(600, np.int64))
    assert diagnostic_test_sample(small, seed=0) is small
    features = np.arange(7000, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)  # (7000, 3)
    sample = diagnostic_test_sample(LabeledData(features=features, labels=np.arange(7000) % 10), seed=0)
    assert len(sample) == 1000
    np.testing.assert_array_equal(sample.features[:, 0], indices)
    np.testing.assert_array_equal(sample.labels, indices % 10)
    with pytest.raises(ValueError, match="limit"):
        diagnostic_test_indices(10, seed=0, limit=0)


def test_the_diagnostic_sample_is_uniform():
    # Without replacement, the mean of n of the indices 0..T-1 has mean (T-1)/2 and variance
    # (T²-1)/12 / n · (T-n)/(T-1); over 20 seeds, each within 4 standard deviations
    # (a false alarm has probability below 20 x 7e-5), and their z-scores average near 0.
    t, n = 7000, 1000
    sd = np.sqrt((t**2 - 1) / 12 / n * (t - n) / (t - 1))
    z = np.array([(diagnostic_test_indices(t, seed).mean() - (t - 1) / 2) / sd for seed in range(20)])
    assert np.all(np.abs(z) < 4)
    assert abs(z.mean()) < 4 / np.sqrt(20)
    # and every tenth of the range holds about n/10 points: binomial-like, sd ≤ √(n/10)
    counts = np.bincount(diagnostic_test_indices(t, seed=0) * 10 // t, minlength=10)
    assert np.all(np.abs(counts - n / 10) < 4 * np.sqrt(n / 10))


def test_a_run_scores_its_teachers_on_the_seeded_sample_and_says_so(digits):
    # digits with 60% held out for testing: more test points than the sample
    config = build_config("pate-fl", agents=5, queries=20, epochs=2, teacher_model="logistic",
                          student_model="logistic", sigma=2.0, noise_seed=1, seed=4)
    federation = build_federation(digits, num_agents=5, partition=PartitionSpec("iid"),
                                  public_fraction=0.15, test_fraction=0.6, seed=4)
    test = federation.test
    assert len(test) > DIAGNOSTIC_TEST_SAMPLE
    transport = LocalTransport(federation, seed=config.seed, noise_seed=1)
    result = run(config, federation=federation, transport=transport)
    assert result.diagnostics["teacher_accuracy_test_points"] == DIAGNOSTIC_TEST_SAMPLE
    assert result.to_dict()["test_size"] == len(test)
    assert int(result.analysis.teacher_accuracy_test_points) == DIAGNOSTIC_TEST_SAMPLE
    indices = diagnostic_test_indices(len(test), config.seed)  # the sample the run seed names
    on_sample = transport.teacher_accuracies(LabeledData(test.features[indices], test.labels[indices]))
    np.testing.assert_array_equal(result.analysis.teacher_accuracies, on_sample)
    assert result.diagnostics["teacher_accuracy"] == pytest.approx(on_sample.mean())
    # the student's accuracy stays on the whole test set: a multiple of 1/len(test) (1078),
    # which an accuracy on 1,000 points, a multiple of 1/1000, is only at 0, 0.5 or 1
    assert len(test) == 1078 and result.accuracy not in (0.0, 0.5, 1.0)
    assert result.accuracy * len(test) == pytest.approx(round(result.accuracy * len(test)), abs=1e-6)


@pytest.mark.slow  # a 100-round gradient run: make test-slow (CI)
def test_gradient_run_records_only_the_partition(gradient_run):
    result = json.loads((gradient_run / "result.json").read_text())
    analysis = RunAnalysis.load(gradient_run / "analysis.npz")
    assert analysis.class_counts.shape[0] == result["agents"]
    assert analysis.vote_histograms is None and analysis.teacher_accuracies is None
    assert "data_dependent_epsilon" not in result["privacy"]["agent"]


@pytest.mark.parametrize("batched", [True, False])
def test_clean_histograms_are_the_sum_of_the_agents_votes_and_draw_no_noise(small_federation, batched):
    config = TrainingConfig(model="logistic", epochs=2)
    transport = LocalTransport(small_federation, seed=0, noise_seed=3, batched=batched)
    transport.train_teachers(config)
    queries = np.arange(12)
    clean = transport.clean_vote_histograms(queries)
    assert clean.shape == (12, small_federation.num_classes)
    np.testing.assert_array_equal(clean.sum(axis=1), small_federation.num_agents)
    reference = LocalTransport(small_federation, seed=0, noise_seed=3, batched=batched)
    reference.train_teachers(config)
    # asking for clean votes is no release: the noise drawn afterwards is unchanged
    noisy = transport.vote_sum(queries, 1.0, 1).sums
    np.testing.assert_allclose(noisy, reference.vote_sum(queries, 1.0, 1).sums)
    assert transport.communication.as_dict() == reference.communication.as_dict()
    # noise std 0: the noisy sum is the clean one
    np.testing.assert_allclose(transport.vote_sum(queries, 0.0, 1).sums, clean)


def test_analysis_round_trips_without_pickles_and_stays_out_of_result_json(tmp_path):
    analysis = RunAnalysis(class_counts=np.array([[1, 2], [3, 0]]), teacher_accuracies=np.array([0.5, 0.75]))
    level = LevelPrivacy(epsilon=1.0, sensitivity=1.0, adjacency="zero-out")
    result = RunResult(
        method="pate-fl", dataset="digits", agents=2, seed=0, accuracy=0.5, label_accuracy=None,
        queries=0, sigma=1.0,
        privacy=PrivacyReport(private=True, delta=1e-3, accountant="pld", agent=level, instance=level,
                              noise_source="os-entropy"),
        communication={}, timings={}, config={}, analysis=analysis,
    )
    assert "analysis" not in result.to_dict() and "data_dependent_epsilon" not in result.to_dict()["privacy"]["agent"]
    write_result(result, tmp_path)
    loaded = RunAnalysis.load(tmp_path / "analysis.npz")
    np.testing.assert_array_equal(loaded.class_counts, analysis.class_counts)
    np.testing.assert_array_equal(loaded.teacher_accuracies, analysis.teacher_accuracies)
    assert loaded.vote_histograms is None


def test_analysis_file_names_its_private_diagnostics(voting_run):
    with np.load(voting_run / "analysis.npz", allow_pickle=False) as data:
        assert str(data["diagnostics_note"]) == "simulation diagnostic — not private; a deployment never releases it"
        assert set(data["diagnostics"].tolist()) == {"class_counts", "teacher_accuracies", "vote_histograms"}
    RunAnalysis.load(voting_run / "analysis.npz")  # the labels do not disturb reading it back
