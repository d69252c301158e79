"""Private-kNN-FL with ``--agent-budgets`` and ``--vote-sampling`` (issue 45), against dp-accounting.

As for PATE-FL (tests/methods/test_pate_fl_individual.py): every group within its budget and
the largest met, each group's ε equal to dp-accounting's PLD accountant on that group's
events rebuilt here (agent level Gaussian(σ/w), instance level Gaussian(σ/(w·√2/k_min)) with
no sampling credit), and the subsampled agent ε equal to the Poisson-subsampled composition.
"""

import math

import pytest
from dp_accounting import dp_event

import fedvote
from fedvote.methods.private_knn_fl import PrivateKnnFL
from fedvote.transport.capabilities import IndividualKnnVotes, KnnVotes

from .test_pate_fl_individual import SPEC, dp_accounting_epsilon

FAST = {"student_model": "logistic", "epochs": 10, "self_training_rounds": 0, "semi_supervised": "supervised"}


@pytest.fixture(scope="module")
def budgets_run():
    return fedvote.run(method="private-knn-fl", agents=20, queries=60, agent_budgets=SPEC, noise_seed=2, **FAST)


def test_groups_within_budgets_and_each_is_dp_accounting_on_its_events(budgets_run):
    result = budgets_run
    groups = result.privacy.agent_groups
    assert [g.agents for g in groups] == [7, 9, 4]  # 6.8, 8.6, 4.6 by largest remainder
    k_min = result.details["k"]
    delta = result.privacy.delta
    for group in groups:
        assert 0.99 * group.budget <= group.epsilon <= group.budget
        z = result.sigma / group.weight
        assert group.epsilon == pytest.approx(
            dp_accounting_epsilon(dp_event.GaussianDpEvent(z), result.queries, delta), rel=1e-6
        )
        z_instance = z / (math.sqrt(2) / k_min)
        assert group.instance_epsilon == pytest.approx(
            dp_accounting_epsilon(dp_event.GaussianDpEvent(z_instance), result.queries, delta), rel=1e-6
        )
    assert result.privacy.agent.epsilon == max(g.epsilon for g in groups)


def test_sampled_knn_votes_are_the_poisson_subsampled_composition():
    result = fedvote.run(
        method="private-knn-fl", agents=20, queries=60, vote_sampling=0.3, epsilon=2.0, noise_seed=2, **FAST
    )
    inner = dp_event.PoissonSampledDpEvent(0.3, dp_event.GaussianDpEvent(result.sigma))
    reference = dp_accounting_epsilon(inner, result.queries, result.privacy.delta)
    assert result.privacy.agent.epsilon == pytest.approx(reference, rel=1e-6)
    assert 0.99 * 2.0 <= result.privacy.agent.epsilon <= 2.0
    k_min = result.details["k"]
    unsampled = dp_event.GaussianDpEvent(result.sigma / (math.sqrt(2) / k_min))  # no sampling credit
    assert result.privacy.instance.epsilon == pytest.approx(
        dp_accounting_epsilon(unsampled, result.queries, result.privacy.delta), rel=1e-6
    )


def test_requirements():
    plain = PrivateKnnFL(sigma=1.0, queries=5, min_responders=1)
    assert plain.requirements() == (KnnVotes,)
    assert IndividualKnnVotes in PrivateKnnFL(sigma=1.0, queries=5, min_responders=1, vote_sampling=0.5).requirements()
