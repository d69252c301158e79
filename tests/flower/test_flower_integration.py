"""PATE-FL on a real Flower deployment on 127.0.0.1: a SuperLink and five SuperNodes as processes.

Every process is started through ``fedvote deploy`` (the commands docs/deploy.md walks
through), each in its own session and tagged through its environment; the ``finally`` of
each test stops them all — Flower's own children (SuperExec, ServerApp and ClientApp
processes) included — and checks that none is left.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from fedvote.aggregation.voting import top_two_gap
from fedvote.cli.deploy import free_port
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.flower.files import write_deployment_files
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_discrete_events, pate_fl_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import make_federation, make_method
from fedvote.transport.local import LocalTransport

AGENTS = 5  # the dropout matrix: kill one of five
EQUIVALENCE_AGENTS = 3  # make test's run: every SecAgg+ stage costs a process per agent
FEDVOTE = [sys.executable, "-c", "from fedvote.cli import main; main()"]
TEST_DEADLINE_S = 600.0  # hard limit per run; one takes 1-2 min on an idle 2-core machine, 5 under load


def _config(*, queries: int, min_responders: int, agents: int = AGENTS) -> RunConfig:
    return RunConfig(
        method="pate-fl",
        federation=FederationConfig(dataset="digits", agents=agents),
        privacy=PrivacyConfig(sigma=2.0, noise_seed=11, min_responders=min_responders),
        teacher=TrainingConfig(model="logistic", epochs=10),  # the transport is under test, not the model
        student=TrainingConfig(model="logistic", epochs=10),
        queries=queries,
        self_training_rounds=0,
        seed=3,
    )


class Cluster:
    """``fedvote deploy server`` plus one ``fedvote deploy agent`` per agent, on loopback."""

    def __init__(self, root: Path, agents: int = AGENTS) -> None:
        self.root = root
        self.agents = agents
        self.tag = uuid.uuid4().hex
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        # one thread per process: a dozen processes share two cores (OpenMP threads spin while idle)
        env = {**os.environ, "FEDVOTE_TEST_TAG": self.tag, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        self.processes[name] = subprocess.Popen(
            [*FEDVOTE, *args], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def start_run(
        self, fed: Path, *, round_timeout: float, query_batch_size: int = 0, secure_noise: bool = False
    ) -> None:
        self.start(
            "server",
            [
                "deploy", "server", "--config", str(fed / "run.json"), "--data", str(fed / "server.npz"),
                "--out", str(self.root / "out"), "--port", str(self.port), "--insecure",
                "--round-timeout", str(round_timeout), "--train-timeout", "300",
                "--connect-timeout", "120", "--record-votes", "--query-batch-size", str(query_batch_size),
                "--workdir", str(self.root / "server-home"),
                "--secure-noise" if secure_noise else "--no-secure-noise",
            ],
        )
        for i in range(self.agents):
            self.start(
                f"agent{i}",
                [
                    "deploy", "agent", "--id", str(i), "--data", str(fed / f"agent-{i}.npz"),
                    "--superlink", f"127.0.0.1:{self.port}", "--insecure",
                    "--workdir", str(self.root / f"agent{i}-home"),
                ],
            )

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def wait_for_log(self, name: str, text: str, deadline: float) -> None:
        while text not in self.log(name):
            if self.processes[name].poll() is not None:
                raise AssertionError(f"{name} exited before printing {text!r}:\n{self.log(name)[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not print {text!r} in time:\n{self.log(name)[-4000:]}")
            time.sleep(0.5)

    def wait_for_server(self, deadline: float) -> dict:
        server = self.processes["server"]
        try:
            server.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not finish in time:\n{self.log('server')[-4000:]}") from None
        assert server.returncode == 0, self.log("server")[-4000:]
        return json.loads((self.root / "out" / "result.json").read_text())

    def kill(self, name: str) -> None:
        """A crash: SIGKILL to the agent's whole process group (its SuperNode included)."""
        os.killpg(self.processes[name].pid, signal.SIGKILL)
        self.processes[name].wait()

    def stop_all(self) -> None:
        """Stop every process this cluster started, then every tagged straggler; check none is left."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20.0
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # Flower starts SuperExec, ServerApp and ClientApp processes in sessions of their own;
        # they exit when their parent does. Give them a moment, then stop the rest by pid.
        deadline = time.monotonic() + 15.0
        while self.tagged() and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in self.tagged():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        assert self.tagged() == [], "processes left behind"

    def tagged(self) -> list[int]:
        """Live processes carrying this cluster's tag in their environment."""
        marker = f"FEDVOTE_TEST_TAG={self.tag}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    status = (entry / "status").read_text()
                    if "\nState:\tZ" not in status:  # zombies are dead, waiting for their parent
                        found.append(int(entry.name))
            except OSError:
                continue
        return found


def _local_vote_sums(config: RunConfig) -> tuple[np.ndarray, np.ndarray]:
    """The same run under LocalTransport: released noisy sums (Q, C) and clean sums (Q, C)."""
    federation = make_federation(config)
    method = make_method(config, federation)
    noisy: list[np.ndarray] = []
    clean: list[np.ndarray] = []

    class Recording(LocalTransport):
        def vote_sum(self, query_indices, noise_std, min_responders):
            result = super().vote_sum(query_indices, noise_std, min_responders)
            noisy.append(result.sums)
            clean.append(self.clean_vote_histograms(query_indices))
            return result

    transport = Recording(federation, seed=config.seed, noise_seed=config.privacy.noise_seed, batched=False)
    method.run(federation.server_data(), transport, PrivacyLedger())
    return np.concatenate(noisy), np.concatenate(clean)


def _epsilon(config: RunConfig, queries: int) -> float:
    return epsilon_for(pate_fl_events(config.privacy.sigma, queries).at("agent"), config.privacy.delta, "pld")


@pytest.mark.slow  # real processes, 40-75 s on 2 cores: make test-slow (CI); make test stayed over 5 minutes
def test_flower_run_matches_local_transport(tmp_path):
    config = _config(queries=50, min_responders=EQUIVALENCE_AGENTS, agents=EQUIVALENCE_AGENTS)
    fed = tmp_path / "fed"
    write_deployment_files(config, fed)
    cluster = Cluster(tmp_path, EQUIVALENCE_AGENTS)
    deadline = time.monotonic() + TEST_DEADLINE_S
    try:
        cluster.start_run(fed, round_timeout=120.0)
        result = cluster.wait_for_server(deadline)
    finally:
        cluster.stop_all()

    flower = result["flower"]
    assert result["queries"] == 50 and flower["dropped_agents"] == []
    assert all(r["released"] and r["responders"] == EQUIVALENCE_AGENTS for r in flower["rounds"])
    sums = np.concatenate([np.array(r["sums"]) for r in flower["rounds"]])  # (Q, C)
    local_noisy, local_clean = _local_vote_sums(config)
    bound = flower["secagg"]["sum_error_bound"]
    assert bound < 1e-5
    # The same teachers and the same noise streams: SecAgg+ differs only by its rounding.
    assert np.max(np.abs(sums - local_noisy)) <= bound + 1e-9
    # So the clean vote sums are identical (every agent's noise is the same on both sides).
    np.testing.assert_array_equal(np.rint(sums - (local_noisy - local_clean)), local_clean)
    # Pseudo-labels agree wherever the noisy margin exceeds what rounding can move.
    decided = top_two_gap(local_noisy) > 2 * bound
    assert decided.mean() > 0.9
    np.testing.assert_array_equal(np.argmax(sums, 1)[decided], np.argmax(local_noisy, 1)[decided])
    assert result["privacy"]["agent"]["epsilon"] == pytest.approx(_epsilon(config, 50), rel=1e-9)
    assert flower["secagg"]["clip_probability"] < 1e-60 and flower["secagg"]["epsilon_slack"] == 0.0


def _run_with_a_crash(tmp_path, *, min_responders: int, queries: int, batch: int) -> dict:
    config = _config(queries=queries, min_responders=min_responders)
    fed = tmp_path / "fed"
    write_deployment_files(config, fed)
    cluster = Cluster(tmp_path)
    deadline = time.monotonic() + TEST_DEADLINE_S
    try:
        cluster.start_run(fed, round_timeout=45.0, query_batch_size=batch)
        cluster.wait_for_log("server", "vote round 1:", deadline)
        cluster.kill("agent4")  # mid-run: after the first vote round, before the second
        return cluster.wait_for_server(deadline)
    finally:
        cluster.stop_all()


@pytest.mark.slow  # the dropout matrix: make test-slow (CI)
def test_killing_one_of_five_agents_with_t4_completes_with_correct_accounting(tmp_path):
    result = _run_with_a_crash(tmp_path, min_responders=4, queries=30, batch=10)
    flower = result["flower"]
    assert [r["responders"] for r in flower["rounds"]] == [5, 4, 4]
    assert all(r["released"] for r in flower["rounds"])
    assert flower["dropped_agents"] == [4]
    assert result["queries"] == 30
    # Every released query charged with σ (the agents calibrated their shares to t = 4).
    config = _config(queries=30, min_responders=4)
    assert result["privacy"]["agent"]["epsilon"] == pytest.approx(_epsilon(config, 30), rel=1e-9)


@pytest.mark.slow  # the dropout matrix: make test-slow (CI)
def test_killing_one_of_five_agents_with_t5_stops_releasing(tmp_path):
    result = _run_with_a_crash(tmp_path, min_responders=5, queries=30, batch=10)
    flower = result["flower"]
    assert [r["released"] for r in flower["rounds"]] == [True, False, False]
    assert flower["rounds"][1]["responders"] < 5 and flower["rounds"][2]["asked"] == 4
    assert "sums" not in flower["rounds"][1] and "sums" not in flower["rounds"][2]
    assert flower["dropped_agents"] == [4]
    assert result["queries"] == 10  # only the first batch was released ...
    config = _config(queries=30, min_responders=5)
    # ... and only it was charged: the refused rounds' charges were voided.
    assert result["privacy"]["agent"]["epsilon"] == pytest.approx(_epsilon(config, 10), rel=1e-9)


@pytest.mark.slow  # a second real SecAgg+ deployment (~60-90 s): make test-slow (CI); make test keeps
# tests/flower/test_flower_secure_noise.py's no-slack headline check
def test_secure_noise_flower_run_releases_exact_integer_sums_with_no_slack(tmp_path):
    """fedvote deploy's default: integer votes + discrete Gaussian shares through SecAgg+, nothing rounded."""
    seeded = _config(queries=20, min_responders=EQUIVALENCE_AGENTS, agents=EQUIVALENCE_AGENTS)
    config = dataclasses.replace(seeded, privacy=dataclasses.replace(seeded.privacy, noise_seed=None))
    fed = tmp_path / "fed"
    write_deployment_files(config, fed)
    cluster = Cluster(tmp_path, EQUIVALENCE_AGENTS)
    deadline = time.monotonic() + TEST_DEADLINE_S
    try:
        cluster.start_run(fed, round_timeout=120.0, secure_noise=True)
        result = cluster.wait_for_server(deadline)
    finally:
        cluster.stop_all()

    flower = result["flower"]
    assert result["privacy"]["noise_source"] == "csprng-discrete-gaussian"
    assert flower["secagg"]["integer"] is True and flower["secagg"]["quantization_step"] == 1.0
    sums = np.concatenate([np.array(r["sums"]) for r in flower["rounds"]])  # (Q, C)
    assert np.array_equal(sums, np.rint(sums))  # exact integers: nothing was rounded
    _, clean = _local_vote_sums(dataclasses.replace(seeded, privacy=dataclasses.replace(seeded.privacy, sigma=0.0)))
    noise = sums - clean  # Σ of 3 shares of N_Z(0, 4/3): std just below 2
    assert np.array_equal(noise, np.rint(noise)) and 1.3 < noise.std() < 2.7
    events = pate_fl_discrete_events(config.privacy.sigma, EQUIVALENCE_AGENTS, 20)
    assert result["privacy"]["agent"]["epsilon"] == epsilon_for(events.agent, config.privacy.delta, "rdp")
    assert result["privacy"]["instance"]["epsilon"] == epsilon_for(events.instance, config.privacy.delta, "rdp")
    assert result["privacy"]["delta"] == config.privacy.delta  # the clip slack (~1e-84) vanishes in δ
    assert flower["secagg"]["epsilon_slack"] == 0.0
