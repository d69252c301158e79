"""An agent maps its records through φ once per file content and reuses them (no Flower processes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from flwr.app import Context, RecordDict

import fedvote.flower.agent_cache as agent_cache
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.flower.files import load_agent_file, write_deployment_files
from fedvote.models.input_features import InputMap, fit_input_map
from fedvote.runner import make_federation, prepare_public

AGENTS = 3


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """A 3-agent digits split seen through patch features, and the in-process run's federation."""
    config = RunConfig(
        federation=FederationConfig(dataset="digits", agents=AGENTS, input_features="patch"),
        privacy=PrivacyConfig(epsilon=4.0, noise_seed=2),
        seed=5,
    )
    out = tmp_path_factory.mktemp("split")
    write_deployment_files(config, out)
    return out, prepare_public(config, make_federation(config))


@pytest.fixture(autouse=True)
def _empty_memory():
    agent_cache.clear_memory()
    yield
    agent_cache.clear_memory()


@pytest.fixture
def mappings(monkeypatch):
    """Counts every mapping of records through an input map."""
    calls = []
    apply = InputMap.apply

    def counted(self, features, advance=None):
        calls.append(len(features))
        return apply(self, features, advance)

    monkeypatch.setattr(InputMap, "apply", counted)
    return calls


def _context(data, cache=None):
    node = {"data": str(data)} if cache is None else {"data": str(data), "records-cache": str(cache)}
    return Context(1, 7, node, RecordDict(), {})


def test_a_second_message_reuses_the_records_the_first_mapped(split, mappings):
    from fedvote.flower.app import _agent_file

    out, seen = split
    first = _agent_file(_context(out / "agent-0.npz"))
    second = _agent_file(_context(out / "agent-0.npz"))
    assert mappings == [len(seen.agents[0])]  # one mapping for two messages
    assert second is first
    np.testing.assert_allclose(second.data.features, seen.agents[0].features, rtol=1e-6, atol=1e-6)


def test_a_fresh_process_reads_the_mapped_records_from_the_nodes_cache(split, mappings, tmp_path):
    from fedvote.flower.app import _agent_file

    out, seen = split
    cache = tmp_path / "mapped-records"
    _agent_file(_context(out / "agent-1.npz", cache))
    agent_cache.clear_memory()  # what a fresh ClientApp process starts with
    again = _agent_file(_context(out / "agent-1.npz", cache))
    assert mappings == [len(seen.agents[1])]
    assert len(list(cache.glob("mapped-*.npy"))) == 1
    np.testing.assert_allclose(again.data.features, seen.agents[1].features, rtol=1e-6, atol=1e-6)


def test_identity_is_the_files_content_not_its_path(split, mappings, tmp_path):
    out, seen = split
    path = tmp_path / "agent.npz"
    shutil.copyfile(out / "agent-0.npz", path)
    agent_cache.cached_agent_file(path, tmp_path / "cache")
    agent_cache.cached_agent_file(out / "agent-0.npz", tmp_path / "cache")  # same content, another path: a hit
    shutil.copyfile(out / "agent-2.npz", path)  # same path, another agent's content: mapped afresh
    replaced = agent_cache.cached_agent_file(path, tmp_path / "cache")
    assert replaced.agent_id == 2
    assert mappings == [len(seen.agents[0]), len(seen.agents[2])]
    np.testing.assert_allclose(replaced.data.features, seen.agents[2].features, rtol=1e-6, atol=1e-6)


def test_both_tiers_keep_a_few_files_only(split, tmp_path, monkeypatch):
    out, _ = split
    monkeypatch.setattr(agent_cache, "CACHED_FILES", 2)
    for i in range(AGENTS):
        agent_cache.cached_agent_file(out / f"agent-{i}.npz", tmp_path / "cache")
    assert len(agent_cache._memory) == 2
    assert len(list((tmp_path / "cache").glob("mapped-*.npy"))) == 2


def test_a_damaged_cache_entry_is_mapped_again(split, mappings, tmp_path):
    out, seen = split
    cache = tmp_path / "cache"
    agent_cache.cached_agent_file(out / "agent-0.npz", cache)
    (entry,) = cache.glob("mapped-*.npy")
    entry.write_bytes(b"not an array")
    agent_cache.clear_memory()
    again = agent_cache.cached_agent_file(out / "agent-0.npz", cache)
    assert len(mappings) == 2
    np.testing.assert_allclose(again.data.features, seen.agents[0].features, rtol=1e-6, atol=1e-6)


def test_the_map_rebuilt_from_a_files_arrays_equals_the_fitted_one():
    pool = np.random.default_rng(0).random((60, 1, 10, 10), dtype=np.float32)
    records = np.random.default_rng(1).random((25, 1, 10, 10)).astype(np.float32)
    fitted, _ = fit_input_map("patch", pool, seed=3)
    rebuilt = InputMap.from_arrays(fitted.to_arrays())
    assert rebuilt is not None
    for name in ("kernels", "offsets", "kernel_sums"):  # the same dtype and layout, not only values
        mine, theirs = getattr(fitted.module, name), getattr(rebuilt.module, name)
        assert (mine.dtype, mine.stride(), mine.is_contiguous()) == (theirs.dtype, theirs.stride(), True)
    np.testing.assert_allclose(rebuilt.apply(records), fitted.apply(records), rtol=1e-6, atol=1e-6)
    wide = records.astype(np.float64)[:, :, ::-1, :]  # float64 and not contiguous: mapped as float32
    np.testing.assert_allclose(
        load_agent_file.__globals__["map_agent_records"](rebuilt, wide),
        fitted.apply(np.ascontiguousarray(records[:, :, ::-1, :])),
        rtol=1e-6,
        atol=1e-6,
    )


def test_the_app_sets_fedvotes_host_policy_before_torch_loads():
    """Flower starts the ClientApp's process: OpenMP must sleep, not spin, while it waits (it was unset)."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OMP_")}
    code = "import os, sys, fedvote.flower.app; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert shown == ["PASSIVE", "False"]


def test_deploy_agent_maps_its_records_once_into_the_cache_every_message_reads(split, mappings, invoke,
                                                                               monkeypatch):
    import fedvote.cli.deploy as deploy_module

    out, seen = split
    started = {}

    def supernode(command, home):  # what a message's process would find, while the node runs
        (node,) = [command[i + 1] for i, part in enumerate(command) if part == "--node-config"]
        started["node"] = node
        started["cached"] = sorted(path.name for path in (home / "mapped-records").glob("mapped-*.npy"))
        return 0

    monkeypatch.setattr(deploy_module, "_flower_executable", lambda name: name)
    monkeypatch.setattr(deploy_module, "run_foreground", supernode)
    code, _, err = invoke(["deploy", "agent", "--id", "0", "--data", out / "agent-0.npz", "--insecure",
                           "--ledger", out.parent / "agent-0.ledger.sqlite"])
    assert code == 0 and "maps its" in err
    assert "records-cache=" in started["node"] and len(started["cached"]) == 1
    assert mappings == [len(seen.agents[0])]
