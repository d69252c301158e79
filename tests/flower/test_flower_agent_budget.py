"""A real deployment in which the server asks more than one agent's budget (issue 45 item 3).

Five agents on loopback (the Cluster of test_flower_integration.py), t = 4, three vote rounds
of 10 queries with σ = 2 (noise share σ/√t = 1). Agent 4 runs ``fedvote deploy agent
--budget-epsilon B`` with B between the ε of one round and of two, counting on its own share
only (``--assume-honest 1``, the default): it answers the first round, then refuses the next
two before releasing anything. The refusal reaches the server as a non-response — SecAgg+'s
dropout path — so rounds 2 and 3 are released by the other four (t = 4) and result.json shows
4 responders; the agent's ledger, read after every process has ended, holds exactly the one
round it answered (it survives the agent), the others' ledgers all three.
"""

from __future__ import annotations

import time

import pytest

from fedvote.flower.agent_budget import AgentBudget, default_ledger_path
from fedvote.flower.files import load_agent_file, write_deployment_files
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events

from .test_flower_integration import AGENTS, TEST_DEADLINE_S, Cluster, _config

QUERIES, BATCH, T = 30, 10, 4
REFUSER = AGENTS - 1


@pytest.mark.slow  # real processes (1-2 min on an idle 2-core machine): make test-slow (CI)
def test_an_agent_refuses_requests_beyond_its_own_budget(tmp_path):
    config = _config(queries=QUERIES, min_responders=T)
    share = 2.0 / T**0.5  # σ/√t, what each agent adds
    one_round = epsilon_for(pate_fl_events(share, BATCH).agent, 1e-3)  # counting on its own share
    two_rounds = epsilon_for(pate_fl_events(share, 2 * BATCH).agent, 1e-3)
    budget = (one_round + two_rounds) / 2
    fed = tmp_path / "fed"
    write_deployment_files(config, fed)
    cluster = Cluster(tmp_path)
    deadline = time.monotonic() + TEST_DEADLINE_S
    try:
        cluster.start(
            "server",
            [
                "deploy", "server", "--config", str(fed / "run.json"), "--data", str(fed / "server.npz"),
                "--out", str(tmp_path / "out"), "--port", str(cluster.port), "--insecure",
                "--round-timeout", "45", "--train-timeout", "300", "--connect-timeout", "120",
                "--query-batch-size", str(BATCH), "--workdir", str(tmp_path / "server-home"), "--no-secure-noise",
            ],
        )
        for i in range(AGENTS):
            extra = ["--budget-epsilon", repr(budget)] if i == REFUSER else []
            cluster.start(
                f"agent{i}",
                [
                    "deploy", "agent", "--id", str(i), "--data", str(fed / f"agent-{i}.npz"),
                    "--superlink", f"127.0.0.1:{cluster.port}", "--insecure",
                    "--workdir", str(tmp_path / f"agent{i}-home"), *extra,
                ],
            )
        result = cluster.wait_for_server(deadline)
    finally:
        cluster.stop_all()
    rounds = result["flower"]["rounds"]
    assert [r["responders"] for r in rounds] == [5, 4, 4]  # agent 4 sat out rounds 2 and 3
    assert all(r["released"] for r in rounds) and result["queries"] == QUERIES
    assert result["flower"]["dropped_agents"] == []  # it refused (an error reply): alive, not crashed
    for i in range(AGENTS):
        file = load_agent_file(fed / f"agent-{i}.npz")
        ledger = AgentBudget(path=default_ledger_path(fed / f"agent-{i}.npz"), agent_id=i, fingerprint=file.fingerprint)
        spent = ledger.check_ready()  # after the agent's process ended: the ledger outlives it
        expected = one_round if i == REFUSER else epsilon_for(pate_fl_events(share, QUERIES).agent, 1e-3)
        assert spent == pytest.approx(expected, rel=1e-9)
    assert one_round <= budget < two_rounds  # the refuser stayed within its budget; a second round would not
