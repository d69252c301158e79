"""A Flower deployment sees its records through the same public input features as ``fedvote run``.

``fedvote deploy split`` fits φ on the public pool alone, writes the pool and the test set seen
through it, and ships φ in every agent's file; the agent maps its own raw records when it loads
them. These tests check that what each side then holds is, bit for bit, what the in-process run
trains and votes on, and that the server plans the same method from it.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.flower.files import (
    flower_methods,
    load_agent_file,
    load_server_file,
    planned_method,
    write_deployment_files,
)
from fedvote.models.input_features import INPUT_MAP_PREFIX
from fedvote.runner import make_federation, plan, prepare_public

AGENTS = 3


def _config(input_features: str, method: str = "pate-fl") -> RunConfig:
    return RunConfig(
        method=method,
        federation=FederationConfig(dataset="digits", agents=AGENTS, input_features=input_features),
        privacy=PrivacyConfig(epsilon=4.0, noise_seed=2),
        seed=5,
    )


@pytest.mark.parametrize("method", flower_methods())  # every method Flower runs
def test_agents_and_server_hold_what_the_in_process_run_sees_through_phi(tmp_path, method):
    config = _config("patch", method)
    write_deployment_files(config, tmp_path)
    raw = make_federation(config)
    seen = prepare_public(config, raw)
    assert seen.input_features == "patch" and seen.example_shape != raw.example_shape

    for i in range(AGENTS):
        with np.load(tmp_path / f"agent-{i}.npz") as archive:  # the file holds the raw records and φ
            np.testing.assert_array_equal(archive["features"], raw.agents[i].features)
            assert any(key.startswith(INPUT_MAP_PREFIX) for key in archive.files)
            assert archive["public"].shape == seen.public.features.shape
        agent = load_agent_file(tmp_path / f"agent-{i}.npz")
        assert agent.input_features == "patch"
        np.testing.assert_array_equal(agent.data.features, seen.agents[i].features)  # mapped by the agent
        np.testing.assert_array_equal(agent.data.labels, seen.agents[i].labels)
        np.testing.assert_array_equal(agent.public_features, seen.public.features)

    server = load_server_file(tmp_path / "server.npz")
    assert server.input_features == "patch"
    np.testing.assert_array_equal(server.server.public_features, seen.public.features)
    np.testing.assert_array_equal(server.server.test.features, seen.test.features)
    assert server.public_metadata(AGENTS) == seen.public_metadata()
    with np.load(tmp_path / "server.npz") as archive:  # the server's file keeps no agent's φ-mapped records
        assert not any(key.startswith(INPUT_MAP_PREFIX) for key in archive.files)

    deployed = dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, secure_noise=False))
    planned = planned_method(deployed, server, clip_sigmas=8.0)
    local = plan(deployed, seen.public_metadata())
    assert planned == local  # the same σ, queries, teachers or k, student and release
    assert planned.queries > 200  # what φ's wide vectors plan: a vote sum on every pool point
    assert planned.planned_events().at("agent") == local.planned_events().at("agent")


def test_without_input_features_the_files_hold_the_records_as_dealt(tmp_path):
    config = _config("none")
    write_deployment_files(config, tmp_path)
    raw = make_federation(config)
    agent = load_agent_file(tmp_path / "agent-0.npz")
    assert agent.input_features == "none"
    np.testing.assert_array_equal(agent.data.features, raw.agents[0].features)
    np.testing.assert_array_equal(agent.public_features, raw.public.features)
    assert load_server_file(tmp_path / "server.npz").input_features == "none"


def test_a_server_file_split_for_other_input_features_is_refused_before_planning(tmp_path):
    write_deployment_files(_config("none"), tmp_path)
    server = load_server_file(tmp_path / "server.npz")
    with pytest.raises(ConfigError, match="split the data again") as error:
        planned_method(_config("patch"), server, clip_sigmas=8.0)
    assert error.value.argument == "data" and "\n" not in str(error.value)  # deploy server --data


def test_an_agent_file_with_a_damaged_map_is_refused_in_one_line(tmp_path):
    write_deployment_files(_config("patch"), tmp_path)
    path = tmp_path / "agent-1.npz"
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays[INPUT_MAP_PREFIX + "centre"] = arrays[INPUT_MAP_PREFIX + "centre"][:-1]
    np.savez(path, **arrays)
    with pytest.raises(ConfigError, match="does not fit") as error:
        load_agent_file(path)
    assert error.value.argument == "data" and "\n" not in str(error.value)  # deploy agent --data


def _hello(agent_id: int, fingerprint: str, input_features: str | None) -> SimpleNamespace:
    """An agent's registration reply as the server reads it (``_reply``'s ConfigRecord)."""
    from flwr.common import ConfigRecord

    from fedvote.flower.protocol import RECORD

    answer: dict[str, int | str] = {"agent-id": agent_id, "records": 10, "fingerprint": fingerprint}
    if input_features is not None:  # None: an agent of a fedvote before input features
        answer["input-features"] = input_features
    return SimpleNamespace(content=SimpleNamespace(config_records={RECORD: ConfigRecord(answer)}))


@pytest.mark.parametrize(("server", "agent"), [("patch", "none"), ("none", "patch"), ("patch", None)])
def test_the_server_refuses_an_agent_file_of_another_split_when_it_registers(server, agent):
    from fedvote.flower.transport import FlowerTransport

    transport = FlowerTransport(object(), object(), num_agents=2, num_classes=10, fingerprint="f", input_features=server)
    with pytest.raises(ConfigError, match="one split") as error:
        transport._register({1: _hello(0, "f", agent), 2: _hello(1, "f", server)})
    assert error.value.argument == "data" and "\n" not in str(error.value)
    transport._register({1: _hello(0, "f", server), 2: _hello(1, "f", server)})  # one split's files: registered
