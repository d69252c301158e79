"""Reputation-weighted PATE-FL: options, bad teachers, agent-side weights, an end-to-end run."""

import dataclasses

import numpy as np
import pytest

from fedvote.agents.agent import Agent
from fedvote.agents.behaviour import Behaviour, assign_behaviours
from fedvote.agents.weighted_votes import WeightedVoter, noisy_accuracy_bin
from fedvote.aggregation.voting import WeightRule
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.federation import LabeledData
from fedvote.data.partition import PartitionSpec, long_tail_fractions, partition_indices
from fedvote.data.validation import load_validation_file, with_validation
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, check_method
from fedvote.methods.weighted_pate import WeightedPate, WeightedVotingOptions
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import gaussian_mu
from fedvote.privacy.events import pate_fl_events
from fedvote.runner import run
from fedvote.transport.local import LocalTransport

FAST = TrainingConfig(model="logistic", epochs=5, learning_rate=0.05)


# --- options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("scheme", "median"),
        ("min_weight", 4.0),
        ("max_weight", 0.0),
        ("validation_size", -1),
        ("summary_sigma", 0.0),
        ("summary_bins", 1),
        ("zscore_span", 0.0),
        ("bad_fraction", 1.5),
        ("bad_kind", "sleepy"),
        ("bad_target_class", -1),
    ],
)
def test_options_refuse_bad_values_naming_the_option(field, value):
    with pytest.raises(ConfigError) as error:
        WeightedVotingOptions(**{field: value})
    assert error.value.args[0].startswith(field) or field in str(error.value)


def test_registered_and_configurable_through_run_config():
    assert METHODS["weighted-pate"] is WeightedPate
    config = RunConfig(method="weighted-pate", options={"scheme": "rank", "max_weight": 2.0})
    assert WeightedPate.options_from(config) == WeightedVotingOptions(scheme="rank", max_weight=2.0)
    with pytest.raises(ConfigError):
        check_method(RunConfig(method="weighted-pate", options={"weights": "nope"}))


def test_planned_events_per_scheme():
    one_vote = WeightedPate(sigma=20.0, queries=50, min_responders=5, options=WeightedVotingOptions(scheme="one-vote"))
    assert one_vote.planned_events() == pate_fl_events(20.0, 50)
    accuracy = dataclasses.replace(one_vote, options=WeightedVotingOptions(scheme="accuracy", max_weight=3.0))
    assert gaussian_mu(accuracy.planned_events().agent) == pytest.approx(3.0 * np.sqrt(50) / 20.0)
    zscore = dataclasses.replace(one_vote, options=WeightedVotingOptions(scheme="zscore", summary_sigma=8.0))
    expected = np.sqrt(50 * (3.0 / 20.0) ** 2 + (1 / 8.0) ** 2)
    assert gaussian_mu(zscore.planned_events().agent) == pytest.approx(expected)
    assert zscore.with_sigma(40.0).sigma == 40.0


# --- bad teachers ------------------------------------------------------------------------


def test_bad_behaviours_produce_the_stated_votes():
    predictions = np.array([0, 1, 2, 3, 0, 1])
    rng = np.random.default_rng(0)
    assert np.array_equal(Behaviour().act(predictions, 4, rng), predictions)
    assert np.array_equal(Behaviour("constant", constant_class=2).act(predictions, 4, rng), [2] * 6)
    adversarial = Behaviour("adversarial", target_class=1).act(predictions, 4, rng)
    assert np.array_equal(adversarial, [1, 2, 1, 1, 1, 2])  # target, or target+1 when the teacher says target
    assert np.all(adversarial != predictions)
    guesses = Behaviour("random").act(np.zeros(4000, dtype=np.int64), 4, rng)
    # each class ~ Binomial(4000, 1/4): std ≈ 27, 5σ tolerance
    assert np.all(np.abs(np.bincount(guesses, minlength=4) - 1000) < 5 * np.sqrt(4000 * 0.25 * 0.75))


def test_assign_behaviours_is_seeded_and_takes_the_fraction():
    behaviours = assign_behaviours(75, fraction=0.4, kind="adversarial", num_classes=10, target_class=3, seed=1)
    bad = [b for b in behaviours if not b.honest]
    assert len(bad) == 30 and all(b.target_class == 3 for b in bad)
    assert behaviours == assign_behaviours(75, fraction=0.4, kind="adversarial", num_classes=10, target_class=3, seed=1)
    assert behaviours != assign_behaviours(75, fraction=0.4, kind="adversarial", num_classes=10, target_class=3, seed=2)
    with pytest.raises(ConfigError):
        assign_behaviours(5, fraction=0.5, kind="adversarial", num_classes=3, target_class=3)


# --- the agent's side --------------------------------------------------------------------


def make_agent(small_federation, behaviour=None):
    agent = Agent(
        agent_id=0,
        data=small_federation.agents[0],
        public_features=small_federation.public.features,
        num_classes=small_federation.num_classes,
        noise_rng=np.random.default_rng(0),
        seed=0,
        behaviour=behaviour or Behaviour(),
    )
    agent.train_teacher(FAST)
    return agent


def test_agent_weights_its_votes_locally(small_federation):
    validation = LabeledData(small_federation.public.features[:60], small_federation.public.labels[:60])
    adversary = make_agent(small_federation, Behaviour("adversarial", target_class=0))
    histogram = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 5.0, 3.0])
    voter = WeightedVoter.from_rule(adversary, validation, WeightRule("zscore", 0.1, 3.0, histogram=histogram))
    queries = np.arange(20)
    votes = voter.noisy_votes(queries, 0.0)  # (Q, C), no noise
    assert np.allclose(votes.sum(axis=1), 0.1)  # an always-wrong agent earns w_min
    assert np.all(np.argmax(votes, axis=1) != small_federation.public.labels[queries])
    honest = make_agent(small_federation)
    weighted = WeightedVoter.from_rule(honest, validation, WeightRule("accuracy", 0.1, 3.0))
    weight = weighted.noisy_votes(queries, 0.0).sum(axis=1)
    assert 1.5 < weight[0] <= 3.0 and np.allclose(weight, weight[0])
    share = noisy_accuracy_bin(honest, validation, 10, 0.0)
    assert share.sum() == 1.0 and share.max() == 1.0


def test_weighted_votes_need_weights_first(small_federation):
    transport = LocalTransport(small_federation, seed=0, noise_seed=0)
    transport.train_teachers(FAST)
    with pytest.raises(RuntimeError, match="assign_weights"):
        transport.weighted_vote_sum(np.arange(3), 1.0, 1)


def test_batched_and_looped_transports_agree(small_federation):
    federation = with_validation(small_federation, 40, seed=0)
    behaviours = assign_behaviours(10, fraction=0.3, kind="constant", num_classes=10, seed=0)
    sums = []
    for batched in (True, False):
        transport = LocalTransport(federation, seed=0, noise_seed=0, batched=batched)
        transport.simulate_behaviours(behaviours)
        transport.train_teachers(TrainingConfig(model="logistic", epochs=2))
        transport.assign_weights(federation.validation, WeightRule("accuracy"))
        result = transport.weighted_vote_sum(np.arange(30), 0.0, 10)
        assert result is not None
        sums.append(result.sums)
    assert np.allclose(sums[0], sums[1], atol=0.5)  # same teachers up to float rounding


# --- data --------------------------------------------------------------------------------


def test_unbalanced_partitions_follow_one_over_x():
    labels = np.repeat(np.arange(10), 500)
    for scheme in ("unbalanced", "unbalanced-noniid"):
        parts = partition_indices(labels, 20, PartitionSpec(scheme), np.random.default_rng(0))
        union = np.concatenate(parts)
        assert np.unique(union).shape[0] == union.shape[0]  # disjoint
        counts = np.sort(np.bincount(labels[union], minlength=10))[::-1]
        assert np.allclose(counts / 500, long_tail_fractions(10, 0.4), atol=1e-3)
    assert long_tail_fractions(10, 0.4)[[0, 9]].tolist() == [1.0, pytest.approx(0.4)]
    with pytest.raises(ConfigError):
        PartitionSpec("unbalanced", min_class_fraction=0.0)


def test_validation_slice_leaves_the_pool_and_file_is_checked(small_federation, tmp_path):
    federation = with_validation(small_federation, 30, seed=0)
    assert len(federation.public) == len(small_federation.public) - 30
    assert federation.server_data().validation is federation.validation
    with pytest.raises(ConfigError):
        with_validation(small_federation, len(small_federation.public), seed=0)
    path = tmp_path / "val.npz"
    np.savez(path, x=small_federation.test.features[:5].reshape(5, -1), y=small_federation.test.labels[:5])
    loaded = load_validation_file(path, small_federation.example_shape, 10)
    assert loaded.features.shape == (5, *small_federation.example_shape)
    np.savez(path, x=small_federation.test.features[:5], y=np.full(5, 12))
    with pytest.raises(ConfigError, match="labels"):
        load_validation_file(path, small_federation.example_shape, 10)


# --- end to end --------------------------------------------------------------------------


def test_end_to_end_on_digits_with_adversaries():
    config = RunConfig(
        method="weighted-pate",
        federation=FederationConfig(dataset="digits", agents=10, partition=PartitionSpec("iid")),
        privacy=PrivacyConfig(epsilon=8.0, noise_seed=0),
        teacher=FAST,
        student=FAST,
        queries=30,
        self_training_rounds=0,
        options={"scheme": "zscore", "bad_fraction": 0.3, "validation_size": 40},
    )
    result = run(config)
    assert result.privacy.agent.epsilon == pytest.approx(8.0, abs=1e-2)
    assert result.privacy.agent.sensitivity == pytest.approx(3.0)
    assert result.privacy.instance.sensitivity == pytest.approx(3.0 * np.sqrt(2))
    assert result.details["scheme"] == "zscore" and result.details["validation_size"] == 40
    assert sum(result.details["accuracy_histogram"]) == pytest.approx(10.0)
    assert result.accuracy > 0.3


def test_the_default_validation_set_is_a_fifth_of_the_public_pool_at_most_500(small_federation):
    """digits' pool holds 270 points: the old fixed 500 refused `fedvote run --method weighted-pate`."""
    from fedvote.config import RunConfig
    from fedvote.data.validation import ValidationNeed, provide_validation
    from fedvote.runner import prepare_public

    pool = len(small_federation.public)
    prepared = prepare_public(RunConfig(method="weighted-pate"), small_federation)
    assert len(prepared.validation) == pool // 5 and len(prepared.public) == pool - pool // 5
    capped = provide_validation(small_federation, ValidationNeed(share=0.9, most=7), seed=0)
    assert len(capped.validation) == 7
    explicit = prepare_public(RunConfig(method="weighted-pate", options={"validation_size": 12}), small_federation)
    assert len(explicit.validation) == 12
