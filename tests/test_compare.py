import json

import pytest
from click.testing import CliRunner

from fedvote.compare import compare, format_table
from fedvote.compare_cli import compare as compare_command
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.methods.gradient import GradientOptions

SMALL = RunConfig(
    federation=FederationConfig(agents=10),
    privacy=PrivacyConfig(noise_seed=0),
    gradient=GradientOptions(rounds=8, sampling_rate=1.0, batch_sampling_rate=1.0, model="logistic"),
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
    assert rows[1]["rounds"] == 8  # the recorded GradientOptions, not the defaults
    clash = runner.invoke(compare_command, ["--config", str(config_file), "--agents", "3"])
    assert clash.exit_code != 0
