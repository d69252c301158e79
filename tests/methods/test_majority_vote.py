"""Plain majority vote (``--method majority-vote``): PATE-FL's teachers, their clean vote, no noise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event

from fedvote.cli import main
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.query_selection import choose_queries
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.majority_vote import MajorityVote
from fedvote.models.training import TrainingConfig
from fedvote.privacy.events import majority_vote_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import run
from fedvote.transport.local import LocalTransport

FAST = TrainingConfig(model="logistic", epochs=5)
QUERIES = 60


def config(method: str, **privacy: object) -> RunConfig:
    """10 agents on digits, logistic teachers and student, no self-training."""
    return RunConfig(
        method=method,
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(**privacy),  # type: ignore[arg-type]
        teacher=FAST,
        student=FAST,
        queries=QUERIES,
        self_training_rounds=0,
    )


def test_it_is_discovered_as_a_method():
    assert METHODS["majority-vote"] is MajorityVote


def test_its_events_are_non_private_at_both_levels():
    events = majority_vote_events(QUERIES)
    for level in ("agent", "instance"):
        assert isinstance(events.at(level), dp_event.NonPrivateDpEvent)
    assert (events.agent_sensitivity, events.instance_sensitivity) == (1.0, math.sqrt(2.0))  # PATE-FL's votes
    assert isinstance(majority_vote_events(0).agent, dp_event.NoOpDpEvent)  # nothing asked, nothing released


def test_pseudo_labels_are_the_argmax_of_the_clean_vote_histograms(small_federation):
    method = MajorityVote(queries=QUERIES, min_responders=10, teacher=FAST, student=FAST, self_training_rounds=0)
    transport = LocalTransport(small_federation, seed=0)
    ledger = PrivacyLedger()
    outcome = method.run(small_federation.server_data(), transport, ledger)
    chosen = choose_queries(small_federation.public.features, QUERIES, method.seed, method.query_selection)
    np.testing.assert_array_equal(outcome.query_indices, chosen)
    clean = transport.clean_vote_histograms(outcome.query_indices)  # (Q, C), the same teachers
    np.testing.assert_array_equal(outcome.pseudo_labels, np.argmax(clean, axis=1))
    assert outcome.details["student_queries"] == QUERIES  # σ = 0: every query teaches the student
    assert len(ledger.charges) == 1  # one round, charged (as non-private) before it ran
    for level in ("agent", "instance"):
        assert isinstance(ledger.event(level), dp_event.NonPrivateDpEvent | dp_event.ComposedDpEvent)


def test_the_result_says_not_private_at_both_levels():
    result = run(config("majority-vote"))
    privacy = result.privacy
    assert privacy.private is False and result.to_dict()["private"] is False
    assert privacy.agent.epsilon is None and privacy.instance.epsilon is None
    assert privacy.calibrated_to_epsilon is None and result.sigma == 0.0
    assert result.queries == QUERIES and result.label_accuracy is not None


@pytest.mark.parametrize(("flag", "value"), [("--epsilon", "4"), ("--sigma", "2")])
def test_fedvote_run_refuses_a_privacy_target_in_one_line(flag, value, capsys, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "majority-vote", "--agents", "10", flag, value, "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedvote: error: {flag}: majority-vote") and "\n" not in err, err
    assert not out.exists()


def test_an_explicit_sigma_is_refused_by_name_and_zero_is_accepted():
    with pytest.raises(ConfigError) as error:
        run(config("majority-vote", sigma=1.0))
    assert error.value.argument == "sigma"
    assert run(config("majority-vote", sigma=0.0)).privacy.private is False


def test_its_labels_are_at_least_as_accurate_as_pate_fl_at_small_epsilon():
    """The same teachers (one seed: the same federation, training seeds and queries) label the
    same queries; majority vote takes the argmax of their clean sums, PATE-FL at ε = 1 that of
    sums with N(0, σ²) added. The clean plurality is the noisy argmax's most likely outcome
    for every query (iid noise on each class count), and at ε = 1 (Q = 60, δ = 1e-3:
    σ ≈ 20 votes against at most 10 per class) the noise all but randomises the argmax;
    averaged over noise seeds PATE-FL cannot come near. PATE-FL's σ → 0 limit *is*
    majority vote, so the gap closes as ε grows."""
    reference = run(config("majority-vote"))
    assert reference.label_accuracy is not None
    noisy = [run(config("pate-fl", epsilon=1.0, noise_seed=seed)) for seed in (1, 2, 3)]
    for result in noisy:  # the very same teachers
        assert result.diagnostics["teacher_accuracy"] == reference.diagnostics["teacher_accuracy"]
        assert result.sigma > 10.0
    pate_accuracy = float(np.mean([result.label_accuracy for result in noisy]))
    assert reference.label_accuracy >= pate_accuracy
    assert reference.label_accuracy > 0.6  # the teachers' majority on digits is good
