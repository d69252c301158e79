"""``fedvote run --secure-noise`` end to end on digits, and its one-line refusals (exit 2, naming it)."""

from __future__ import annotations

import json

import pytest

from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_discrete_events

SMALL = ["--agents", "10", "--epochs", "5", "--teacher-model", "logistic", "--student-model", "logistic"]


def test_pate_fl_secure_noise_reports_the_discrete_gaussian_accountants_epsilon(invoke):
    # 20 agents, 40 teacher epochs: the noise is fresh CSPRNG noise each run (no seed), so what the
    # votes carry is checked with a margin. With 10 agents the released labels were right 0.40-0.58
    # of the time and the student fell below 0.2 about one run in nine; with 20 agents (twice the
    # votes, the same noise) the labels were right 0.725-0.875 over eight runs (2026-11-28).
    code, out, err = invoke(["run", "--method", "pate-fl", "--agents", "20", "--epochs", "40", "--teacher-model",
                             "logistic", "--student-model", "logistic", "--queries", "40", "--secure-noise",
                             "--epsilon", "4", "--json"])
    assert code == 0, err
    result = json.loads(out)
    privacy = result["privacy"]
    assert privacy["noise_source"] == "csprng-discrete-gaussian"
    assert result["config"]["privacy"]["secure_noise"] is True
    # t = N = 20 shares: KLS21's RDP (the pld accountant falls back to rdp, and says so)
    assert privacy["accountant"] == "rdp"
    events = pate_fl_discrete_events(result["sigma"], 20, result["queries"])
    assert privacy["agent"]["epsilon"] == pytest.approx(epsilon_for(events.agent, privacy["delta"], "rdp"), rel=1e-9)
    assert privacy["instance"]["epsilon"] == pytest.approx(epsilon_for(events.instance, privacy["delta"], "rdp"), rel=1e-9)
    assert privacy["agent"]["epsilon"] <= 4.0
    # The integer noisy votes carry the teachers' labels: at least 16 of the 40 released labels
    # right, which chance (0.1 a label) reaches with probability 6e-7 (binomial tail), and a
    # release right 0.7 of the time misses with probability 2e-5.
    right = round(result["label_accuracy"] * result["queries"])
    assert result["queries"] == 40 and right >= 16, result["label_accuracy"]
    assert result["accuracy"] > 0.2  # and the student learned from them


def test_dp_fedavg_secure_noise_is_the_distributed_discrete_gaussian(invoke):
    """Issue 46: quantised updates with exact discrete Gaussian shares from the OS CSPRNG, accounted
    by KLS21 in RDP (tests/methods/test_dp_fedavg_discrete.py checks its ε independently)."""
    code, out, err = invoke(["run", "--method", "dp-fedavg", "--agents", "10", "--rounds", "3", "--sigma", "1.0",
                             "--gradient-model", "logistic", "--secure-noise", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["privacy"]["noise_source"] == "csprng-distributed-discrete-gaussian"
    assert result["privacy"]["accountant"] == "rdp"
    assert result["privacy"]["agent"]["epsilon"] is not None and result["privacy"]["agent"]["epsilon"] > 0
    code, out, _ = invoke(["run", "--method", "dp-fedavg", "--agents", "10", "--rounds", "3", "--sigma", "1.0",
                           "--gradient-model", "logistic", "--json"])
    plain = json.loads(out)["privacy"]
    assert plain["noise_source"] == "pcg64-os-entropy"
    # the general subsampling bound of the discrete sum is looser than the float path's PLD
    assert result["privacy"]["agent"]["epsilon"] >= plain["agent"]["epsilon"]


def test_a_run_without_secure_noise_states_its_pcg64_source(invoke):
    code, out, _ = invoke(["run", "--method", "pate-fl", *SMALL, "--queries", "20", "--sigma", "5",
                           "--noise-seed", "3", "--json"])
    assert code == 0
    assert json.loads(out)["privacy"]["noise_source"] == "pcg64-seeded"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--method", "pate-fl", "--noise-seed", "3"], "cannot be seeded"),
        (["--method", "fedavg"], "adds no noise"),
        (["--method", "prifedsync"], "does not apply to prifedsync"),
        (["--method", "pate-fl", "--release", "labels"], "Confident-GNMax"),
    ],
)
def test_secure_noise_is_refused_in_one_line_where_it_does_not_apply(args, says, invoke):
    code, out, err = invoke(["run", *args, "--secure-noise"])
    assert code == 2
    assert err.count("\n") == 1 and "--secure-noise" in err and says in err
    assert out == ""



def test_dp_fedsgd_secure_noise_seeds_its_dp_sgd_generators_from_the_os(invoke):
    code, out, err = invoke(["run", "--method", "dp-fedsgd", "--agents", "10", "--rounds", "1", "--sigma", "1.0",
                             "--secure-noise", "--json"])
    assert code == 0, err
    assert json.loads(out)["privacy"]["noise_source"] == "csprng-seeded-torch"
