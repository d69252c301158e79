"""Multi-label PATE-FL and multi-label DP-FedAvg (fedvote.methods.multilabel_pate, multilabel_dp_fedavg)."""

from __future__ import annotations

import numpy as np
import pytest

import fedvote
from fedvote.agents.agent import Agent
from fedvote.agents.multilabel_votes import MultiHotOutput
from fedvote.config import RunConfig
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError, VoteRejected
from fedvote.methods.multilabel_pate import pseudo_targets, threshold_votes
from fedvote.runner import make_federation, plan, run
from fedvote.transport.capabilities import check_capabilities
from fedvote.transport.local import LocalTransport
from fedvote.transport.reused_votes import ReusedVotesTransport

SMALL = {
    "federation": {"dataset": "multidigit", "agents": 20},
    "teacher": {"model": "mlp", "epochs": 10},
    "student": {"model": "mlp", "epochs": 20},
}


def _config(method: str, **settings) -> RunConfig:
    return RunConfig.from_dict({"method": method, **SMALL, **settings})


def _majority_baseline(labels: np.ndarray, task: AttributeTask) -> float:
    """Mean attribute accuracy of predicting each attribute's more common value on the test set itself."""
    rates = task.targets(labels).mean(axis=0)
    return float(np.mean(np.maximum(rates, 1.0 - rates)))


def test_pate_fl_multilabel_learns_the_attributes_well_above_the_majority_baseline():
    config = _config("pate-fl-multilabel", queries=200, privacy={"sigma": 4.0, "noise_seed": 1})
    federation = make_federation(config)
    task = AttributeTask.of(federation.attribute_names, federation.num_classes)
    baseline = _majority_baseline(federation.test.labels, task)
    result = run(config, federation=federation)
    assert 0.70 < baseline < 0.77
    assert result.accuracy > baseline + 0.08, (result.accuracy, baseline)
    per_attribute = result.details["attribute_accuracy"]
    assert set(per_attribute) == set(task.attribute_names)
    assert np.mean(list(per_attribute.values())) == pytest.approx(result.accuracy)
    assert result.details["accuracy_metric"] == "mean attribute accuracy"
    assert result.label_accuracy is not None and result.label_accuracy > baseline
    assert result.details["tau"] == 4 and result.queries == 200
    assert result.communication["upload_floats"] == 20 * 200 * 10  # N agents x Q queries x A attributes


def test_pate_fl_multilabel_runs_on_a_single_label_dataset_as_one_hot_attributes():
    config = RunConfig.from_dict({
        "method": "pate-fl-multilabel",
        "federation": {"dataset": "digits", "agents": 10},
        "teacher": {"model": "mlp", "epochs": 40},
        "student": {"model": "mlp", "epochs": 40},
        "queries": 100,
        "privacy": {"sigma": 1.0, "noise_seed": 0},
    })
    result = run(config)
    assert result.details["attribute_encoding"] == "one-hot" and result.details["tau"] == 1
    assert result.privacy.agent.sensitivity == 1.0  # τ = 1: PATE-FL's one-hot bound
    assert result.accuracy > 0.5  # plain accuracy of the student's argmax over the 10 classes


def test_dp_fedavg_multilabel_trains_a_model_of_a_logits_with_bce_and_learns():
    config = _config(
        "dp-fedavg-multilabel",
        gradient={
            "rounds": 20, "sampling_rate": 1.0, "local_steps": 20, "model": "mlp", "clip_norm": 100.0,
            "learning_rate": 1.0,
        },  # fmt: skip
        options={"noise": "server"},
        privacy={"sigma": 0.0},
    )
    federation = make_federation(config)
    task = AttributeTask.of(federation.attribute_names, federation.num_classes)
    result = run(config, federation=federation)
    assert result.accuracy > _majority_baseline(federation.test.labels, task) + 0.05
    assert result.details["model_floats"] == 256 * 128 + 128 + 128 * 10 + 10  # A = 10 outputs
    assert result.details["attribute_encoding"] == "bitmask"


def test_local_transport_serves_the_multilabel_methods_and_the_reused_votes_transport_refuses():
    for method in ("pate-fl-multilabel", "dp-fedavg-multilabel"):
        config = _config(method, queries=20, privacy={"sigma": 5.0})
        federation = make_federation(config)
        planned = plan(config, federation.public_metadata())
        local = LocalTransport(federation)
        check_capabilities(planned, local)  # served
        with pytest.raises(ConfigError, match="multi-label") as error:
            check_capabilities(planned, ReusedVotesTransport(local))
        assert error.value.argument == "method"


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"tau": 0}, "tau"),
        ({"tau": -3}, "tau"),
        ({"tau": 2.5}, "tau"),
        ({"tau": True}, "tau"),
        ({"vote_threshold": 1.0}, "vote_threshold"),
        ({"vote_threshold": -0.1}, "vote_threshold"),
        ({"vote_threshold": float("nan")}, "vote_threshold"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_them(options, argument):
    with pytest.raises(ConfigError) as error:
        run(_config("pate-fl-multilabel", queries=20, options=options, privacy={"sigma": 5.0}))
    assert error.value.argument == argument
    assert "\n" not in str(error.value)


def test_secure_noise_is_refused_for_both_methods():
    for method in ("pate-fl-multilabel", "dp-fedavg-multilabel"):
        with pytest.raises(ConfigError) as error:
            fedvote.run(method, dataset="multidigit", agents=5, sigma=5.0, secure_noise=True)
        assert error.value.argument == "secure_noise"


def test_pseudo_labels_are_noisy_counts_above_the_threshold_fraction_of_voters():
    sums = np.array([[10.1, 9.9, 0.0], [20.0, 10.0, -3.0]])
    np.testing.assert_array_equal(threshold_votes(sums, 20, 0.5), [[1, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(threshold_votes(sums, 20, 0.25), [[1, 1, 0], [1, 1, 0]])


@pytest.mark.parametrize(
    ("vote", "fault"),
    [
        (np.array([[1.0, 1.0, 1.0, 0.0]]), "sums to"),  # 3 ones > τ = 2
        (np.array([[2.0, 0.0, 0.0, 0.0]]), "other than 0 and 1"),  # within the row bound, not binary
        (np.array([[0.5, 0.5, 0.5, 0.5]]), "other than 0 and 1"),
        (np.array([[1.0, 0.0, 0.0]]), "shape"),
    ],
)
def test_the_exit_rejects_a_vote_that_is_not_tau_clipped(vote, fault):
    agent = Agent(
        agent_id=7,
        data=LabeledData(np.zeros((1, 1), np.float32), np.zeros(1, np.int64)),
        public_features=np.zeros((1, 1), np.float32),
        num_classes=16,
        noise_rng=np.random.default_rng(0),
        seed=0,
    )
    with pytest.raises(VoteRejected, match=fault) as error:
        agent.release(vote, 0.0, MultiHotOutput(num_queries=1, bound=2.0, width=4))
    assert error.value.agent_id == 7


def test_single_label_tasks_take_the_noisy_argmax_and_multi_label_tasks_the_threshold() -> None:
    # Weak one-hot teachers: no class reaches half of the 20 voters, yet each query has
    # exactly one true class, so the target is the noisy argmax (PATE's label).
    sums = np.array([[3.2, 7.9, 1.0], [6.0, -0.5, 2.2]])
    np.testing.assert_array_equal(pseudo_targets(sums, 20, 0.5, "one-hot"), [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(pseudo_targets(sums, 20, 0.25, "bitmask"), threshold_votes(sums, 20, 0.25))
    np.testing.assert_array_equal(pseudo_targets(sums, 20, 0.5, "bitmask"), np.zeros((2, 3)))
