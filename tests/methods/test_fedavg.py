import numpy as np
import pytest
from dp_accounting import dp_event

from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.dp_fedavg import DpFedAvgOptions
from fedvote.methods.fedavg import FedAvg, FedAvgOptions
from fedvote.methods.gradient import weighted_mean_update
from fedvote.models.local_training import LocalTraining, LocalUpdates, flat_parameters
from fedvote.models.training import predict_labels
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


def test_registered_and_built_from_config():
    assert METHODS["fedavg"] is FedAvg
    config = RunConfig(method="fedavg", options={"rounds": 7, "sampling_rate": 0.5, "local_steps": 3})
    method = FedAvg.from_config(config, sigma=1.0, queries=1, min_responders=1)
    assert (method.rounds, method.sampling_rate, method.local_steps, method.sigma) == (7, 0.5, 3, 0.0)
    assert RunConfig.from_dict(config.to_dict()) == config


def test_options_are_validated():
    with pytest.raises(ConfigError):
        FedAvgOptions(sampling_rate=0.0)
    with pytest.raises(ConfigError):
        DpFedAvgOptions(noise="nowhere")
    with pytest.raises(ConfigError):
        FedAvg(rounds=0)
    with pytest.raises(ConfigError, match="is not an option of method 'fedavg'"):  # not FedAvg's: refused
        FedAvg.from_config(RunConfig(method="fedavg", options={"noise": "server"}), sigma=1.0, queries=1,
                           min_responders=1)


def test_events_are_non_private():
    events = FedAvg(rounds=5).planned_events()
    assert isinstance(events.agent, dp_event.NonPrivateDpEvent)
    assert isinstance(events.instance, dp_event.NonPrivateDpEvent)
    assert FedAvg.calibration_level is None


def test_weighted_mean_weights_by_records():
    updates = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    received = LocalUpdates(agent_ids=np.array([0, 1]), updates=updates, records=np.array([3, 1]))
    np.testing.assert_allclose(weighted_mean_update(received), [0.75, 0.25])
    empty = LocalUpdates(agent_ids=np.zeros(0, int), updates=np.zeros((0, 2), np.float32), records=np.zeros(0, int))
    np.testing.assert_array_equal(weighted_mean_update(empty), [0.0, 0.0])


def test_short_run_learns_and_counts_communication(small_federation):
    method = FedAvg(rounds=25, sampling_rate=0.5, local_steps=10, learning_rate=0.2, noise_seed=1)
    transport = LocalTransport(small_federation, seed=0, noise_seed=1)
    ledger = PrivacyLedger()
    outcome = method.run(small_federation.server_data(), transport, ledger)
    accuracy = np.mean(predict_labels(outcome.student, small_federation.test.features) == small_federation.test.labels)
    assert accuracy > 0.6  # chance is 0.1
    d = outcome.details["model_floats"]
    assert d == flat_parameters(method.initial_model(small_federation.server_data())).shape[0]
    comm = transport.communication
    assert comm.rounds == 25
    sent = round(outcome.details["mean_sampled_agents"] * 25)
    assert comm.upload_floats == comm.download_floats == d * sent
    assert outcome.query_indices.shape == (0,) and outcome.pseudo_labels.shape == (0,)
    assert len(ledger.charges) == 25


def test_empty_round_still_counts(small_federation):
    transport = LocalTransport(small_federation, seed=0, noise_seed=1)
    received = transport.local_updates(
        np.zeros(650, np.float32), np.zeros(0, np.int64), LocalTraining(model="logistic", steps=1, learning_rate=0.1)
    )
    assert received.updates.shape == (0, 650)
    assert transport.communication.rounds == 1 and transport.communication.upload_floats == 0
