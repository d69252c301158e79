"""An agent's own ledger (issue 45 item 3): charges before release, refusals, restarts.

The deployment itself (a SuperLink, a server asking more than an agent's budget, the agent
refusing through the dropout path) is tests/flower/test_flower_agent_budget.py (slow).
"""

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedvote.errors import ConfigError
from fedvote.flower.agent_budget import AgentBudget, AgentRefusal, default_ledger_path
from fedvote.privacy.events import pate_fl_discrete_events, pate_fl_events, private_knn_fl_events


def gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ (Balle & Wang 2018, Thm 8), independent of fedvote."""
    return brentq(
        lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0.0, 200.0
    )


def budget(tmp_path, **kwargs) -> AgentBudget:
    return AgentBudget(path=tmp_path / "agent-0.npz.ledger.sqlite", agent_id=0, fingerprint="f" * 32, **kwargs)


def test_the_default_ledger_sits_beside_the_data_file(tmp_path):
    assert default_ledger_path(tmp_path / "agent-3.npz") == tmp_path / "agent-3.npz.ledger.sqlite"


def test_request_events_take_the_noise_of_the_honest_shares_the_agent_counts_on(tmp_path):
    alone, trusting = budget(tmp_path), budget(tmp_path, assume_honest=4)
    assert alone.request_events("pate", 10, 1.5, secure=False) == pate_fl_events(1.5, 10)
    assert trusting.request_events("pate", 10, 1.5, secure=False, min_responders=4) == pate_fl_events(3.0, 10)
    assert trusting.request_events("pate", 10, 1.5, secure=True, min_responders=5) == pate_fl_discrete_events(
        3.0, 4, 10
    )  # 1.5·√4
    assert alone.request_events("knn", 10, 1.5, secure=False, k=5) == private_knn_fl_events(1.5, 10, 5)
    for kind, secure, k in (("knn", True, 5), ("knn", False, None), ("multilabel", False, None)):
        with pytest.raises(AgentRefusal):
            alone.request_events(kind, 10, 1.5, secure=secure, k=k)


def test_h_above_n_is_refused_by_name_and_h_up_to_n_is_accepted(tmp_path):
    with pytest.raises(ConfigError) as error:
        budget(tmp_path, assume_honest=4, num_agents=3)  # 4 shares cannot exist among 3 agents
    assert error.value.argument == "assume_honest" and "3 agents" in error.value.detail
    assert budget(tmp_path, assume_honest=3, num_agents=3).assume_honest == 3
    again = AgentBudget.from_node_config(budget(tmp_path, assume_honest=7).node_config(), 0, "f" * 32)
    assert again is not None and again.assume_honest == 7  # no N known: not checked here
    with pytest.raises(ConfigError):  # the ClientApp passes its file's N
        AgentBudget.from_node_config(budget(tmp_path, assume_honest=7).node_config(), 0, "f" * 32, 3)


def test_a_request_whose_t_is_below_h_or_unstated_is_refused_and_nothing_is_charged(tmp_path):
    trusting = budget(tmp_path, assume_honest=3)
    for stated in (2, None):  # a released sum may hold only t < h shares; or t is unknown
        with pytest.raises(AgentRefusal, match="assumes 3 honest noise shares"):
            trusting.request_events("pate", 10, 1.5, secure=False, min_responders=stated)
    assert trusting.check_ready() == 0.0
    alone = budget(tmp_path)  # h = 1 counts on its own share only: any t, or none, is covered
    assert alone.request_events("pate", 10, 1.5, secure=False, min_responders=1) == pate_fl_events(1.5, 10)


def test_admitted_requests_are_charged_and_the_spend_is_the_gaussian_composition(tmp_path):
    agent = budget(tmp_path)
    spent = agent.admit(agent.request_events("pate", 10, 2.0, secure=False))
    spent = agent.admit(agent.request_events("pate", 6, 2.0, secure=False))
    assert spent == pytest.approx(gaussian_epsilon(math.sqrt(16) / 2.0, 1e-3), rel=1e-4)  # μ = √Q/σ
    assert agent.check_ready() == pytest.approx(spent)


def test_a_request_beyond_the_budget_is_refused_and_nothing_is_written(tmp_path):
    one_round = gaussian_epsilon(math.sqrt(10) / 2.0, 1e-3)
    agent = budget(tmp_path, budget_epsilon=1.5 * one_round)  # room for one round of 10, not two
    request = agent.request_events("pate", 10, 2.0, secure=False)
    assert agent.admit(request) == pytest.approx(one_round, rel=1e-4)
    with pytest.raises(AgentRefusal, match="refuses this request.*above its budget"):
        agent.admit(request)
    assert agent.check_ready() == pytest.approx(one_round, rel=1e-4)  # the refused charge left no trace


def test_the_ledger_survives_a_restart_and_its_budget_binds(tmp_path):
    first = budget(tmp_path, budget_epsilon=8.0)  # one round of 10 at σ = 2 spends 5.59
    first.admit(first.request_events("pate", 10, 2.0, secure=False))
    restarted = budget(tmp_path)  # a new process, no --budget-epsilon: the stored budget binds
    assert restarted.check_ready() == pytest.approx(gaussian_epsilon(math.sqrt(10) / 2.0, 1e-3), rel=1e-4)
    with pytest.raises(AgentRefusal):
        restarted.admit(restarted.request_events("pate", 100, 2.0, secure=False))
    with pytest.raises(ConfigError) as error:
        budget(tmp_path, budget_epsilon=9.0).check_ready()  # another budget: set-budget changes it
    assert error.value.argument == "budget_epsilon"


def test_node_config_round_trip_and_refusals_by_name(tmp_path):
    agent = budget(tmp_path, budget_epsilon=2.0, delta=1e-4, assume_honest=3)
    again = AgentBudget.from_node_config(agent.node_config(), 0, "f" * 32)
    assert again == agent
    assert AgentBudget.from_node_config({}, 0, "f" * 32) is None  # no ledger named: a simulation
    for kwargs, name in (
        ({"budget_epsilon": 0.0}, "budget_epsilon"),
        ({"budget_epsilon": math.inf}, "budget_epsilon"),
        ({"delta": 1.0}, "budget_delta"),
        ({"assume_honest": 0}, "assume_honest"),
    ):
        with pytest.raises(ConfigError) as error:
            budget(tmp_path, **kwargs)
        assert error.value.argument == name


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """A split digits federation of 3 agents (``fedvote deploy split``)."""
    import json

    from fedvote.cli.app import main

    root = tmp_path_factory.mktemp("deploy")
    (root / "run.json").write_text(json.dumps({"federation": {"dataset": "digits", "agents": 3}, "queries": 20}))
    with pytest.raises(SystemExit) as stop:
        main(["deploy", "split", "--config", str(root / "run.json"), "--out", str(root / "fed")])
        raise SystemExit(0)
    assert stop.value.code == 0
    return root / "fed"


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--budget-epsilon", "-1"], "--budget-epsilon"),
        (["--budget-epsilon", "nan"], "--budget-epsilon"),
        (["--budget-delta", "2"], "--budget-delta"),
        (["--assume-honest", "0"], "--assume-honest"),
        (["--assume-honest", "4"], "--assume-honest"),  # 4 honest shares among the file's 3 agents
    ],
)
def test_deploy_agent_refuses_bad_budget_flags_in_one_line_before_starting(fed, extra, flag, capsys):
    from fedvote.cli.app import main

    with pytest.raises(SystemExit) as stop:
        main(["deploy", "agent", "--id", "0", "--data", str(fed / "agent-0.npz"), "--insecure", *extra])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"fedvote: error: {flag}")
    assert not default_ledger_path(fed / "agent-0.npz").exists()  # refused before the ledger opened


def test_deploy_agent_refuses_another_budget_than_its_ledgers(fed, capsys):
    from fedvote.cli.app import main
    from fedvote.flower.files import load_agent_file

    file = load_agent_file(fed / "agent-1.npz")
    AgentBudget(
        path=default_ledger_path(fed / "agent-1.npz"), agent_id=1, fingerprint=file.fingerprint, budget_epsilon=3.0
    ).check_ready()  # the agent ran before with budget 3
    with pytest.raises(SystemExit) as stop:
        main(["deploy", "agent", "--id", "1", "--data", str(fed / "agent-1.npz"), "--insecure", "--budget-epsilon", "4"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("fedvote: error: --budget-epsilon")
