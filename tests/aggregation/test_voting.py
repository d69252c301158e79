import math

import numpy as np
import pytest

from fedvote.aggregation.voting import noise_share_std, noisy_argmax, one_hot_votes, top_two_gap
from fedvote.models.training import TrainingConfig
from fedvote.transport.local import LocalTransport


def test_one_hot_votes_have_one_unit_entry_per_row():
    votes = one_hot_votes(np.array([2, 0, 1]), 4)
    assert votes.shape == (3, 4)
    assert np.array_equal(votes.sum(axis=1), np.ones(3))
    assert np.array_equal(np.argmax(votes, axis=1), [2, 0, 1])


def test_noise_share_is_sigma_over_root_t():
    assert noise_share_std(10.0, 25) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        noise_share_std(1.0, 0)


def test_noisy_argmax_and_top_two_gap():
    sums = np.array([[1.0, 5.0, 2.0], [7.0, 7.5, 0.0]])
    assert np.array_equal(noisy_argmax(sums), [1, 1])
    assert np.allclose(top_two_gap(sums), [3.0, 0.5])


@pytest.mark.parametrize("min_responders", [10, 4])
def test_noise_in_the_vote_sum_has_the_promised_variance(small_federation, min_responders):
    """Each of N agents adds N(0, σ²/t): the sum's noise variance is N·σ²/t (= σ² for t = N).

    The sample variance of n independent N(0, v) draws has std v·√(2/n); we allow
    5 standard deviations.
    """
    sigma = 3.0
    transport = LocalTransport(small_federation, seed=0, noise_seed=123)
    transport.train_teachers(TrainingConfig(model="logistic", epochs=2))
    queries = np.arange(len(small_federation.public))
    clean = transport.vote_sum(queries, 0.0, min_responders).sums
    noise = np.concatenate(
        [transport.vote_sum(queries, noise_share_std(sigma, min_responders), min_responders).sums - clean
         for _ in range(4)]
    ).ravel()
    n = noise.shape[0]
    expected = small_federation.num_agents * sigma**2 / min_responders
    assert abs(noise.mean()) < 5 * math.sqrt(expected / n)
    assert abs(noise.var() - expected) < 5 * expected * math.sqrt(2.0 / n)
    assert np.array_equal(clean.sum(axis=1), np.full(queries.shape[0], small_federation.num_agents))


def test_noise_is_reproducible_only_with_a_noise_seed(small_federation):
    def draw(noise_seed):
        transport = LocalTransport(small_federation, seed=0, noise_seed=noise_seed)
        transport.train_teachers(TrainingConfig(model="logistic", epochs=1))
        return transport.vote_sum(np.arange(5), 1.0, 10).sums

    assert np.array_equal(draw(7), draw(7))
    assert not np.array_equal(draw(None), draw(None))


def test_too_few_responders_release_nothing(small_federation):
    transport = LocalTransport(small_federation, seed=0, noise_seed=0)
    transport.train_teachers(TrainingConfig(model="logistic", epochs=1))
    assert transport.vote_sum(np.arange(3), 1.0, small_federation.num_agents + 1) is None
