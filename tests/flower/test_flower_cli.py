"""``fedvote deploy``: files, the Flower App project, and refusals before anything starts."""

from __future__ import annotations

import contextlib
import json

import pytest
import tomli

from fedvote.cli import main
from fedvote.cli.deploy import deployment_summary


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    (root / "run.json").write_text(json.dumps({"federation": {"dataset": "digits", "agents": 3}, "queries": 20}))
    main_args = ["deploy", "split", "--config", str(root / "run.json"), "--out", str(root / "fed")]
    with pytest.raises(SystemExit) as exit_info:
        main(main_args)
        raise SystemExit(0)
    assert exit_info.value.code == 0
    return root / "fed"


def test_split_writes_one_file_per_agent_the_server_file_and_the_config(fed):
    assert sorted(p.name for p in fed.iterdir()) == [
        "agent-0.npz", "agent-1.npz", "agent-2.npz", "run.json", "server.npz",
    ]
    assert json.loads((fed / "run.json").read_text())["federation"]["agents"] == 3


def test_agent_refuses_another_agents_file(fed, invoke):
    code, _, err = invoke(["deploy", "agent", "--id", "1", "--data", str(fed / "agent-0.npz"), "--insecure"])
    assert code == 2
    assert err.strip() == f"fedvote: error: --id: {fed / 'agent-0.npz'} holds agent 0, not agent 1"


def test_agent_needs_tls_or_an_explicit_insecure(fed, invoke):
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", str(fed / "agent-0.npz")])
    assert code == 2 and "--root-certificates" in err and len(err.strip().splitlines()) == 1


def test_server_refuses_half_a_tls_setup(fed, tmp_path, invoke):
    cert = tmp_path / "server.pem"
    cert.write_text("not used")
    code, _, err = invoke(
        ["deploy", "server", "--config", str(fed / "run.json"), "--data", str(fed / "server.npz"),
         "--out", str(tmp_path / "out"), "--ssl-certfile", str(cert)],
    )
    assert code == 2 and "--ssl-keyfile" in err


def test_agent_refuses_a_file_that_is_not_an_agent_file(fed, invoke):
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", str(fed / "server.npz"), "--insecure"])
    assert code == 2 and "is no fedvote agent file" in err


def test_app_writes_the_flower_app_project(tmp_path, invoke):
    code, out, _ = invoke(["deploy", "app", str(tmp_path / "app")])
    assert code == 0
    project = tomli.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert project["tool"]["flwr"]["app"]["components"] == {
        "serverapp": "fedvote.flower.app:server_app",
        "clientapp": "fedvote.flower.app:client_app",
    }


def test_deployment_summary_names_refused_rounds_and_dropouts():
    result = {
        "method": "pate-fl", "agents": 5, "queries": 10, "sigma": 2.0, "accuracy": 0.5,
        "label_accuracy": None, "privacy": {"delta": 1e-3, "agent": {"epsilon": 1.5}, "instance": {"epsilon": None}},
        "flower": {"released_rounds": 1, "refused_rounds": 2, "dropped_agents": [4]},
    }
    text = deployment_summary(result)
    assert "1 released, 2 refused" in text and "dropped agents        4" in text
    assert "unbounded" in text


# --- an earlier result.json survives a failed run (its budget was spent) -------------------------


def _server_args(fed, out):
    return ["deploy", "server", "--config", fed / "run.json", "--data", fed / "server.npz", "--out", out,
            "--superlink", "127.0.0.1:1", "--insecure"]  # a running SuperLink: nothing started here


def test_a_failed_server_run_keeps_the_earlier_result(fed, tmp_path, invoke, monkeypatch):
    import fedvote.cli.deploy as deploy_module

    out = tmp_path / "out"
    out.mkdir()
    earlier = '{"earlier": "a charged result"}\n'
    (out / "result.json").write_text(earlier)
    monkeypatch.setattr(deploy_module, "run_foreground", lambda command, home: 1)  # flwr run fails
    code, _, err = invoke(_server_args(fed, out))
    assert code == 1 and "wrote no result" in err and "earlier result.json in --out is kept" in err
    assert (out / "result.json").read_text() == earlier


def test_a_server_run_that_writes_a_result_replaces_the_earlier_one(fed, tmp_path, invoke, monkeypatch):
    import fedvote.cli.deploy as deploy_module
    from fedvote.results import write_atomic

    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text('{"earlier": true}\n')
    new = {
        "method": "pate-fl", "agents": 3, "queries": 20, "sigma": 2.0, "accuracy": 0.5, "label_accuracy": None,
        "privacy": {"delta": 1e-3, "agent": {"epsilon": 1.0}, "instance": {"epsilon": 2.0}}, "flower": {},
    }

    def flwr_run(command, home):  # the ServerApp writes atomically, as write_result does
        write_atomic(out / "result.json", json.dumps(new))
        return 0

    monkeypatch.setattr(deploy_module, "run_foreground", flwr_run)
    code, stdout, _ = invoke(_server_args(fed, out))
    assert code == 0 and "fedvote pate-fl on Flower" in stdout
    assert json.loads((out / "result.json").read_text()) == new


# --- a damaged file (a valid zip, a member with a bad CRC) is one line -------------------------


def _damaged_copy(source, target):
    """``source`` with bytes flipped in the middle: the zip's directory intact, a member damaged."""
    data = bytearray(source.read_bytes())
    middle = len(data) // 2
    for i in range(middle, middle + 64):
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


def test_deploy_agent_refuses_a_damaged_agent_file_in_one_line(fed, tmp_path, invoke):
    damaged = _damaged_copy(fed / "agent-0.npz", tmp_path / "agent-0.npz")
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", damaged, "--insecure"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: --data: cannot read {damaged}")


def test_deploy_server_refuses_a_damaged_server_file_in_one_line(fed, tmp_path, invoke):
    damaged = _damaged_copy(fed / "server.npz", tmp_path / "server.npz")
    code, _, err = invoke(["deploy", "server", "--config", fed / "run.json", "--data", damaged,
                           "--out", tmp_path / "out", "--insecure"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: --data: cannot read {damaged}")


# --- deployment options checked while the flags are parsed, before Flower starts -------------


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--clip-sigmas", "inf"], "--clip-sigmas"),
        (["--clip-sigmas", "nan"], "--clip-sigmas"),
        (["--clip-sigmas", "0"], "--clip-sigmas"),
        (["--round-timeout", "-1"], "--round-timeout"),
        (["--train-timeout", "0"], "--train-timeout"),
        (["--connect-timeout", "-1"], "--connect-timeout"),
        (["--connect-timeout", "inf"], "--connect-timeout"),
        (["--query-batch-size", "-5"], "--query-batch-size"),
        (["--port", "70000"], "--port"),
        (["--port", "0"], "--port"),
    ],
)
def test_deploy_server_refuses_bad_options_in_one_line_before_flower_starts(
    fed, tmp_path, invoke, monkeypatch, extra, flag
):
    import fedvote.cli.deploy as deploy_module

    def no_flower(name):
        raise AssertionError("Flower was started")

    monkeypatch.setattr(deploy_module, "_flower_executable", no_flower)
    args = ["deploy", "server", "--config", fed / "run.json", "--data", fed / "server.npz",
            "--out", tmp_path / "out", "--insecure", *extra]
    code, _, err = invoke(args)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: {flag}: ")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["deploy", "superlink", "--insecure", "--port", "70000"], "--port"),
        (["deploy", "simulate", "--data-dir", "DIR", "--out", "sim", "--clip-sigmas", "inf"], "--clip-sigmas"),
    ],
)
def test_superlink_and_simulate_refuse_bad_options_in_one_line(fed, args, flag, invoke, monkeypatch):
    import fedvote.cli.deploy as deploy_module

    monkeypatch.setattr(deploy_module, "_flower_executable", lambda name: pytest.fail("Flower was started"))
    code, _, err = invoke([str(fed) if arg == "DIR" else arg for arg in args])
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(f"fedvote: error: {flag}: ")


def test_deploy_agent_refuses_a_port_out_of_range(fed, invoke):
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", fed / "agent-0.npz", "--insecure",
                           "--port", "70000"])
    assert code == 2 and err.strip() == "fedvote: error: --port: must be a TCP port from 1 to 65535, got 70000"


def test_the_library_refuses_what_the_flags_refuse(fed):
    from fedvote.config import load_run_config
    from fedvote.errors import ConfigError
    from fedvote.flower.files import load_server_file, planned_method
    from fedvote.flower.secagg import secagg_settings

    with pytest.raises(ConfigError) as error:
        secagg_settings(1.0, 3, 3, clip_sigmas=float("inf"), integer=True)
    assert error.value.argument == "clip_sigmas"
    with pytest.raises(ConfigError) as error:  # was silently the method's default
        planned_method(load_run_config(fed / "run.json"), load_server_file(fed / "server.npz"),
                       clip_sigmas=20.0, query_batch_size=-5)
    assert error.value.argument == "query_batch_size"


# --- split: a method Flower runs, an --out without an earlier split -----------------------------


def test_split_refuses_a_method_flower_does_not_run_and_writes_nothing(tmp_path, invoke):
    from fedvote.flower.files import flower_methods

    config = tmp_path / "run.json"
    config.write_text(json.dumps({"method": "dp-fedavg", "federation": {"dataset": "digits", "agents": 3}}))
    code, _, err = invoke(["deploy", "split", "--config", config, "--out", tmp_path / "fed"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("fedvote: error: --config: the config's method is dp-fedavg; Flower runs ")
    assert all(name in err for name in flower_methods())
    assert not (tmp_path / "fed").exists()


def test_split_refuses_a_single_agent_federation_flower_cannot_run_and_writes_nothing(tmp_path, invoke):
    # Found by the QA pass: a 1-agent split was written, and its server refused it only when it started.
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"federation": {"dataset": "digits", "agents": 1}}))
    code, _, err = invoke(["deploy", "split", "--config", config, "--out", tmp_path / "fed"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(
        f"fedvote: error: --config: {config}: federation.agents: a Flower federation needs at least 2 agents, got 1"
    )
    assert not (tmp_path / "fed").exists()


def test_split_refuses_an_out_holding_an_earlier_split_and_leaves_it_as_it_was(fed, tmp_path, invoke):
    import shutil

    out = tmp_path / "fed"
    shutil.copytree(fed, out)  # a 3-agent split; a 5-agent one there would be refused alike
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"federation": {"dataset": "digits", "agents": 2}, "queries": 20}))
    code, _, err = invoke(["deploy", "split", "--config", config, "--out", out])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: --out: {out} holds the files of an earlier split (agent-0.npz, ")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


# --- deploy app: never over another pyproject.toml, never into "" ---------------------------------


def test_app_refuses_a_directory_holding_a_pyproject_and_leaves_it(tmp_path, invoke):
    theirs = tmp_path / "pyproject.toml"
    theirs.write_text('[project]\nname = "someone-elses"\n')
    code, _, err = invoke(["deploy", "app", tmp_path])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "DIRECTORY" in err and "exists" in err
    assert theirs.read_text() == '[project]\nname = "someone-elses"\n'


def test_app_refuses_an_empty_directory_name(tmp_path, invoke, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(["deploy", "app", ""])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "DIRECTORY" in err and "empty" in err
    assert not (tmp_path / "pyproject.toml").exists()


def test_write_app_project_refuses_by_name_unless_told_to_overwrite_its_own(tmp_path):
    from fedvote.errors import ConfigError
    from fedvote.flower.app import write_app_project

    write_app_project(tmp_path / "app")
    with pytest.raises(ConfigError) as error:
        write_app_project(tmp_path / "app")
    assert error.value.argument == "directory"
    with pytest.raises(ConfigError):
        write_app_project("")
    assert write_app_project(tmp_path / "app", overwrite=True) == tmp_path / "app" / "pyproject.toml"


# --- --superlink: an address Flower would retry in vain is refused before it starts ----------------


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("nohost", "'nohost' is no HOST:PORT"),
        ("nohost.invalid:9093", "host 'nohost.invalid' of nohost.invalid:9093 does not resolve"),
        ("127.0.0.1:70000", "port 70000 of 127.0.0.1:70000 is no TCP port"),
        ("127.0.0.1:", "'127.0.0.1:' is no HOST:PORT"),
    ],
)
def test_deploy_agent_refuses_a_superlink_that_cannot_be_reached_in_one_line(fed, invoke, monkeypatch,
                                                                              address, why):
    import fedvote.cli.deploy as deploy_module

    monkeypatch.setattr(deploy_module, "_flower_executable", lambda name: pytest.fail("Flower was started"))
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", fed / "agent-0.npz", "--insecure",
                           "--superlink", address])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: --superlink: {why}")


def test_deploy_server_refuses_an_unresolvable_superlink_before_flower_starts(fed, tmp_path, invoke, monkeypatch):
    import fedvote.cli.deploy as deploy_module

    monkeypatch.setattr(deploy_module, "run_foreground", lambda command, home: pytest.fail("Flower was started"))
    args = _server_args(fed, tmp_path / "out")
    args[args.index("--superlink") + 1] = "nohost.invalid:9093"
    code, _, err = invoke(args)
    assert code == 2 and err.startswith("fedvote: error: --superlink: host 'nohost.invalid'")


@pytest.mark.parametrize("address", ["127.0.0.1:1", "localhost:9093", "[::1]:9093"])
def test_a_resolvable_superlink_that_is_not_up_yet_is_left_to_flowers_retries(fed, invoke, monkeypatch, address,
                                                                              tmp_path):
    import fedvote.cli.deploy as deploy_module

    started = []
    monkeypatch.setattr(deploy_module, "_flower_executable", lambda name: name)
    monkeypatch.setattr(deploy_module, "run_foreground", lambda command, home: started.append(command) or 0)
    code, _, _ = invoke(["deploy", "agent", "--id", "0", "--data", fed / "agent-0.npz", "--insecure",
                         "--superlink", address, "--ledger", tmp_path / "ledger.sqlite"])
    assert code == 0 and started and address in started[0]


# --- temporary Flower homes are removed on every way out but a failure naming the log in it -------


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """The temporary Flower homes the deploy commands create, all under tmp_path/tmp."""
    import tempfile

    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return lambda: sorted(path.name for path in root.iterdir())


@pytest.mark.parametrize("failure", [OSError("exec format error"), KeyboardInterrupt(), SystemExit(143)])
def test_an_agent_that_fails_removes_its_temporary_flower_home(fed, invoke, monkeypatch, homes, failure,
                                                               tmp_path):
    import fedvote.cli.deploy as deploy_module

    def supernode(command, home):
        assert home.is_dir() and home.name.startswith("fedvote-agent-")
        raise failure

    monkeypatch.setattr(deploy_module, "_flower_executable", lambda name: name)
    monkeypatch.setattr(deploy_module, "run_foreground", supernode)
    with pytest.raises((OSError, KeyboardInterrupt, SystemExit)):
        from fedvote.cli import main

        main(["deploy", "agent", "--id", "0", "--data", str(fed / "agent-0.npz"), "--insecure",
              "--ledger", str(tmp_path / "ledger.sqlite")])
    assert homes() == []


def test_a_server_failure_that_names_no_log_removes_the_home_and_one_that_does_keeps_it(
    fed, tmp_path, invoke, monkeypatch, homes
):
    import fedvote.cli.deploy as deploy_module

    def broken(home, connection, overrides):
        raise OSError("disk full")

    monkeypatch.setattr(deploy_module, "_write_flwr_files", broken)
    with pytest.raises(OSError):
        from fedvote.cli import main

        main([str(arg) for arg in _server_args(fed, tmp_path / "out")])
    assert homes() == []
    monkeypatch.setattr(deploy_module, "_write_flwr_files", lambda home, connection, overrides: home)
    monkeypatch.setattr(deploy_module, "run_foreground", lambda command, home: 1)  # no result written
    code, _, err = invoke(_server_args(fed, tmp_path / "out"))  # --superlink: no log of ours to keep
    assert code == 1 and homes() == []

    @contextlib.contextmanager
    def superlink(command, home):
        (home / "superlink.log").write_text("the SuperLink's log")
        yield None

    monkeypatch.setattr(deploy_module, "background", superlink)
    monkeypatch.setattr(deploy_module, "_wait_for_port", lambda *args, **kwargs: None)
    local = [arg for arg in _server_args(fed, tmp_path / "out") if arg not in ("--superlink", "127.0.0.1:1")]
    code, _, err = invoke(local)
    (kept,) = homes()
    assert code == 1 and f"{kept}/superlink.log" in err  # the message names the log in the kept folder


# --- every refusal names a flag the command has, or the file and key the user can change ------------


def test_split_names_the_configs_key_not_a_flag_it_lacks(tmp_path, invoke):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"federation": {"dataset": "digits", "agents": 5000}}))
    code, _, err = invoke(["deploy", "split", "--config", config, "--out", tmp_path / "fed"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: --config: {config}: federation.agents: 5000 agents ")
    assert "--agents" not in err


def test_split_names_the_configs_data_dir_not_a_flag_it_lacks(tmp_path, invoke, monkeypatch):
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"federation": {"dataset": "fashion-mnist", "agents": 3,
                                                 "data_dir": str(tmp_path / "nothing")}}))
    code, _, err = invoke(["deploy", "split", "--config", config, "--out", tmp_path / "fed"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"fedvote: error: --config: {config}: federation.data_dir: ")
    assert "--data-dir" not in err


def test_server_names_its_data_and_config_not_flags_it_lacks(fed, tmp_path, invoke):
    other = tmp_path / "run.json"  # another federation's config: the server file does not match it
    other.write_text(json.dumps({"federation": {"dataset": "digits", "agents": 4}, "queries": 20}))
    code, _, err = invoke(["deploy", "server", "--config", other, "--data", fed / "server.npz",
                           "--out", tmp_path / "out", "--insecure"])
    assert code == 2 and err.startswith("fedvote: error: --data: the server file and the config are of two splits")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"federation": {"dataset": "digits", "agents": 3}, "queries": 20,
                                  "options": {"release": "labels"}}))
    code, _, err = invoke(["deploy", "server", "--config", labels, "--data", fed / "server.npz",
                           "--out", tmp_path / "out", "--insecure", "--no-secure-noise"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("fedvote: error: --config: options.release: ") and "--release" not in err


def test_simulate_names_its_data_dir(tmp_path, invoke, monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))  # installed or not: not reached
    (tmp_path / "fed").mkdir()
    code, _, err = invoke(["deploy", "simulate", "--data-dir", tmp_path / "fed", "--out", tmp_path / "out"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("fedvote: error: --data-dir: ")


def test_a_missing_flower_names_what_to_install_not_a_flag(fed, invoke, monkeypatch, tmp_path):
    import fedvote.cli.deploy as deploy_module

    monkeypatch.setattr(deploy_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(deploy_module.sys, "executable", str(tmp_path / "python"))
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", fed / "agent-0.npz", "--insecure",
                           "--ledger", tmp_path / "ledger.sqlite"])
    assert code == 2 and err.strip() == f"fedvote: error: {deploy_module.FLOWER_MISSING}"
