"""PATE-FL with ``--agent-budgets`` and ``--vote-sampling`` end to end (issue 45).

The two Bar commands of the issue, on the digits defaults but with logistic teachers and
student (fast; the subsampled one with 20 agents, which its ε does not depend on): every group's ε within its budget and the largest budget met; each group's
ε equal to dp-accounting's PLD accountant applied to that group's events, rebuilt here from
dp-accounting's own classes; the subsampled run's agent ε equal to dp-accounting's PLD of
the Poisson-subsampled composition the run states. Then what the result carries (JSON,
analysis.npz, the summary) and what is refused, by name, before anything is charged.
"""

import json
import sqlite3

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation

import fedvote
from fedvote.analysis import RunAnalysis
from fedvote.cli.app import main, summary
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods.options.voting import PateFLOptions
from fedvote.methods.pate_fl import PateFL
from fedvote.models.training import TrainingConfig
from fedvote.runner import build_config, make_federation, plan
from fedvote.transport.capabilities import IndividualTeacherVotes, TeacherVotes
from fedvote.transport.local import LocalTransport

SPEC = "1:0.34,2:0.43,3:0.23"
FAST = {
    "teacher_model": "logistic", "student_model": "logistic", "epochs": 10, "self_training_rounds": 0,
    "semi_supervised": "supervised",
}


def dp_accounting_epsilon(inner: dp_event.DpEvent, count: int, delta: float, relation=None) -> float:
    """``count`` compositions of ``inner`` by dp-accounting's PLD accountant (default discretisation 1e-4)."""
    accountant = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=relation or NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4
    )
    accountant.compose(inner, count)
    return accountant.get_epsilon(delta)


@pytest.fixture(scope="module")
def budgets_run():
    return fedvote.run(agents=50, agent_budgets=SPEC, noise_seed=3, **FAST)


@pytest.fixture(scope="module")
def sampled_run():
    return fedvote.run(agents=20, vote_sampling=0.5, epsilon=4.0, noise_seed=3, **FAST)  # ε does not read N


def test_every_group_within_its_budget_and_the_largest_met(budgets_run):
    groups = budgets_run.privacy.agent_groups
    assert [(g.budget, g.agents) for g in groups] == [(1.0, 17), (2.0, 22), (3.0, 11)]
    for group in groups:
        assert group.epsilon <= group.budget
    largest = max(groups, key=lambda g: g.budget)
    assert largest.epsilon >= 0.9 * largest.budget
    assert all(group.epsilon >= 0.99 * group.budget for group in groups)  # every budget used
    assert sorted(i for g in groups for i in g.agent_ids) == list(range(50))


def test_each_group_epsilon_is_dp_accounting_on_that_groups_events(budgets_run):
    """Group b: Q Gaussians of noise σ/w_b (sensitivity 1), by dp-accounting's PLD, at both levels."""
    result = budgets_run
    delta = result.privacy.delta
    for group in result.privacy.agent_groups:
        z = result.sigma / group.weight
        agent = dp_accounting_epsilon(dp_event.GaussianDpEvent(z), result.queries, delta)
        instance = dp_accounting_epsilon(dp_event.GaussianDpEvent(z / np.sqrt(2)), result.queries, delta)
        assert group.epsilon == pytest.approx(agent, rel=1e-6)
        assert group.instance_epsilon == pytest.approx(instance, rel=1e-6)


def test_the_headline_is_the_maximum_over_agents(budgets_run):
    privacy = budgets_run.privacy
    assert privacy.agent.epsilon == max(g.epsilon for g in privacy.agent_groups)
    assert privacy.instance.epsilon == max(g.instance_epsilon for g in privacy.agent_groups)
    assert privacy.calibrated_to_epsilon == 3.0 and privacy.calibrated_level == "agent"


def test_result_json_analysis_and_summary_carry_the_groups(budgets_run, tmp_path):
    budgets_run.save(tmp_path)
    data = json.loads((tmp_path / "result.json").read_text())
    groups = data["privacy"]["agent_groups"]
    assert [{k: g[k] for k in ("budget", "agents")} for g in groups] == [
        {"budget": 1.0, "agents": 17}, {"budget": 2.0, "agents": 22}, {"budget": 3.0, "agents": 11}
    ]
    assert all(set(g) >= {"budget", "agents", "epsilon"} for g in groups)
    analysis = RunAnalysis.load(tmp_path / "analysis.npz")
    by_budget = {g["budget"]: g["epsilon"] for g in groups}
    assert analysis.agent_epsilons.shape == (50,)
    assert np.array_equal(analysis.agent_epsilons, [by_budget[b] for b in analysis.agent_budgets])
    text = summary(budgets_run)
    assert "budget 1: 17 agents" in text and "the headline above is the largest" in text


def test_sampled_agent_epsilon_is_the_poisson_subsampled_composition_it_states(sampled_run):
    result = sampled_run
    assert result.details["vote_sampling"] == 0.5
    inner = dp_event.PoissonSampledDpEvent(0.5, dp_event.GaussianDpEvent(result.sigma))
    reference = dp_accounting_epsilon(inner, result.queries, result.privacy.delta)
    assert result.privacy.agent.epsilon <= 4.0
    assert result.privacy.agent.epsilon == pytest.approx(reference, rel=0.01)
    assert result.privacy.agent.epsilon >= 0.99 * 4.0  # calibration includes the amplification
    instance = dp_accounting_epsilon(
        dp_event.PoissonSampledDpEvent(0.5, dp_event.GaussianDpEvent(result.sigma)), result.queries,
        result.privacy.delta, NeighboringRelation.REPLACE_ONE,
    )
    assert result.privacy.instance.epsilon == pytest.approx(instance, rel=0.01)
    assert "agent_groups" not in result.to_dict()["privacy"]


def test_sampled_sums_are_scaled_to_be_unbiased():
    """With noise 0, the mean of the scaled sums over many queries is the full clean sum (5 std)."""
    federation = make_federation(RunConfig())
    transport = LocalTransport(federation, noise_seed=1)
    transport.train_teachers(TrainingConfig(model="logistic", epochs=5))
    queries = np.arange(federation.public.features.shape[0])  # the whole pool
    rate = 0.25
    sampled = transport.individual_vote_sum(queries, 0.0, 1, weights=np.ones(transport.num_agents), sampling_rate=rate)
    full = transport.vote_sum(queries, 0.0, 1)
    scaled = sampled.sums / rate  # (Q, C), as the method scales them
    # Each entry is Binomial(n_jc, q)/q: mean n_jc, variance n_jc(1-q)/q; summed over all queries.
    n = full.sums.sum()
    assert abs(scaled.sum() - n) < 5 * np.sqrt(n * (1 - rate) / rate)


def test_requirements_name_the_new_capability():
    plain = PateFL(sigma=1.0, queries=5, min_responders=1)
    assert plain.requirements() == (TeacherVotes,)
    sampled = PateFL(sigma=1.0, queries=5, min_responders=1, release_options=PateFLOptions(vote_sampling=0.5))
    assert IndividualTeacherVotes in sampled.requirements()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--agent-budgets", SPEC, "--epsilon", "2"], "--agent-budgets"),
        (["--agent-budgets", SPEC, "--sigma", "2"], "--agent-budgets"),
        (["--agent-budgets", SPEC, "--calibrate-level", "instance"], "--agent-budgets"),
        (["--method", "private-knn-fl", "--agent-budgets", SPEC, "--epsilon", "2"], "--agent-budgets"),
        (["--method", "private-knn-fl", "--agent-budgets", SPEC, "--calibrate-level", "instance"], "--agent-budgets"),
        (["--agent-budgets", "1:0.5,2:0.6"], "--agent-budgets"),
        (["--agent-budgets", "file:/nonexistent/budgets"], "--agent-budgets"),
        (["--agent-budgets", SPEC, "--release", "labels"], "--agent-budgets"),
        (["--vote-sampling", "0"], "--vote-sampling"),
        (["--vote-sampling", "1.5"], "--vote-sampling"),
        (["--vote-sampling", "0.5", "--secure-noise"], "--vote-sampling"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag_exit_2(argv, flag, capsys, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(SystemExit) as stop:
        main(["run", "--agents", "5", "--ledger", str(ledger), *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"fedvote: error: {flag}")
    assert not ledger.exists() or _no_records(ledger)  # nothing charged


def _no_records(path) -> bool:
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("select name from sqlite_master where type='table'")}
        return "records" not in tables or connection.execute("select count(*) from records").fetchone()[0] == 0


def test_a_budget_file_of_the_wrong_length_is_refused_at_planning(tmp_path):
    path = tmp_path / "budgets.txt"
    path.write_text("1\n2\n3\n", encoding="utf-8")
    config = build_config("pate-fl", agents=5, epsilon=None, agent_budgets=f"file:{path}")
    with pytest.raises(ConfigError) as error:
        plan(config, make_federation(config).public_metadata())
    assert error.value.argument == "agent_budgets" and "3 budgets for 5 agents" in str(error.value)
