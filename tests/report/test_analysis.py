"""What a run records for its report: result.json's data-dependent ε (or why none) and analysis.npz."""

import json

import numpy as np
import pytest

from fedvote.analysis import RunAnalysis
from fedvote.models.training import TrainingConfig
from fedvote.privacy.data_dependent import NOT_APPLICABLE_SUMS
from fedvote.results import LevelPrivacy, PrivacyReport, RunResult, write_result
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
    assert analysis.vote_histograms.shape == (q, 10)
    np.testing.assert_array_equal(analysis.vote_histograms.sum(axis=1), n)  # one one-hot vote per agent
    assert analysis.query_indices.shape == analysis.pseudo_labels.shape == analysis.true_labels.shape == (q,)
    assert np.mean(analysis.pseudo_labels == analysis.true_labels) == pytest.approx(result["label_accuracy"])


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
