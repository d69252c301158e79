import numpy as np
import pytest

from fedvote.aggregation.voting import one_hot_votes
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.methods.pate_fl import PateFL
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import run
from fedvote.transport.base import Transport, VoteSum

FAST = TrainingConfig(model="logistic", epochs=15, learning_rate=0.05)


class OracleTransport(Transport):
    """Agents that vote with fixed labels; records every call the method makes."""

    def __init__(self, labels, num_agents=5, num_classes=10, responders=None):
        super().__init__()
        self._labels = labels
        self._n = num_agents
        self._c = num_classes
        self._responders = num_agents if responders is None else responders
        self.calls = []

    @property
    def num_agents(self):
        return self._n

    def train_teachers(self, config, progress=None):
        self.calls.append("train")

    def vote_sum(self, query_indices, noise_std, min_responders):
        self.calls.append(("vote", query_indices.copy(), noise_std))
        if self._responders < min_responders:
            return None
        return VoteSum(self._responders * one_hot_votes(self._labels[query_indices], self._c), self._responders)

    def teacher_accuracies(self, test):
        return np.ones(self._n)


def make_method(sigma=0.0, queries=40, t=5, **kwargs):
    return PateFL(sigma=sigma, queries=queries, min_responders=t, teacher=FAST, student=FAST, **kwargs)


def test_method_acts_only_through_the_transport(small_federation):
    pool_labels = small_federation.public.labels
    transport = OracleTransport(pool_labels)
    ledger = PrivacyLedger()
    outcome = make_method(sigma=0.0, query_batch_size=15).run(small_federation.server_data(), transport, ledger)
    assert transport.calls[0] == "train"
    votes = [c for c in transport.calls[1:]]
    assert [v[1].shape[0] for v in votes] == [15, 15, 10]  # batched rounds
    assert np.array_equal(np.concatenate([v[1] for v in votes]), outcome.query_indices)
    assert np.unique(outcome.query_indices).shape[0] == 40
    # noiseless oracle votes: the pseudo-labels are the true labels
    assert np.array_equal(outcome.pseudo_labels, pool_labels[outcome.query_indices])


def test_each_agent_adds_sigma_over_root_t(small_federation):
    transport = OracleTransport(small_federation.public.labels, num_agents=5)
    make_method(sigma=10.0, t=4).run(small_federation.server_data(), transport, PrivacyLedger())
    assert transport.calls[1][2] == pytest.approx(10.0 / 2.0)


def test_every_released_batch_is_charged_and_only_those(small_federation):
    ledger = PrivacyLedger()
    transport = OracleTransport(small_federation.public.labels)
    make_method(sigma=12.0, queries=40, query_batch_size=15).run(small_federation.server_data(), transport, ledger)
    assert epsilon_for(ledger.event("agent"), 1e-3) == pytest.approx(
        epsilon_for(pate_fl_events(12.0, 40).agent, 1e-3)
    )


def test_batches_below_the_threshold_are_neither_released_nor_charged(small_federation):
    transport = OracleTransport(small_federation.public.labels, num_agents=5, responders=3)
    ledger = PrivacyLedger()
    with pytest.raises(RuntimeError, match="minimum number of responders"):
        make_method(sigma=5.0, t=5).run(small_federation.server_data(), transport, ledger)
    assert ledger.charges == ()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"sigma": -1.0}, "sigma"), ({"queries": 0}, "queries"), ({"t": 0}, "min_responders")],
)
def test_bad_parameters_name_the_argument(kwargs, argument):
    with pytest.raises(ConfigError) as error:
        make_method(**kwargs)
    assert error.value.argument == argument


def test_more_queries_than_the_pool_is_refused(small_federation):
    with pytest.raises(ConfigError) as error:
        make_method(queries=10_000).run(small_federation.server_data(), OracleTransport(small_federation.public.labels), PrivacyLedger())
    assert error.value.argument == "queries"


def small_config(**privacy):
    return RunConfig(
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(noise_seed=5, **privacy),
        teacher=FAST,
        student=FAST,
        queries=60,
    )


def test_runs_are_deterministic_under_seed_and_noise_seed():
    first, second = run(small_config(sigma=4.0)), run(small_config(sigma=4.0))
    assert first.accuracy == second.accuracy
    assert first.label_accuracy == second.label_accuracy
    assert first.privacy == second.privacy


def test_end_to_end_run_reports_both_levels_and_learns():
    result = run(small_config(epsilon=8.0))
    assert result.privacy.private
    assert 0 < result.privacy.agent.epsilon <= 8.0
    assert result.privacy.instance.epsilon > result.privacy.agent.epsilon
    assert result.privacy.agent.sensitivity == 1.0
    assert result.queries == 60
    # 10 classes: chance is 0.1; logistic teachers on ~125 records do far better
    assert result.label_accuracy > 0.5 and result.accuracy > 0.5
    assert result.communication == {"upload_floats": 10 * 60 * 10, "download_floats": 10 * 60, "rounds": 1}
