"""Every refusal names what the user can change: the flag typed, or the config file and its key.

A value read from a ``--config`` file (a result.json's config, or one written by hand) is
refused as ``--config: FILE: key: ...`` (``teacher.learning_rate``), never as a flag the user
did not type (``--learning-rate`` is a gradient method's option, not the teachers' step
size). A value from a flag names that flag: ``--student-epochs``, not ``--epochs``;
``--target``, not ``--dataset``. One line, exit 2, nothing run.
"""

from __future__ import annotations

import json

import pytest

from fedvote.config import RunConfig, load_run_config
from fedvote.errors import ConfigError


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# A config file's value, the key it is refused by, and the start of the reason.
CONFIG_VALUES = [
    ({"teacher": {"learning_rate": -1}}, "teacher.learning_rate", "must be > 0, got -1"),
    ({"student": {"learning_rate": 0}}, "student.learning_rate", "must be > 0, got 0"),
    ({"teacher": {"epochs": 0}}, "teacher.epochs", "must be at least 1, got 0"),
    ({"student": {"epochs": 0}}, "student.epochs", "must be at least 1, got 0"),
    ({"student": {"batch_size": 0}}, "student.batch_size", "must be at least 1, got 0"),
    ({"teacher": {"model": "resnet"}}, "teacher.model", "unknown model 'resnet'"),
    ({"federation": {"agents": 0}}, "federation.agents", "must be at least 1, got 0"),
    ({"federation": {"partition": {"scheme": "dirichlet", "alpha": 0}}}, "federation.partition.alpha",
     "the Dirichlet concentration must be > 0"),
    ({"federation": {"partition": {"scheme": "zigzag"}}}, "federation.partition.scheme", "unknown scheme"),
    ({"federation": {"target": "nope"}}, "federation.target", "unknown dataset 'nope'"),
    ({"federation": {"dataset": "nope"}}, "federation.dataset", "unknown dataset 'nope'"),
    ({"privacy": {"epsilon": -1}}, "privacy.epsilon", "must be a finite number > 0"),
    ({"privacy": {"delta": 2}}, "privacy.delta", "must lie in (0, 1)"),
    ({"queries": 0}, "queries", "must be at least 1, got 0"),
    ({"method": "dp-fedavg", "options": {"learning_rate": -1}}, "options.learning_rate", "must be > 0"),
    ({"method": "pate-fl", "options": {"learning_rate": 1}}, "options.learning_rate",
     "is not an option of method 'pate-fl'"),
    ({"method": "dp-magic"}, "method", "unknown method 'dp-magic'"),
    ({"privacy": {"ledger": "/proc/nowhere/l.db"}}, "privacy.ledger", "the directory /proc/nowhere does not exist"),
]  # fmt: skip


def _config_file(tmp_path, values):
    """A hand-written config with a federation section (a config without one is refused for that)."""
    data = {"federation": {}, **values}
    if "federation" in values:
        data["federation"] = values["federation"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("values", "key", "reason"), CONFIG_VALUES, ids=lambda v: v if isinstance(v, str) else None)
def test_run_config_names_the_file_and_the_key(tmp_path, invoke, no_run, values, key, reason):
    path = _config_file(tmp_path, values)
    code, out, err = invoke(["run", "--config", path])
    assert code == 2 and out == "" and no_run == []
    assert _one_line(err).startswith(f"fedvote: error: --config: {path}: {key}: {reason}")


@pytest.mark.parametrize(
    ("values", "key"),
    [({"teacher": {"learning_rate": -1}}, "teacher.learning_rate"),
     ({"method": "dp-fedavg", "options": {"rounds": 0}}, "options.rounds"),
     ({"federation": {"target": "nope"}}, "federation.target")],
)  # fmt: skip
def test_compare_and_label_config_name_the_file_and_the_key(tmp_path, invoke, no_run, values, key):
    path = _config_file(tmp_path, values)
    queries = tmp_path / "queries.npy"
    queries.write_bytes(b"")
    for command in (["compare", "--methods", "pate-fl,dp-fedavg"], ["label", "--queries", queries]):
        code, out, err = invoke([*command, "--config", path])
        assert code == 2 and out == "" and no_run == []
        assert _one_line(err).startswith(f"fedvote: error: --config: {path}: {key}: "), (command, err)


def test_a_recorded_result_json_names_its_key(tmp_path, invoke, no_run):
    recorded = RunConfig().to_dict()
    recorded["teacher"]["learning_rate"] = -1.0
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"config": recorded}))
    code, _, err = invoke(["run", "--config", path])
    assert code == 2
    line = _one_line(err)
    assert line == f"fedvote: error: --config: {path}: teacher.learning_rate: must be > 0, got -1.0"
    assert "--learning-rate" not in line


def test_load_run_config_refuses_as_the_config_argument(tmp_path):
    path = _config_file(tmp_path, {"student": {"learning_rate": 0}})
    with pytest.raises(ConfigError) as error:
        load_run_config(path)
    assert error.value.argument == "config"
    assert error.value.detail == f"{path}: student.learning_rate: must be > 0, got 0"


def test_from_dict_names_the_key():
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"federation": {}, "teacher": {"learning_rate": -1}})
    assert (error.value.argument, error.value.detail) == ("config", "teacher.learning_rate: must be > 0, got -1")


def test_compare_checks_a_configs_options_against_the_compared_methods(tmp_path):
    # `fedvote compare --config` hands each row the options its method takes (fedvote.compare); the
    # file's own method (pate-fl) does not take the recorded gradient settings, the compared ones do.
    from fedvote.config import RunConfig
    from fedvote.settings.ledger_path import with_checked_ledger

    path = tmp_path / "config.json"
    config = RunConfig(method="pate-fl", options={"rounds": 8})
    path.write_text(json.dumps(config.to_dict()))
    assert with_checked_ledger(config, str(path), methods=["fedavg", "dp-fedavg"]).options == {"rounds": 8}
    with pytest.raises(ConfigError, match=r"options\.rounds: is not an option of method 'pate-fl'"):
        with_checked_ledger(config, str(path))  # run --config: the file's own method
    bad = RunConfig(method="pate-fl", options={"rounds": 0})
    with pytest.raises(ConfigError, match=r"options\.rounds: "):
        with_checked_ledger(bad, str(path), methods=["fedavg", "pate-fl"])
