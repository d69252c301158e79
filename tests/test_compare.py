import json

import pytest
from click.testing import CliRunner

from fedvote.cli.compare import compare as compare_command
from fedvote.compare import compare, format_table
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig

SMALL = RunConfig(
    federation=FederationConfig(agents=10),
    privacy=PrivacyConfig(noise_seed=0),
    # gradient settings on a pate-fl config: compare hands each row the options its method takes
    options={"rounds": 8, "sampling_rate": 1.0, "batch_sampling_rate": 1.0, "gradient_model": "logistic"},
)


def test_compare_rows_and_json(tmp_path):
    rows = compare(SMALL, ["fedavg", "dp-fedavg", "dp-fedsgd"], epsilon=4.0, delta=1e-3, out_dir=tmp_path)
    by_name = {row.method: row for row in rows}
    assert by_name["fedavg"].epsilon_agent is None and by_name["fedavg"].calibrated_level is None
    dp_fedavg = by_name["dp-fedavg"]
    assert dp_fedavg.calibrated_level == "agent"
    assert 3.95 <= dp_fedavg.epsilon_agent <= 4.0
    dp_fedsgd = by_name["dp-fedsgd"]
    assert dp_fedsgd.calibrated_level == "instance" and dp_fedsgd.epsilon_agent is None
    assert 3.95 <= dp_fedsgd.epsilon_instance <= 4.0
    for row in rows:
        assert row.rounds == 8 and row.upload_floats > 0 and 0.0 <= row.accuracy <= 1.0
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert [r["method"] for r in saved["rows"]] == ["fedavg", "dp-fedavg", "dp-fedsgd"]
    assert saved["target_epsilon"] == 4.0 and saved["rows"][0]["epsilon_agent"] is None
    table = format_table(rows)
    assert "dp-fedavg" in table and "∞" in table


@pytest.mark.slow  # the compare command end to end: make test-slow (CI); run_comparison is checked in make test
def test_compare_command_prints_table(tmp_path):
    result = CliRunner().invoke(
        compare_command,
        ["--methods", "fedavg,dp-fedavg", "--agents", "10", "--rounds", "5", "--sampling-rate", "0.5", "--epsilon", "4",
         "--noise-seed", "1", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    assert "dp-fedavg" in result.output and "ε agent" in result.output
    assert (tmp_path / "compare.json").exists()


def test_compare_refuses_unknown_method():
    from fedvote.errors import ConfigError

    with pytest.raises(ConfigError):
        compare(SMALL, ["nope"], epsilon=1.0, delta=1e-3)


@pytest.mark.slow  # the compare command end to end: make test-slow (CI); run_comparison is checked in make test
def test_compare_command_runs_on_a_recorded_config(tmp_path):
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(SMALL.to_dict()))
    runner = CliRunner()
    result = runner.invoke(
        compare_command, ["--config", str(config_file), "--methods", "fedavg,dp-fedavg", "--epsilon", "4", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["method"] for r in rows] == ["fedavg", "dp-fedavg"]
    assert rows[1]["rounds"] == 8  # the recorded gradient options, not the defaults
    clash = runner.invoke(compare_command, ["--config", str(config_file), "--agents", "3"])
    assert clash.exit_code != 0


REPLACE_ONE_SMALL = RunConfig(
    federation=FederationConfig(agents=10),
    privacy=PrivacyConfig(noise_seed=0),
    options={"rounds": 4, "sampling_rate": 1.0, "batch_sampling_rate": 0.25, "gradient_model": "logistic"},
)


def test_compare_reports_every_instance_epsilon_under_replace_one():
    """One adjacency per column: DP-FedSGD's instance ε is its replace-one figure (dp-accounting's
    REPLACE_ONE PLD, computed here independently at the σ it ran with), calibrated to the target;
    every row says replace-one and the table header names the adjacency."""
    import math

    from dp_accounting import dp_event, pld
    from dp_accounting.privacy_accountant import NeighboringRelation

    from fedvote.privacy.accountant import gaussian_epsilon

    rows = compare(REPLACE_ONE_SMALL, ["dp-fedsgd", "dp-fedavg"], epsilon=4.0, delta=1e-3)
    by_name = {row.method: row for row in rows}
    fedsgd = by_name["dp-fedsgd"]
    replace_one = pld.PLDAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE).compose(
        dp_event.PoissonSampledDpEvent(0.25, dp_event.GaussianDpEvent(fedsgd.sigma)), 4
    ).get_epsilon(1e-3)
    assert fedsgd.epsilon_instance == pytest.approx(replace_one, rel=1e-3)
    assert 3.95 <= fedsgd.epsilon_instance <= 4.0 + 1e-6  # calibrated to the replace-one ε
    fedavg = by_name["dp-fedavg"]  # q = 1: a replaced record moves the sum by 2S, noise σS
    assert fedavg.epsilon_instance == pytest.approx(gaussian_epsilon(2 * math.sqrt(4) / fedavg.sigma, 1e-3), rel=1e-3)
    assert all(row.instance_adjacency.startswith("replace-one") for row in rows)
    header = format_table(rows).splitlines()[0]
    assert "ε instance (replace-one)" in header and "ε agent (zero-out)" in header


def _record_noise_seeds(monkeypatch):
    """Record, per run, the noise seed of the agents' transport and the first draws of the
    server's privacy generator (agent sampling, server noise)."""
    import numpy as np

    import fedvote.methods.gradient as gradient
    import fedvote.runner as runner

    seen: list[tuple[str, object]] = []
    real_generator = gradient.privacy_generator

    def recording_generator(noise_seed, tag):
        seen.append(("sampling", tuple(real_generator(noise_seed, tag).random(4))))
        return real_generator(noise_seed, tag)

    class RecordingTransport(runner.LocalTransport):
        def __init__(self, federation, **kwargs):
            seen.append(("agents", kwargs.get("noise_seed")))
            super().__init__(federation, **kwargs)

    monkeypatch.setattr(gradient, "privacy_generator", recording_generator)
    monkeypatch.setattr(runner, "LocalTransport", RecordingTransport)
    return seen, np


def test_methods_in_one_compare_draw_different_noise(monkeypatch):
    """Under one --noise-seed every method of a compare draws its own noise (agents' shares and
    sampling), while the same compare run twice draws exactly the same."""
    seen, _ = _record_noise_seeds(monkeypatch)
    first = compare(SMALL, ["fedavg", "dp-fedavg"], epsilon=4.0, delta=1e-3)
    first_seen = list(seen)
    assert len(first_seen) == 4  # per method: its transport, then its privacy generator
    (_, fedavg_agents), (_, fedavg_draws), (_, fedavg_dp_agents), (_, dp_draws) = first_seen
    assert fedavg_agents is not None and fedavg_agents != fedavg_dp_agents
    assert fedavg_draws != dp_draws
    assert [row.noise_seed for row in first] == [fedavg_agents, fedavg_dp_agents]
    seen.clear()
    again = compare(SMALL, ["fedavg", "dp-fedavg"], epsilon=4.0, delta=1e-3)
    assert seen == first_seen
    assert [row.accuracy for row in again] == [row.accuracy for row in first]


def test_each_row_gets_only_the_options_its_method_takes():
    """A compare's config carries the settings of all its methods; each row gets its own."""
    from fedvote.compare import _row_config

    config = RunConfig(options={"release": "labels", "k": 3, "rounds": 8, "clip_norm": 0.5, "noise": "server",
                                "batch_sampling_rate": 0.5, "gradient_model": "logistic"})
    rows = {name: _row_config(config, name, epsilon=4.0, delta=1e-3).options
            for name in ("pate-fl", "private-knn-fl", "fedavg", "dp-fedavg", "dp-fedsgd")}
    assert rows == {
        "pate-fl": {"release": "labels"},
        "private-knn-fl": {"k": 3},
        "fedavg": {"rounds": 8, "gradient_model": "logistic"},
        "dp-fedavg": {"rounds": 8, "clip_norm": 0.5, "noise": "server", "gradient_model": "logistic"},
        "dp-fedsgd": {"rounds": 8, "batch_sampling_rate": 0.5, "gradient_model": "logistic"},
    }


def test_a_bad_option_of_any_row_is_refused_before_anything_is_loaded(monkeypatch):
    from fedvote import compare as compare_module
    from fedvote.errors import ConfigError

    def no_data(config):
        raise AssertionError("the data was loaded before the options were checked")

    monkeypatch.setattr(compare_module, "make_federation", no_data)
    with pytest.raises(ConfigError) as error:
        compare(RunConfig(options={"rounds": 0}), ["pate-fl", "dp-fedavg"], epsilon=4.0, delta=1e-3)
    assert error.value.argument == "rounds"


def test_compare_refuses_a_gradient_flag_no_compared_method_takes(capsys):
    from fedvote.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--methods", "pate-fl,private-knn-fl", "--rounds", "5"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "fedvote: error: --rounds: is not an option of method 'pate-fl' or 'private-knn-fl'"
    )


def test_compare_takes_every_methods_own_options_as_fedvote_run_does(monkeypatch, capsys):
    """Issue 44: compare's method flags are run's (cli.options.method_option_flags), each routed to
    the rows whose method takes it; before, only five gradient flags were declared by hand."""
    import fedvote.compare as compare_module
    from fedvote.cli import main

    seen = {}

    def stop(config, names, **kwargs):
        seen.update(config=config, names=names)
        raise SystemExit(0)

    monkeypatch.setattr(compare_module, "run_comparison", stop)
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--methods", "private-knn-fl,dp-fedavg", "--k", "3", "--noise", "server",
              "--rounds", "5"])  # fmt: skip
    assert exit_info.value.code == 0, capsys.readouterr().err
    assert seen["config"].options == {"k": 3, "noise": "server", "rounds": 5}
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--methods", "pate-fl,dp-fedavg", "--k", "3"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "fedvote: error: --k: is not an option of method 'pate-fl' or 'dp-fedavg'"


def test_compare_declares_the_run_flags_it_takes_once_with_run():
    """Issue 44: compare's --delta, --accountant, --queries, --epochs, --seed are run's declarations."""
    from fedvote.cli.app import run as run_command
    from fedvote.cli.run_options import run_flags

    def declared(command, name):
        (param,) = [param for param in command.params if param.name == name]
        return param.opts, repr(param.type), param.default, param.help

    for name in ("delta", "accountant", "queries", "epochs", "seed", "ledger", "budget_epsilon", "noise_seed"):
        assert declared(compare_command, name)[:3] == declared(run_command, name)[:3], name
    for name in ("delta", "accountant", "queries", "epochs", "seed"):
        assert declared(compare_command, name) == declared(run_command, name), name
    with pytest.raises(TypeError):
        run_flags("no_such_flag")


def test_a_stopped_compare_writes_its_rows_incomplete_and_a_complete_one_replaces_them(tmp_path):
    """write_stopped: compare.json (complete false) and charged.json; a later complete compare.json
    in the same directory removes that charged.json (one outcome per directory)."""
    from fedvote.compare import Comparison, write_comparison, write_stopped

    stopped = Comparison(rows=[], total_epsilon={"agent": 1.5, "instance": 2.0}, complete=False,
                         stopped_by="interrupt", charged="2 release(s) were charged before it stopped: …",
                         charges=2, methods=("pate-fl", "dp-fedavg"))  # fmt: skip
    write_stopped(stopped, SMALL, epsilon=4.0, delta=1e-3, out_dir=tmp_path)
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["complete"] is False and saved["methods_without_row"] == ["pate-fl", "dp-fedavg"]
    record = json.loads((tmp_path / "charged.json").read_text())
    assert record["charged"] == stopped.charged and record["charges"] == 2 and record["result"] is None
    write_comparison(Comparison(rows=[], total_epsilon={"agent": None}), SMALL, epsilon=4.0, delta=1e-3,
                     out_dir=tmp_path)  # fmt: skip
    assert json.loads((tmp_path / "compare.json").read_text())["complete"] is True
    assert not (tmp_path / "charged.json").exists()
