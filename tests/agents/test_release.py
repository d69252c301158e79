"""Every output leaves an agent through one audited exit (:meth:`Agent.release`).

For each skill's output path: the output is handed to the exit with what it must be, and
the exit refuses a non-finite or wrongly-shaped output (VoteRejected, naming the agent)
before any noise is drawn.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedvote.agents import knn_votes, local_updates, private_heads, teacher_votes, weighted_votes
from fedvote.agents.agent import Agent, ArrayOutput, VoteOutput
from fedvote.agents.knn_votes import KnnVoter
from fedvote.agents.weighted_votes import WeightedVoter
from fedvote.aggregation.voting import WeightRule
from fedvote.data.federation import LabeledData
from fedvote.errors import VoteRejected
from fedvote.models.features import fit_feature_extractor
from fedvote.models.local_training import LocalTraining, flat_parameters
from fedvote.models.logistic_heads import HeadRequest, public_head_features
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import build_model

FAST = TrainingConfig(model="logistic", epochs=3, learning_rate=0.05)


@pytest.fixture(scope="module")
def agent(small_federation):
    agent = Agent(
        agent_id=4,
        data=small_federation.agents[4],
        public_features=small_federation.public.features,
        num_classes=small_federation.num_classes,
        noise_rng=np.random.default_rng(0),
        seed=3,
    )
    agent.train_teacher(FAST)
    return agent


@pytest.fixture
def exits(monkeypatch):
    """Every call of :meth:`Agent.release`: (values, noise_std, expected)."""
    calls: list[tuple[np.ndarray, float, VoteOutput | ArrayOutput]] = []
    honest = Agent.release

    def spy(self, values, noise_std, expected):
        calls.append((np.array(values, copy=True), noise_std, expected))
        return honest(self, values, noise_std, expected)

    monkeypatch.setattr(Agent, "release", spy)
    return calls


def theta_and_training(small_federation, **training):
    model = build_model("logistic", small_federation.example_shape, small_federation.num_classes,
                        generator=torch.Generator().manual_seed(0))
    return flat_parameters(model), LocalTraining(model="logistic", steps=2, learning_rate=0.1, batch_size=8,
                                                 round_index=0, **training)


def head_setup(small_federation):
    public = small_federation.public.features
    features = public_head_features(fit_feature_extractor("pca", public, dim=3), public, clip=None)
    return features, small_federation.num_classes


def skill_outputs(agent, small_federation):
    """(name, thunk) for every path by which a skill's output leaves the agent."""
    queries = np.arange(7)
    validation = LabeledData(small_federation.public.features[:40], small_federation.public.labels[:40])
    voter = WeightedVoter.from_rule(agent, validation, WeightRule("accuracy", 0.1, 3.0))
    extractor = fit_feature_extractor("pca", small_federation.public.features, dim=4)
    knn = KnnVoter.prepare(agent, extractor, k=3)
    one_hot = np.eye(agent.num_classes)[np.arange(7) % agent.num_classes]  # (7, C)
    theta, plain = theta_and_training(small_federation)
    _, clipped = theta_and_training(small_federation, clip_norm=0.05, noise_std=0.01)
    features, classes = head_setup(small_federation)
    heads = HeadRequest(1.0, classes, np.arange(5), 1.0, class_noise_multiplier=1.0)
    sgd = HeadRequest(1.0, classes, None, None, class_head="sgd", sgd_epochs=2)
    return [
        ("teacher votes", lambda: teacher_votes.noisy_votes(agent, queries, 0.5)),
        ("batched teacher votes", lambda: teacher_votes.release_votes(agent, one_hot, 0.5, 7)),
        ("accuracy bin", lambda: weighted_votes.noisy_accuracy_bin(agent, validation, 10, 0.5)),
        ("weighted votes", lambda: voter.noisy_votes(queries, 0.5)),
        ("batched weighted votes", lambda: voter.release_votes(one_hot, 0.5, 7)),
        ("kNN votes", lambda: knn.noisy_votes(queries, 0.5)),
        ("batched kNN votes", lambda: knn.release_votes(one_hot / 2, 0.5, 7)),
        ("local update", lambda: local_updates.local_update(agent, theta, plain)),
        ("clipped local update", lambda: local_updates.local_update(agent, theta, clipped)),
        ("noise share", lambda: agent.noise_share((11,), 0.5)),
        ("private heads", lambda: private_heads.private_heads(agent, features, heads)),
        ("sgd head", lambda: private_heads.private_heads(agent, features, sgd)),
    ]


def test_every_skill_output_leaves_through_the_exit_which_refuses_malformed_ones(agent, small_federation, exits):
    for name, produce in skill_outputs(agent, small_federation):
        exits.clear()
        produce()
        assert exits, f"{name} did not leave through Agent.release"
        for values, _, expected in list(exits):  # the checks below go through the exit too
            assert np.all(np.isfinite(values)), name
            poisoned = np.array(values, dtype=np.float64)
            poisoned.flat[0] = np.nan
            with pytest.raises(VoteRejected, match=r"^agent 4: "):
                agent.release(poisoned, 0.5, expected)
            with pytest.raises(VoteRejected, match=r"^agent 4: .*shape"):
                agent.release(np.concatenate([values, values]), 0.5, expected)  # one extra block of rows
            with pytest.raises(VoteRejected, match=r"^agent 4: "):
                agent.release(np.full_like(values, np.inf, dtype=np.float64), 0.5, expected)


def test_a_refused_output_draws_no_noise_and_leaves_the_input_as_it_was():
    rng = np.random.default_rng(1)
    twin = np.random.default_rng(1)
    agent = Agent(agent_id=2, data=LabeledData(np.zeros((3, 2), np.float32), np.zeros(3, np.int64)),
                  public_features=np.zeros((5, 2), np.float32), num_classes=3, noise_rng=rng, seed=0)
    bad = np.array([[1.0, np.nan, 0.0]])
    with pytest.raises(VoteRejected, match=r"^agent 2: vote row 0 holds nan \(class 1\)$"):
        agent.release(bad, 1.0, VoteOutput())
    assert np.isnan(bad[0, 1])
    released = agent.release(np.eye(3)[[0]], 1.0, VoteOutput(one_hot=True))
    np.testing.assert_array_equal(released, np.eye(3)[[0]] + twin.normal(0.0, 1.0, size=(1, 3)))


def test_array_outputs_name_what_failed():
    agent = Agent(agent_id=9, data=LabeledData(np.zeros((3, 2), np.float32), np.zeros(3, np.int64)),
                  public_features=np.zeros((5, 2), np.float32), num_classes=3,
                  noise_rng=np.random.default_rng(0), seed=0)
    with pytest.raises(VoteRejected, match=r"^agent 9: update has shape \(4,\), expected \(5,\)$"):
        agent.release(np.zeros(4), 0.0, ArrayOutput("update", (5,)))
    with pytest.raises(VoteRejected, match=r"^agent 9: class head holds inf at \(1, 0\)$"):
        agent.release(np.array([[0.0, 1.0], [np.inf, 0.0]]), 0.0, ArrayOutput("class head", (2, 2)))
    with pytest.raises(VoteRejected, match=r"^agent 9: update has norm 5 > bound 1$"):
        agent.release(np.array([3.0, 4.0]), 0.0, ArrayOutput("update", (2,), norm_bound=1.0))
    with pytest.raises(ValueError, match="noise_std"):
        agent.release(np.zeros(2), -1.0, ArrayOutput("update", (2,)))


def test_a_non_finite_local_update_is_refused_at_the_exit(agent, small_federation, monkeypatch):
    theta, training = theta_and_training(small_federation)
    monkeypatch.setattr(local_updates, "flat_parameters", lambda model: np.full(theta.shape, np.nan, np.float32))
    with pytest.raises(VoteRejected, match=r"^agent 4: update holds nan at \(0,\)$"):
        local_updates.local_update(agent, theta, training)


def test_an_unclipped_update_over_the_bound_is_refused(agent, small_federation, monkeypatch):
    theta, training = theta_and_training(small_federation, clip_norm=1e-3)
    monkeypatch.setattr(local_updates, "clip_to_norm", lambda update, clip_norm: update)  # a broken clip
    with pytest.raises(VoteRejected, match=r"^agent 4: update has norm .* > bound 0.001$"):
        local_updates.local_update(agent, theta, training)


def test_a_non_finite_head_is_refused_at_the_exit(agent, small_federation, monkeypatch):
    features, classes = head_setup(small_federation)
    monkeypatch.setattr(private_heads, "fit_multinomial_head", lambda x, y, **kw: np.full((classes, 4), np.nan))
    with pytest.raises(VoteRejected, match=r"^agent 4: class head holds nan"):
        private_heads.private_heads(agent, features, HeadRequest(1.0, classes, None, None))


def test_a_wrongly_shaped_knn_vote_is_refused(agent, small_federation, monkeypatch):
    extractor = fit_feature_extractor("pca", small_federation.public.features, dim=4)
    voter = KnnVoter.prepare(agent, extractor, k=3)
    monkeypatch.setattr(knn_votes, "knn_votes", lambda *args: np.full((2, agent.num_classes), 0.1))
    with pytest.raises(VoteRejected, match=r"^agent 4: vote has shape \(2, 10\), expected \(5, 10\)$"):
        voter.noisy_votes(np.arange(5), 1.0)
