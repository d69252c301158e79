"""Votes are validated where they leave the agent: malformed votes are refused, never summed."""

import numpy as np
import pytest

from fedvote.agents.agent import Agent, VoteOutput
from fedvote.aggregation.validation import validate_vote
from fedvote.cli import main
from fedvote.errors import VoteRejected

ONE_HOT = np.eye(4)[[0, 2, 3]]  # (3, 4)


@pytest.mark.parametrize(
    ("votes", "options", "message"),
    [
        (np.ones(4), {}, r"^agent 7: vote has shape \(4,\), expected \(Q, 4\)$"),
        (np.eye(5)[[0, 1]], {}, r"^agent 7: vote has shape \(2, 5\), expected \(Q, 4\)$"),
        (ONE_HOT, {"num_queries": 2}, r"^agent 7: vote has shape \(3, 4\), expected \(2, 4\)$"),
        (np.array([[0.5, np.nan, 0, 0]]), {}, r"^agent 7: vote row 0 holds nan \(class 1\)$"),
        (np.array([[0, 0, 0, 0], [1, 0, np.inf, 0]]), {}, r"^agent 7: vote row 1 holds inf \(class 2\)$"),
        (np.array([[1.5, -0.5, 0, 0]]), {}, r"^agent 7: vote row 0 has negative weight -0.5 \(class 1\)$"),
        (np.array([[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0.75, 0.75, 0, 0]]), {},
         r"^agent 7: vote row 3 sums to 1.5 > bound 1$"),
        (np.array([[0, 3.5, 0, 0]]), {"bound": 3.0}, r"^agent 7: vote row 0 sums to 3.5 > bound 3$"),
        (np.array([[0.5, 0.5, 0, 0]]), {"one_hot": True},
         r"^agent 7: vote row 0 has 2 non-zero entries; a one-hot vote has exactly 1$"),
        (np.zeros((1, 4)), {"one_hot": True}, r"^agent 7: vote row 0 has 0 non-zero entries"),
        (np.array([["a", "b", "c", "d"]]), {}, r"^agent 7: vote has dtype <U1, expected real numbers$"),
        (np.ones((1, 4), dtype=bool), {}, r"^agent 7: vote has dtype bool, expected real numbers$"),
    ],
)
def test_malformed_votes_are_rejected_naming_the_agent(votes, options, message):
    with pytest.raises(VoteRejected, match=message) as raised:
        validate_vote(votes, agent_id=7, num_classes=4, **options)
    assert raised.value.agent_id == 7 and "\n" not in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_well_formed_votes_pass_unchanged_as_a_copy():
    knn_mean = np.array([[1 / 3, 1 / 3, 1 / 3, 0.0]])  # sums to 1 up to rounding
    weighted = 2.5 * ONE_HOT
    for votes, options in ((ONE_HOT, {"one_hot": True, "num_queries": 3}), (knn_mean, {}),
                           (weighted, {"bound": 2.5, "one_hot": True}), (np.zeros((2, 4)), {"bound": 0.0})):
        checked = validate_vote(votes, agent_id=0, num_classes=4, **options)
        np.testing.assert_array_equal(checked, votes)
        assert checked.dtype == np.float64 and checked is not votes


def test_agents_validate_every_vote_before_adding_noise(small_federation):
    agent = Agent(
        agent_id=3,
        data=small_federation.agents[3],
        public_features=small_federation.public.features,
        num_classes=10,
        noise_rng=np.random.default_rng(0),
        seed=0,
    )
    good = np.eye(10)[[1, 2]]
    assert agent.release(good, 1.0, VoteOutput(one_hot=True)).shape == (2, 10)
    with pytest.raises(VoteRejected, match=r"^agent 3: vote row 0 sums to 2 > bound 1$"):
        agent.release(2 * good, 1.0, VoteOutput())
    with pytest.raises(VoteRejected, match=r"^agent 3: vote has shape \(2, 10\), expected \(5, 10\)$"):
        agent.release(good, 1.0, VoteOutput(num_queries=5))


def test_the_cli_prints_one_line_naming_the_agent(monkeypatch, capsys):
    honest = Agent.release

    def inflated(self, values, noise_std, expected):  # agent 7 casts 1.5 votes per query
        if self.agent_id == 7:
            values = 1.5 * np.asarray(values)
        return honest(self, values, noise_std, expected)

    monkeypatch.setattr(Agent, "release", inflated)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--agents", "10", "--queries", "10", "--epochs", "1", "--teacher-model", "logistic",
              "--student-model", "logistic", "--sigma", "5", "--noise-seed", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "fedvote: error: agent 7: vote row 0 sums to 1.5 > bound 1"
    assert not any("Traceback" in line for line in err)
