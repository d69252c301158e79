"""``fedvote account``: JSON figures against dp-accounting computed independently here,
and one-line errors naming the flag."""

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld, rdp

from fedvote.cli import cli, main
from fedvote.cli.account import account

# The group is registered in fedvote.cli by the core; registering again is harmless.
cli.add_command(account)

ORDERS = list(np.concatenate([np.linspace(1.02, 2.0, 50), np.linspace(2.05, 64.0, 1240)]))


def run_json(capsys, *args):
    main(["account", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def run_error(capsys, *args):
    with pytest.raises(SystemExit) as caught:
        main(["account", *args])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert err.startswith("fedvote: error: ") and err.count("\n") == 1
    return err


def test_pate_fl_bar_numbers(capsys):
    args = ["pate-fl", "--sigma", "25", "--queries", "500", "--delta", "1e-3", "--level", "agent"]
    independent_pld = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(25.0), 500).get_epsilon(1e-3)
    independent_rdp = rdp.RdpAccountant(orders=ORDERS).compose(dp_event.GaussianDpEvent(25.0), 500).get_epsilon(1e-3)
    out = run_json(capsys, *args)
    assert out["accountant"] == "pld" and out["delta"] == 1e-3 and out["level"] == "agent"
    assert out["epsilon"] == pytest.approx(independent_pld, rel=0.01)
    assert out["epsilon"] == pytest.approx(2.74, abs=0.01)
    assert out["mu"] == pytest.approx(math.sqrt(500) / 25)
    rdp_out = run_json(capsys, *args, "--accountant", "rdp")
    assert rdp_out["epsilon"] == pytest.approx(independent_rdp, rel=0.01)
    assert rdp_out["epsilon"] == pytest.approx(3.09, abs=0.01)
    classic = run_json(capsys, *args, "--accountant", "classic")["epsilon"]
    mu, log_inv_delta = math.sqrt(500) / 25, math.log(1e3)
    assert classic == pytest.approx(mu**2 / 2 + mu * math.sqrt(2 * log_inv_delta), rel=1e-9)
    assert classic == pytest.approx(3.7, abs=0.05)
    exact = run_json(capsys, *args, "--accountant", "exact")["epsilon"]
    assert exact == pytest.approx(independent_pld, rel=0.01)
    instance = run_json(capsys, *args[:-1], "instance")
    assert instance["sensitivity"] == pytest.approx(math.sqrt(2))


def test_gaussian(capsys):
    out = run_json(capsys, "gaussian", "--sigma", "10", "--sensitivity", "2", "--count", "40", "--delta", "1e-5")
    independent = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(5.0), 40).get_epsilon(1e-5)
    assert out["epsilon"] == pytest.approx(independent, rel=0.01)


def test_private_knn_fl_bounds(capsys):
    base = ["private-knn-fl", "--sigma", "15", "--queries", "200", "--k", "10", "--delta", "1e-4",
            "--level", "instance"]
    tight = run_json(capsys, *base)
    paper = run_json(capsys, *base, "--bound", "paper")
    assert tight["sensitivity"] == pytest.approx(math.sqrt(2) / 10)
    assert paper["sensitivity"] == pytest.approx(math.sqrt(2 / 10))
    independent = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(15 * 10 / math.sqrt(2)), 200)
    assert tight["epsilon"] == pytest.approx(independent.get_epsilon(1e-4), rel=0.01)
    assert tight["epsilon"] < paper["epsilon"]


def test_dp_sgd(capsys):
    out = run_json(capsys, "dp-sgd", "--sampling-rate", "0.004", "--noise-multiplier", "1.0", "--steps", "2000",
                   "--delta", "1e-5")
    independent = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(0.004, dp_event.GaussianDpEvent(1.0)), 2000
    ).get_epsilon(1e-5)
    assert out["epsilon"] == pytest.approx(independent, rel=0.01)


def test_gdp_clt_reproduces_table_1(capsys):
    out = run_json(capsys, "gdp-clt", "--sigma", "1", "--batch-size", "16", "--records", "600",
                   "--local-steps", "38", "--rounds", "93", "--clients", "100")
    assert round(out["mu"], 2) == 2.71
    assert out["mu_strong"] == pytest.approx(math.sqrt(99) * out["mu"])
    assert 0 < out["epsilon_pld"] < out["epsilon"]


def test_votes(capsys, tmp_path):
    histogram = np.zeros((300, 10))
    histogram[:, 0], histogram[:, 1] = 180, 20
    histogram[:30] = 20  # thirty queries with no consensus at all
    path = tmp_path / "votes.npy"
    np.save(path, histogram)
    out = run_json(capsys, "votes", "--histogram", str(path), "--sigma", "25", "--delta", "1e-3")
    assert out["epsilon"] <= out["epsilon_data_independent"]
    assert out["label"] == "data-dependent (not itself private)"
    assert len(out["per_query"]["epsilon"]) == 300
    main(["account", "votes", "--histogram", str(path), "--sigma", "25", "--delta", "1e-3"])
    assert "not itself private" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["gaussian", "--sigma", "-1", "--count", "3", "--delta", "1e-3"], "--sigma"),
        (["pate-fl", "--sigma", "10", "--queries", "3", "--delta", "2"], "--delta"),
        (["private-knn-fl", "--sigma", "10", "--queries", "3", "--k", "0", "--delta", "1e-3"], "--k"),
        (["dp-sgd", "--sampling-rate", "1.5", "--noise-multiplier", "1", "--steps", "3", "--delta", "1e-5"],
         "--sampling-rate"),
        (["votes", "--histogram", "/nonexistent/v.npy", "--sigma", "1", "--delta", "1e-3"], "--histogram"),
        (["gdp-clt", "--sigma", "1", "--batch-size", "700", "--records", "600", "--local-steps", "1",
          "--rounds", "1"], "--batch-size"),
        (["pate-fl", "--sigma", "10", "--queries", "3", "--delta", "1e-3", "--accountant", "moments"],
         "--accountant"),
    ],
)
def test_bad_input_is_a_one_line_error_naming_the_flag(capsys, args, flag):
    assert flag in run_error(capsys, *args)
