"""PATE-FL+DA (``--teacher-da dann``): DANN teachers, the public-access rule, unchanged accounting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedvote
from fedvote.config import FederationConfig, RunConfig
from fedvote.data.datasets import load_dataset
from fedvote.data.federation import build_domain_federation
from fedvote.errors import ConfigError
from fedvote.methods.options.voting import PateFLOptions
from fedvote.methods.pate_fl import PateFL
from fedvote.models.dann import DannConfig
from fedvote.models.training import TrainingConfig
from fedvote.runner import build_config, run
from fedvote.transport.capabilities import DomainAdaptedTeachers
from fedvote.transport.local import LocalTransport

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"

TINY = {"agents": 5, "queries": 20, "epochs": 2, "teacher_model": "mlp", "student_model": "logistic",
        "sigma": 5.0, "noise_seed": 1, "accountant": "exact"}


def _federation(*, public_access: bool):
    """Three agents of the committed MNIST sample, USPS's sample as the public domain."""
    mnist = load_dataset("mnist", SAMPLES)
    usps, usps_test = load_dataset("usps", SAMPLES), load_dataset("usps", SAMPLES, split="test")
    return build_domain_federation(
        [mnist], usps, num_agents=3, target_test=usps_test, records_per_agent=40,
        agent_public_access=public_access, seed=0,
    )


def test_dann_teachers_run_end_to_end_and_are_charged_as_plain_ones():
    plain = fedvote.run("pate-fl", **TINY)
    adapted = fedvote.run("pate-fl", teacher_da="dann", **TINY)
    assert adapted.config["options"]["teacher_da"] == "dann"
    # The public pool is public: the votes' accounting is the same mechanism, the same ε.
    for level in ("agent", "instance"):
        assert getattr(adapted.privacy, level).epsilon == getattr(plain.privacy, level).epsilon
    assert adapted.queries == plain.queries == 20 and 0.0 <= adapted.accuracy <= 1.0


def test_dann_is_a_requirement_and_the_teachers_differ_from_plain_ones():
    federation = _federation(public_access=True)
    method = PateFL(sigma=0.0, queries=10, min_responders=3,
                    release_options=PateFLOptions(teacher_da="dann"), teacher=TrainingConfig(epochs=2))
    assert DomainAdaptedTeachers in method.requirements()
    assert DomainAdaptedTeachers not in PateFL(sigma=0.0, queries=10, min_responders=3).requirements()
    adapted, plain = LocalTransport(federation), LocalTransport(federation)
    adapted.train_adapted_teachers(TrainingConfig(epochs=2), DannConfig())
    plain.train_teachers(TrainingConfig(epochs=2))
    queries = np.arange(10)
    assert adapted.clean_vote_histograms(queries).sum() == plain.clean_vote_histograms(queries).sum() == 30
    weights = [
        next(iter(t._agents[0].teacher.parameters())).detach().numpy() for t in (adapted, plain)  # noqa: SLF001
    ]
    assert not np.allclose(*weights)


def test_agents_without_public_access_cannot_train_dann_teachers():
    federation = _federation(public_access=False)
    transport = LocalTransport(federation)
    assert not transport.agent_public_access
    with pytest.raises(ConfigError, match="^teacher_da: .*agent_public_access is false") as error:
        transport.train_adapted_teachers(TrainingConfig(epochs=1), DannConfig())
    assert "\n" not in str(error.value)
    with pytest.raises(RuntimeError):  # refused before any teacher was trained
        transport._agents[0].teacher  # noqa: SLF001, B018
    # Through the runner: refused before any release is charged.
    config = build_config("pate-fl", dataset="mnist", teacher_da="dann", **TINY)
    with pytest.raises(ConfigError, match="^teacher_da: "):
        run(config, federation=federation)
    # Plain teachers need no access beyond the queries.
    assert run(build_config("pate-fl", dataset="mnist", **TINY), federation=federation).queries == 20


def test_bad_dann_settings_are_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="^teacher_model: "):
        fedvote.run("pate-fl", **{**TINY, "teacher_model": "logistic"}, teacher_da="dann")
    with pytest.raises(ConfigError, match="^teacher_da: "):
        fedvote.run("pate-fl", teacher_da="coral", **TINY)
    with pytest.raises(ConfigError, match="^da_weight: "):
        fedvote.run("pate-fl", da_weight=0.5, **TINY)
    with pytest.raises(ConfigError, match="^da_weight: "):
        PateFLOptions(teacher_da="dann", da_weight=-1.0)


def test_the_config_round_trips_the_options():
    config = RunConfig(method="pate-fl", federation=FederationConfig(agents=5),
                       options={"teacher_da": "dann", "da_weight": 0.5})
    assert RunConfig.from_dict(config.to_dict()).options == {"teacher_da": "dann", "da_weight": 0.5}
