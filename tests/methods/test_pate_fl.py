import dataclasses
import math

import numpy as np
import pytest

from fedvote.aggregation.voting import confident_gnmax_step, one_hot_votes
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import voting
from fedvote.methods.pate_fl import PateFL, PateFLOptions
from fedvote.models.student import train_student
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.data_dependent import confident_gnmax_epsilon, threshold_log_probabilities
from fedvote.privacy.events import confident_gnmax_events, pate_fl_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import run
from fedvote.transport.base import ReleasedLabels, Transport, VoteSum
from fedvote.transport.capabilities import LabelRelease, TeacherVotes
from fedvote.transport.local import LocalTransport

FAST = TrainingConfig(model="logistic", epochs=15, learning_rate=0.05)


class OracleTransport(Transport, TeacherVotes):
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

    def record_counts(self):
        return np.full(self._n, 100)

    def train_teachers(self, config, progress=None):
        self.calls.append("train")

    def vote_sum(self, query_indices, noise_std, min_responders):
        self.calls.append(("vote", query_indices.copy(), noise_std))
        if self._responders < min_responders:
            return None
        return VoteSum(self._responders * one_hot_votes(self._labels[query_indices], self._c), self._responders)


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


@pytest.mark.slow  # the contract suite checks determinism of every method in make test
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


# --- label release: Confident-GNMax (Papernot et al. 2018, Algorithm 1) ---------------------


class LabelOracleTransport(OracleTransport, LabelRelease):
    """Oracle teachers behind an aggregator that lets out only pass bits and labels.

    ``vote_sum`` refuses: a label-release run must never receive a noisy sum.
    """

    def __init__(self, labels, num_agents=5, num_classes=10, seed=0):
        super().__init__(labels, num_agents, num_classes)
        self._rng = np.random.default_rng(seed)
        self.released = []

    def vote_sum(self, query_indices, noise_std, min_responders):
        raise AssertionError("label release asked for the noisy sums")

    def confident_labels(self, query_indices, *, threshold, threshold_noise_std, noise_std, min_responders):
        self.calls.append(("labels", query_indices.copy(), threshold, threshold_noise_std, noise_std))
        clean = self._n * one_hot_votes(self._labels[query_indices], self._c)  # (Q, C)
        total_std = np.sqrt(self._n) * np.array([threshold_noise_std, noise_std])
        answered, labels = confident_gnmax_step(
            clean + self._rng.normal(0, total_std[0], clean.shape),
            clean + self._rng.normal(0, total_std[1], clean.shape),
            threshold,
        )
        released = ReleasedLabels(answered=answered, labels=labels, responders=self._n)
        self.released.append(released)
        return released


def label_method(sigma=2.0, queries=40, t=5, query_batch_size=1000, **release):
    options = PateFLOptions(release="labels", **release)
    return make_method(sigma=sigma, queries=queries, t=t, query_batch_size=query_batch_size, release_options=options)


def test_label_release_student_sees_only_the_labels_of_answered_queries(small_federation, monkeypatch):
    pool_labels = small_federation.public.labels
    transport = LabelOracleTransport(pool_labels, num_agents=5)
    seen = {}

    def spy_train_student(features, labels, **kwargs):
        seen["features"], seen["labels"] = features.copy(), labels.copy()
        seen["unlabeled"] = kwargs["unlabeled"].shape[0]
        return train_student(features, labels, **kwargs)

    monkeypatch.setattr(voting, "train_student", spy_train_student)
    server = small_federation.server_data()
    # σ₁ = 3 on 5 agreeing votes, T = 4.9: some queries fail the check, most pass
    outcome = label_method(sigma=1.0, query_batch_size=15, threshold=4.9, threshold_sigma=3.0).run(
        server, transport, PrivacyLedger()
    )
    checked = np.concatenate([call[1] for call in transport.calls[1:]])
    answered = np.concatenate([r.answered for r in transport.released])
    released_labels = np.concatenate([r.labels for r in transport.released])
    assert 0 < answered.sum() < checked.shape[0]
    np.testing.assert_array_equal(outcome.query_indices, checked[answered])
    np.testing.assert_array_equal(outcome.pseudo_labels, released_labels)
    np.testing.assert_array_equal(seen["labels"], released_labels)  # the student: answered labels only
    np.testing.assert_array_equal(seen["features"], server.public_features[checked[answered]])
    assert seen["unlabeled"] == server.public_features.shape[0] - answered.sum()
    record = outcome.details["confident_gnmax"]
    assert outcome.details["release"] == "labels"
    assert record["checked_query_indices"] == checked.tolist() and record["answered"] == answered.tolist()
    assert outcome.details["student_queries"] == record["queries_answered"] == int(answered.sum())
    # what an aggregator lets out: bits, labels, a count — no field could hold a sum
    assert {f.name for f in dataclasses.fields(ReleasedLabels)} == {"answered", "labels", "responders"}


def test_local_transport_releases_labels_without_handing_out_a_sum(small_federation, monkeypatch):
    transport = LocalTransport(small_federation, seed=0, noise_seed=1)

    def refuse(*args, **kwargs):
        raise AssertionError("label release asked for the noisy sums")

    monkeypatch.setattr(transport, "vote_sum", refuse)
    outcome = label_method(sigma=2.0, queries=30).run(small_federation.server_data(), transport, PrivacyLedger())
    assert outcome.details["release"] == "labels"
    assert outcome.pseudo_labels.shape == outcome.query_indices.shape
    # one round: two (Q, C) noisy copies up from each agent, the Q indices down
    assert transport.communication.as_dict() == {"upload_floats": 10 * 2 * 30 * 10, "download_floats": 10 * 30,
                                                 "rounds": 1}


def test_label_release_charges_the_check_and_the_argmax_on_every_query(small_federation):
    ledger = PrivacyLedger()
    method = label_method(sigma=6.0, queries=40, query_batch_size=15, threshold_sigma=15.0)
    method.run(small_federation.server_data(), LabelOracleTransport(small_federation.public.labels), ledger)
    # Every query pays the check and the argmax; the run once pays the smooth-sensitivity
    # release of its data-dependent ε (issue 42, defect 3), planned and charged like any release.
    from fedvote.privacy.smooth_sensitivity import with_release

    assert ledger.charges[-1] == method.release_charge()
    expected = with_release(confident_gnmax_events(6.0, 15.0, 40), method.release_charge())
    for level in ("agent", "instance"):
        assert epsilon_for(ledger.event(level), 1e-3, "exact") == pytest.approx(
            epsilon_for(expected.at(level), 1e-3, "exact"), rel=1e-12
        )
        assert epsilon_for(method.planned_events().at(level), 1e-3, "exact") == pytest.approx(
            epsilon_for(expected.at(level), 1e-3, "exact"), rel=1e-12
        )
    # each agent adds σ/√t to each copy; σ₁ defaults to 2σ and T to 0.6·N
    transport = LabelOracleTransport(small_federation.public.labels, num_agents=5)
    label_method(sigma=6.0, t=4).run(small_federation.server_data(), transport, PrivacyLedger())
    _, _, threshold, check_share, argmax_share = transport.calls[1]
    assert (threshold, check_share, argmax_share) == pytest.approx((3.0, 12.0 / 2.0, 6.0 / 2.0))


def test_threshold_sets_the_pass_rate_as_the_exact_probability_says(small_federation):
    transport = LocalTransport(small_federation, seed=0, noise_seed=2)
    transport.train_teachers(FAST)
    queries = np.arange(200)
    clean = transport.clean_vote_histograms(queries)  # (200, C): 10 agents' votes
    sigma1, agents = 4.0, small_federation.num_agents
    for threshold in (0.0, 6.0, 9.0, agents + 8 * sigma1):
        released = transport.confident_labels(
            queries, threshold=threshold, threshold_noise_std=sigma1 / np.sqrt(agents), noise_std=1.0,
            min_responders=agents,
        )
        log_pass, _ = threshold_log_probabilities(clean, threshold, sigma1)  # the noise actually added: σ₁
        expected = np.exp(log_pass)
        spread = 5.0 * np.sqrt(np.sum(expected * (1 - expected))) + 1.0  # 5 sd of a sum of Bernoullis
        assert abs(released.answered.sum() - expected.sum()) <= spread
        assert released.labels.shape == (released.answered.sum(),)
        if threshold == 0.0:
            assert released.answered.mean() > 0.99  # T = 0 answers (nearly) everything
        if threshold > agents:
            assert not released.answered.any()


def test_label_release_options_name_the_argument():
    for values, argument in (
        ({"release": "argmax"}, "release"),
        ({"threshold": 3.0}, "threshold"),  # sums release has no threshold
        ({"release": "labels", "threshold_sigma": -1.0}, "threshold_sigma"),
        ({"release": "labels", "threshold": math.inf}, "threshold"),
    ):
        with pytest.raises(ConfigError) as error:
            PateFLOptions(**values)
        assert error.value.argument == argument
    config = RunConfig(options={"release": "labels", "threshold": 7.0, "threshold_sigma": 9.0})
    method = PateFL.from_config(config, sigma=3.0, queries=10, min_responders=5)
    assert method.release_options == PateFLOptions(release="labels", threshold=7.0, threshold_sigma=9.0)
    assert method.threshold_sigma == 9.0 and method.threshold_for(50) == 7.0
    assert PateFL.options_type is PateFLOptions


def label_config(**privacy):
    return RunConfig(
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(noise_seed=5, **privacy),
        teacher=FAST,
        student=FAST,
        queries=60,
        options={"release": "labels"},
    )


def test_end_to_end_label_release_reports_its_data_dependent_epsilon_with_the_noise_actually_added():
    # t = 4 of 10 agents: each adds σ²/4, so the sums carry σ·√(10/4), not the accounted σ
    from fedvote.privacy.events import compose_events
    from fedvote.privacy.smooth_sensitivity import RELEASED_LABEL, plan_release, release_events

    result = run(label_config(epsilon=8.0, min_responders=4))
    record = result.details["confident_gnmax"]
    assert result.details["release"] == "labels" and result.queries == record["queries_answered"]
    assert result.details["queries_checked"] == record["queries_checked"] == 60
    assert result.details["queries_answered"] == record["queries_answered"]
    assert record["responders"] == [10] * record["queries_checked"]
    # The headline holds the queries and the smooth-sensitivity release of the data-dependent ε.
    plans = {
        level: plan_release(sigma=result.sigma, threshold_sigma=2 * result.sigma, queries=60, delta=1e-3,
                            sensitivity=s)
        for level, s in (("agent", 1.0), ("instance", math.sqrt(2.0)))
    }
    assert record["smooth_sensitivity"] == {level: plan.to_dict() for level, plan in plans.items()}
    expected_events = confident_gnmax_events(result.sigma, 2 * result.sigma, record["queries_checked"])
    charge = release_events(plans["agent"], plans["instance"])
    total = compose_events([expected_events.agent, charge.agent])
    assert result.privacy.agent.epsilon == pytest.approx(epsilon_for(total, 1e-3), rel=1e-6)
    assert result.privacy.agent.epsilon > epsilon_for(expected_events.agent, 1e-3)
    assert result.privacy.agent.epsilon <= 8.0
    release = result.analysis.release
    for level, s in (("agent", 1.0), ("instance", math.sqrt(2.0))):
        entry = getattr(result.privacy, level)
        assert entry.data_dependent_label == RELEASED_LABEL
        assert entry.data_dependent_epsilon_released <= entry.epsilon
        again = confident_gnmax_epsilon(
            release.confident.histograms, np.array(record["answered"]), threshold=record["threshold"],
            threshold_sigma=2 * result.sigma * math.sqrt(10 / 4), sigma=result.sigma * math.sqrt(10 / 4),
            delta=1e-3, sensitivity=s, accountant=result.privacy.accountant,  # "rdp": the run holds a GNSS
        )
        clean = result.diagnostics["data_dependent"][level]  # the clean figure: a diagnostic only
        assert clean["epsilon"] == pytest.approx(min(again.epsilon, entry.epsilon), rel=1e-12)
