"""Sweeps: the grid, the reuse of teachers and clean votes, the noise, the files."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from fedvote.cli.sweep import sweep as sweep_command
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.query_selection import choose_queries
from fedvote.errors import ConfigError
from fedvote.models.training import TrainingConfig
from fedvote.runner import make_federation, run
from fedvote.sweep import grid_points, parse_grid, point_config, run_sweep, write_sweep
from fedvote.transport.local import LocalTransport
from fedvote.transport.reused_votes import ReusedVotesTransport

SMALL = RunConfig(
    federation=FederationConfig(agents=10),
    privacy=PrivacyConfig(noise_seed=0),
    teacher=TrainingConfig(model="logistic", epochs=5),
    student=TrainingConfig(model="logistic", epochs=5),
    queries=40,
    self_training_rounds=0,
)


def test_parse_grid_product_and_types():
    grid = parse_grid("sigma=10,20; queries=100,300")
    assert grid == {"sigma": [10.0, 20.0], "queries": [100, 300]}
    assert grid_points(grid) == [
        {"sigma": 10.0, "queries": 100},
        {"sigma": 10.0, "queries": 300},
        {"sigma": 20.0, "queries": 100},
        {"sigma": 20.0, "queries": 300},
    ]


@pytest.mark.parametrize(
    "text", ["", "rounds=1,2", "epsilon", "epsilon=", "epsilon=a", "epsilon=1;epsilon=2", "epsilon=1;sigma=2"]
)
def test_parse_grid_refuses_bad_text(text):
    with pytest.raises(ConfigError) as error:
        parse_grid(text)
    assert error.value.argument == "grid"


def test_point_config_sets_sigma_or_epsilon_and_queries():
    at_sigma = point_config(SMALL, {"sigma": 3.0, "queries": 20})
    assert at_sigma.privacy.sigma == 3.0 and at_sigma.privacy.epsilon is None and at_sigma.queries == 20
    at_epsilon = point_config(at_sigma, {"epsilon": 2.0})
    assert at_epsilon.privacy.epsilon == 2.0 and at_epsilon.privacy.sigma is None
    with pytest.raises(ConfigError):
        point_config(SMALL, {"queries": 0})


@pytest.mark.parametrize("selection", ["random", "typical"])
def test_sweep_trains_teachers_once_and_computes_each_clean_vote_once(selection):
    config = dataclasses.replace(SMALL, query_selection=selection)
    result = run_sweep([config], parse_grid("sigma=2,4,8;queries=20,40"))
    assert len(result.rows) == 6
    reuse = result.reuse["pate-fl/seed=0"]
    assert reuse["teacher_trainings"] == 1
    pool = make_federation(config).public.features
    asked = {int(i) for q in (20, 40) for i in choose_queries(pool, q, config.seed, selection)}
    assert reuse["clean_votes_computed"] == len(asked)  # once per distinct query over the grid
    if selection == "random":
        assert len(asked) == 40  # the Q=20 queries are among the Q=40 ones
    for row in result.rows:
        assert row.sigma == row.point["sigma"] and row.queries == row.point["queries"]
        assert row.epsilon_agent is not None and row.epsilon_instance > row.epsilon_agent


def test_sweep_point_equals_a_plain_run_without_noise():
    """With σ = 0 nothing random is left: the sweep's point is exactly the plain run."""
    (row,) = run_sweep([SMALL], {"sigma": [0.0]}).rows
    plain = run(point_config(SMALL, {"sigma": 0.0}))
    assert row.accuracy == plain.accuracy and row.label_accuracy == plain.label_accuracy


def test_sweep_at_epsilon_matches_the_calibrated_run():
    (row,) = run_sweep([SMALL], {"epsilon": [2.0]}).rows
    plain = run(point_config(SMALL, {"epsilon": 2.0}))
    assert row.sigma == pytest.approx(plain.sigma, rel=1e-12)
    assert row.epsilon_agent == pytest.approx(plain.privacy.agent.epsilon, rel=1e-12)


def test_reused_transport_noise_has_the_sum_of_the_shares_variance():
    """Σ of N shares N(0, s²) is N(0, N s²): the sample std of many draws, within 5 standard errors."""
    federation = make_federation(SMALL)
    transport = ReusedVotesTransport(LocalTransport(federation, seed=0), noise_seed=1)
    transport.train_teachers(SMALL.teacher)
    queries = np.arange(50)
    clean = transport.clean_vote_histograms(queries)
    share_std = 0.7
    draws = np.stack([transport.vote_sum(queries, share_std, 10).sums - clean for _ in range(40)])
    n = draws.size  # 40 x 50 x 10 = 20 000 normal draws
    expected = share_std * math.sqrt(federation.num_agents)
    assert abs(draws.mean()) < 5 * expected / math.sqrt(n)
    assert abs(draws.std() - expected) < 5 * expected / math.sqrt(2 * n)
    assert transport.reuse_counts()["teacher_trainings"] == 1


def test_write_sweep_files_hold_every_row(tmp_path):
    result = run_sweep([SMALL], parse_grid("sigma=2,4"), seeds=[0, 1])
    json_path, csv_path = write_sweep(result, tmp_path, command="fedvote sweep ...")
    saved = json.loads(json_path.read_text())
    assert saved["sweep"]["grid"] == {"sigma": [2.0, 4.0]} and saved["sweep"]["seeds"] == [0, 1]
    assert [row["seed"] for row in saved["rows"]] == [0, 0, 1, 1]
    assert saved["base_config"]["method"] == "pate-fl"
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and float(rows[1]["sigma"]) == 4.0
    assert float(rows[0]["accuracy"]) == saved["rows"][0]["accuracy"]


@pytest.mark.slow  # the sweep command end to end: make test-slow (CI); test_sweep_every_method runs it in make test
def test_sweep_command_two_methods(tmp_path):
    result = CliRunner().invoke(
        sweep_command,
        ["--method", "pate-fl,dp-fedavg", "--agents", "10", "--teacher-model", "logistic", "--epochs", "3",
         "--student-model", "logistic", "--self-training-rounds", "0", "--queries", "30",
         "--rounds", "3", "--sampling-rate", "1", "--gradient-model", "logistic",
         "--grid", "epsilon=2,8", "--noise-seed", "0", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert [(r["method"], r["point"]["epsilon"]) for r in saved["rows"]] == [
        ("pate-fl", 2.0), ("pate-fl", 8.0), ("dp-fedavg", 2.0), ("dp-fedavg", 8.0)
    ]
    for row in saved["rows"]:
        assert row["epsilon_agent"] <= row["point"]["epsilon"] + 1e-9
    assert "dp-fedavg" in result.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--grid", "rounds=1"], "--grid"),
        (["--grid", "epsilon=1", "--seeds", "a"], "--seeds"),
        (["--grid", "epsilon=1", "--method", "pate-fl,nope"], "--method"),
        (["--grid", "epsilon=1", "--secure-sum"], "--secure-sum"),
    ],
)
def test_sweep_command_refuses_bad_input_in_one_line(tmp_path, capsys, args, flag):
    from fedvote.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--out", str(tmp_path / "out"), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedvote: error: {flag}") and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_grid_points_of_a_sweep_draw_different_noise(monkeypatch):
    """Under one --noise-seed every run of a sweep — each grid point, each method — draws its own
    noise stream, while the same sweep run twice draws exactly the same noise."""
    import dataclasses

    import fedvote.sweep.execute as sweep_module

    runs, sums = [], []
    real_run, real_vote_sum = sweep_module.run, ReusedVotesTransport.vote_sum

    def recording_run(config, **kwargs):
        runs.append((config.method, config.privacy.noise_seed))
        return real_run(config, **kwargs)

    def recording_vote_sum(self, query_indices, noise_std, min_responders):
        released = real_vote_sum(self, query_indices, noise_std, min_responders)
        sums.append(released.sums.copy())
        return released

    monkeypatch.setattr(sweep_module, "run", recording_run)
    monkeypatch.setattr(ReusedVotesTransport, "vote_sum", recording_vote_sum)
    gradient = dataclasses.replace(
        SMALL, method="dp-fedavg", options={"rounds": 2, "sampling_rate": 1.0, "gradient_model": "logistic"}
    )
    first = run_sweep([SMALL, gradient], {"sigma": [4.0, 4.0]})  # the same point twice
    seeds = [seed for _, seed in runs]
    assert None not in seeds and len(set(seeds)) == 4  # two points × two methods, four streams
    assert len(sums) == 2 and not np.array_equal(sums[0], sums[1])  # the two points' noise differs
    first_runs, first_sums = list(runs), list(sums)
    runs.clear()
    sums.clear()
    again = run_sweep([SMALL, gradient], {"sigma": [4.0, 4.0]})
    assert runs == first_runs and all(np.array_equal(a, b) for a, b in zip(sums, first_sums, strict=True))
    assert [row.accuracy for row in again.rows] == [row.accuracy for row in first.rows]


def test_reseeding_the_reused_transport_restarts_its_noise_stream():
    federation = make_federation(SMALL)
    transport = ReusedVotesTransport(LocalTransport(federation, seed=0), noise_seed=1)
    transport.train_teachers(SMALL.teacher)
    queries = np.arange(5)
    transport.reseed(7)
    first = transport.vote_sum(queries, 1.0, 10).sums
    transport.reseed(7)
    np.testing.assert_array_equal(transport.vote_sum(queries, 1.0, 10).sums, first)
    transport.reseed(8)
    assert not np.array_equal(transport.vote_sum(queries, 1.0, 10).sums, first)
