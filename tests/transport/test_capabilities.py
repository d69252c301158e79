"""Capabilities instead of a grab-bag (issue 16, item 2).

A transport declares what it can do by inheriting capabilities; a method declares what it
needs (``requires`` / ``requirements()``); :func:`check_capabilities` refuses exactly the
pairs where a need is not served, with one line naming the method and the transport.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

import fedvote.transport.base as base_module
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.flower.transport import FlowerTransport
from fedvote.methods import METHODS
from fedvote.methods.base import Method
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import (
    CAPABILITIES,
    AgentBehaviours,
    Capability,
    KnnVotes,
    LabelRelease,
    SecureUpdateSum,
    SimulationDiagnostics,
    TeacherVotes,
    WeightedVotes,
    check_capabilities,
)
from fedvote.transport.local import LocalTransport
from fedvote.transport.reused_votes import ReusedVotesTransport


class BareTransport(Transport):
    """A transport that does only what every transport does: it can serve no method."""

    @property
    def num_agents(self) -> int:
        return 3

    def record_counts(self) -> np.ndarray:
        return np.full(3, 10)


# What each transport is meant to serve (the test's own statement, checked against the classes).
SERVES: dict[type[Transport], frozenset[type]] = {
    LocalTransport: frozenset(CAPABILITIES),
    ReusedVotesTransport: frozenset(
        {TeacherVotes, LabelRelease, KnnVotes, WeightedVotes, AgentBehaviours, SimulationDiagnostics}
    ),
    FlowerTransport: frozenset({TeacherVotes, KnnVotes}),
    BareTransport: frozenset(),
}

# Options that change what a method needs (a method absent here runs with its defaults only).
VARIANTS: dict[str, list[dict[str, object]]] = {
    "pate-fl": [{}, {"release": "labels"}],
    "weighted-pate": [{}, {"bad_fraction": 0.3}],
    "dp-fedavg": [{}, {"noise": "distributed-unmasked"}, {"noise": "server"}],
}


def method_runs() -> list[tuple[str, dict[str, object]]]:
    return [(name, options) for name in sorted(METHODS) for options in VARIANTS.get(name, [{}])]


def build(name: str, options: dict[str, object]) -> Method:
    config = RunConfig(method=name, options=dict(options))
    return METHODS[name].from_config(config, sigma=1.0, queries=10, min_responders=1)


def bare(transport_class: type[Transport]) -> Transport:
    """An instance of ``transport_class`` without its constructor (capabilities are class-level)."""
    return transport_class.__new__(transport_class)


def test_each_transport_declares_what_it_is_meant_to_serve():
    for transport_class, served in SERVES.items():
        declared = {c for c in CAPABILITIES if issubclass(transport_class, c)}
        assert declared == served, transport_class.__name__


@pytest.mark.parametrize("transport_class", list(SERVES), ids=lambda c: c.__name__)
@pytest.mark.parametrize(("name", "options"), method_runs(), ids=lambda v: v if isinstance(v, str) else repr(v))
def test_check_refuses_exactly_when_a_requirement_is_missing(name, options, transport_class):
    method = build(name, options)
    transport = bare(transport_class)
    missing = [c for c in method.requirements() if c not in SERVES[transport_class]]
    if not missing:
        check_capabilities(method, transport)  # served: no refusal
        return
    with pytest.raises(ConfigError) as refused:
        check_capabilities(method, transport)
    message = str(refused.value)
    assert refused.value.argument == "method"
    assert "\n" not in message
    assert message.startswith(f"method: {name} needs ")
    assert message.endswith(f" which {transport_class.__name__} cannot serve")
    for capability in missing:
        assert capability.description in message
    for capability in set(method.requirements()) - set(missing):
        assert capability.description not in message  # only what is missing is named


def test_every_method_declares_capabilities_and_never_a_diagnostic():
    for name, options in method_runs():
        needs = build(name, options).requirements()
        assert needs, f"{name} needs nothing of its transport?"
        assert all(issubclass(c, Capability) and c in CAPABILITIES for c in needs), name
        assert SimulationDiagnostics not in needs, name


def test_options_change_the_requirements():
    assert LabelRelease in build("pate-fl", {"release": "labels"}).requirements()
    assert LabelRelease not in build("pate-fl", {}).requirements()
    assert AgentBehaviours in build("weighted-pate", {"bad_fraction": 0.3}).requirements()
    assert AgentBehaviours not in build("weighted-pate", {}).requirements()
    assert SecureUpdateSum in build("dp-fedavg", {}).requirements()  # distributed noise, the default
    assert SecureUpdateSum not in build("dp-fedavg", {"noise": "server"}).requirements()


def test_local_transport_serves_every_method_and_a_bare_transport_none():
    for name, options in method_runs():
        check_capabilities(build(name, options), bare(LocalTransport))
        with pytest.raises(ConfigError, match=rf"^method: {name} needs .+ which BareTransport cannot serve$"):
            check_capabilities(build(name, options), BareTransport())


def test_flower_refuses_label_release_in_one_line():
    with pytest.raises(ConfigError) as refused:
        check_capabilities(build("pate-fl", {"release": "labels"}), bare(FlowerTransport))
    assert str(refused.value) == (
        "method: pate-fl needs label-only release (Confident-GNMax) which FlowerTransport cannot serve"
    )
    with pytest.raises(ConfigError, match="^method: weighted-pate needs reputation-weighted votes which Flower"):
        check_capabilities(build("weighted-pate", {}), bare(FlowerTransport))


def test_the_base_transport_keeps_only_what_every_transport_does():
    assert Transport.__abstractmethods__ == {"num_agents", "record_counts"}
    for capability in CAPABILITIES:
        for operation in capability.__abstractmethods__:
            assert not hasattr(Transport, operation), f"Transport still declares {operation}"
    assert "NotImplementedError" not in Path(inspect.getfile(base_module)).read_text()


def test_capabilities_are_small_abcs_of_abstract_operations_with_descriptions():
    descriptions = [c.description for c in CAPABILITIES]
    assert len(set(descriptions)) == len(CAPABILITIES) and all(descriptions)
    for capability in CAPABILITIES:
        own = {
            name for name, value in vars(capability).items() if callable(value) and not name.startswith("_")
        }
        assert own and own == set(capability.__abstractmethods__), capability.__name__
        with pytest.raises(TypeError):
            capability()  # abstract: a capability is declared by inheriting it, never instantiated
