"""The one run lifecycle (issue 16, item 1): plan → execute → measure, and typed privacy statements.

A method never receives the federation, is planned from public metadata, runs only after
the transport's capabilities and the ledger's budget are checked, and states its privacy
figures as typed statements that the summary, result.json and the report render
generically — a method added later needs no line in the runner, the CLI or the report.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from dp_accounting import dp_event
from torch import nn

from fedvote.cli.app import summary
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.base import Method, MethodOutcome
from fedvote.models.training import TrainingConfig
from fedvote.privacy.events import LevelEvents, gaussian_release_event
from fedvote.privacy.ledger import PersistentLedger, PrivacyLedger
from fedvote.report import write_report
from fedvote.results import PrivacyStatement, write_result
from fedvote.runner import execute, make_federation, measure, plan, privacy_report, run, with_statements
from fedvote.runner import federation_content_key as runner_content_key
from fedvote.transport.base import Transport
from fedvote.transport.local import LocalTransport

FAST = TrainingConfig(model="logistic", epochs=1)


@dataclass(frozen=True)
class StatingMethod(Method):
    """A method written in a test, not registered: one charged Gaussian release, a typed statement."""

    name: ClassVar[str] = "stating"
    sigma: float = 2.0
    headline_epsilon: float | None = None

    @classmethod
    def from_config(cls, config, *, sigma, queries, min_responders):  # pragma: no cover - not registered
        return cls(sigma=sigma)

    def with_sigma(self, sigma: float) -> StatingMethod:
        return dataclasses.replace(self, sigma=sigma)

    def planned_events(self) -> LevelEvents:
        event = gaussian_release_event(self.sigma, 1.0, 3)
        return LevelEvents(agent=event, instance=event, agent_sensitivity=1.0, instance_sensitivity=1.0)

    def run(self, server: ServerData, transport: Transport, ledger: PrivacyLedger, progress=None) -> MethodOutcome:
        ledger.charge(self.planned_events())
        statements = [
            PrivacyStatement(
                name="a looser composition", level="agent", epsilon=99.0, delta=1e-5, source="a test's own proof"
            ),
            PrivacyStatement(
                name="a CLT figure", level="instance", epsilon=0.5, delta=1e-5, mu=0.2,
                source="a test's limit theorem", kind="approximation",
            ),
        ]
        if self.headline_epsilon is not None:
            statements.append(
                PrivacyStatement(
                    name="the stated headline", level="instance", epsilon=self.headline_epsilon, delta=1e-5,
                    source="a test's composition", headline=True,
                )
            )
        head = nn.Linear(int(np.prod(server.example_shape)), server.num_classes)
        return MethodOutcome(
            student=nn.Sequential(nn.Flatten(), head),
            query_indices=np.zeros(0, dtype=np.int64),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            statements=tuple(statements),
            diagnostics={"private_thing": 0.25},
        )


def _config(**privacy) -> RunConfig:
    return RunConfig(
        federation=FederationConfig(dataset="digits", agents=5),
        privacy=PrivacyConfig(sigma=2.0, delta=1e-5, **privacy),
        teacher=FAST,
        student=FAST,
        queries=10,
        self_training_rounds=0,
    )


def _measured(method: StatingMethod, tmp_path=None):
    config = _config()
    federation = make_federation(config)
    transport = LocalTransport(federation, seed=0)
    ledger = PrivacyLedger()
    outcome = execute(method, federation.server_data(), transport, ledger)
    return measure(
        config, method, outcome, transport=transport, ledger=ledger, server=federation.server_data(),
        federation=federation,
    )


def test_a_new_methods_statements_and_diagnostics_are_rendered_generically(tmp_path):
    result = _measured(StatingMethod())
    written = result.to_dict()
    names = [entry["name"] for entry in written["privacy"]["statements"]]
    assert names == ["a looser composition", "a CLT figure"]
    clt = written["privacy"]["statements"][1]
    assert clt["kind"] == "approximation" and clt["mu"] == 0.2 and clt["headline"] is False
    assert written["diagnostics"]["private_thing"] == 0.25 and "not private" in written["diagnostics"]["note"]
    text = summary(result)
    assert "a looser composition [agent level, bound]: ε = 99.0000" in text
    assert "a CLT figure [instance level, approximation]: μ = 0.200" in text
    assert "a test's limit theorem" in text
    write_result(result, tmp_path)
    page = write_report(tmp_path).read_text()
    assert "a looser composition" in page and "a test&#x27;s limit theorem" in page
    json.dumps(written)


def test_a_headline_statement_replaces_its_level_and_keeps_the_accountants_figure_beside_it():
    proven = _measured(StatingMethod()).privacy.instance.epsilon
    result = _measured(StatingMethod(headline_epsilon=proven + 1.0))
    assert result.privacy.instance.epsilon == pytest.approx(proven + 1.0)
    beside = result.privacy.statement("pld accountant, the same releases")
    assert beside is not None and beside.epsilon == pytest.approx(proven) and beside.level == "instance"
    assert result.privacy.agent.epsilon == pytest.approx(proven)  # the other level is untouched


def test_a_headline_below_what_the_ledger_proves_is_refused_never_reported():
    proven = _measured(StatingMethod()).privacy.instance.epsilon
    with pytest.raises(AssertionError, match="below"):
        _measured(StatingMethod(headline_epsilon=proven * 0.9))
    ledger = PrivacyLedger()
    unbounded = dp_event.NonPrivateDpEvent()
    ledger.charge(LevelEvents(agent=unbounded, instance=unbounded, agent_sensitivity=None, instance_sensitivity=None))
    report = privacy_report(_config(), ledger)
    stated = PrivacyStatement(name="finite", level="agent", epsilon=3.0, delta=1e-5, source="", headline=True)
    with pytest.raises(AssertionError, match="below"):  # a finite headline over an unbounded release
        with_statements(report, (stated,))


def test_only_a_bound_can_be_a_headline():
    with pytest.raises(ValueError, match="headline"):
        PrivacyStatement(name="x", level="agent", epsilon=1.0, delta=1e-5, source="", kind="ex post", headline=True)
    with pytest.raises(ValueError, match="kind"):
        PrivacyStatement(name="x", level="agent", epsilon=1.0, delta=1e-5, source="", kind="guess")


@pytest.mark.parametrize("name", sorted(METHODS))
def test_methods_never_receive_the_federation(name):
    method_type = METHODS[name]
    assert not hasattr(method_type, "prepare_federation")
    hints = inspect.signature(method_type.run).parameters
    assert "federation" not in hints and "server" in hints
    assert "Federation" not in str(hints["server"].annotation).replace("ServerData", "")


def test_plan_needs_only_public_metadata():
    public = PublicMetadata(pool_size=50, num_agents=4, num_classes=10, example_shape=(8, 8), agent_records=(30,) * 4)
    config = dataclasses.replace(_config(), method="private-knn-fl", privacy=PrivacyConfig(epsilon=4.0))
    method = plan(config, public)
    assert method.agent_records == (30,) * 4  # the public record counts reach the method
    with pytest.raises(ConfigError, match="public pool holds 50"):
        plan(dataclasses.replace(config, queries=51), public)


class _NoSkills(Transport):
    """A transport that declares no capability at all."""

    def __init__(self, agents: int) -> None:
        super().__init__()
        self._agents = agents

    @property
    def num_agents(self) -> int:
        return self._agents

    def record_counts(self) -> np.ndarray:
        return np.full(self._agents, 10)


@pytest.mark.parametrize("name", ["pate-fl", "dp-fedavg", "prifedsync"])
def test_a_transport_that_cannot_serve_the_method_is_refused_before_any_charge(tmp_path, name):
    ledger_path = tmp_path / "ledger.db"
    config = dataclasses.replace(
        _config(ledger=str(ledger_path), budget_epsilon=50.0), method=name,
        options={"rounds": 1} if name != "pate-fl" else {},
    )
    with pytest.raises(ConfigError) as refused:
        run(config, transport=_NoSkills(5))
    assert refused.value.argument == "method" and "_NoSkills" in refused.value.detail and name in refused.value.detail
    if ledger_path.exists():  # the refusal came before the ledger was opened: nothing was recorded
        federation = runner_content_key(make_federation(config))
        with PersistentLedger(ledger_path, federation=federation, budget_epsilon=None) as ledger:
            assert ledger.history() == []
