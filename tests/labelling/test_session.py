"""The labelling protocol without the command line: plan, one charged answer at a time, the budget's stop."""

import numpy as np
import pytest

from fedvote.errors import ConfigError
from fedvote.labelling import Answer, answer_queries, plan_labelling
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events
from fedvote.runner import build_config

QUERIES = 4


def small(**settings):
    return build_config(
        agents=5, epochs=2, teacher_model="logistic", noise_seed=1, accountant="exact", sigma=6.0, **settings
    )


@pytest.fixture(scope="module")
def queries(tmp_path_factory, digits):
    path = tmp_path_factory.mktemp("queries") / "q.npy"
    np.save(path, digits.features[:QUERIES].reshape(QUERIES, -1))
    return path


def test_each_answer_is_told_as_given_with_the_epsilon_charged_so_far(queries):
    labelling = plan_labelling(small(), queries)
    assert labelling.count == QUERIES and labelling.sigma == 6.0
    events: list[object] = []
    outcome = answer_queries(labelling, on_open=lambda: events.append("open"), on_answer=events.append)
    assert events[0] == "open" and events[1:] == list(outcome.answers)
    assert [a.query for a in outcome.answers] == list(range(QUERIES)) and outcome.stopped is None
    assert outcome.ledger is None  # in memory
    for q, answer in enumerate(outcome.answers, start=1):
        assert isinstance(answer, Answer) and 0 <= answer.label < 10
        assert answer.epsilon_agent == pytest.approx(epsilon_for(pate_fl_events(6.0, q).agent, 1e-3, "exact"))


def test_the_budget_stops_the_session_before_the_answer_that_would_exceed_it(queries, tmp_path):
    one = epsilon_for(pate_fl_events(6.0, 1).agent, 1e-3, "exact")
    two = epsilon_for(pate_fl_events(6.0, 2).agent, 1e-3, "exact")
    config = small(ledger=str(tmp_path / "l.sqlite"), budget_epsilon=(one + two) / 2)
    outcome = answer_queries(plan_labelling(config, queries))
    assert [a.query for a in outcome.answers] == [0]
    assert outcome.stopped is not None and "privacy budget exceeded" in outcome.stopped
    assert outcome.ledger is not None and outcome.ledger["spent_agent_epsilon"] == pytest.approx(one)


def test_only_pate_fl_answers_and_not_on_the_secure_path(queries):
    with pytest.raises(ConfigError) as refused:
        plan_labelling(small(method="private-knn-fl"), queries)
    assert refused.value.argument == "method"
    with pytest.raises(ConfigError) as refused:
        plan_labelling(small(secure_noise=True), queries)
    assert refused.value.argument == "secure_noise"
