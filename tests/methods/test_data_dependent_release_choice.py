"""``--no-data-dependent-release``: label release without publishing the data-dependent ε.

Publishing Confident-GNMax's data-dependent ε by smooth sensitivity (PATE'18 §4, the
default of ``--release labels``) is one more release: it is planned, charged, and makes
the composition RDP-accounted, so at the same ``--epsilon`` σ is larger. With the choice
off no GNSS event is planned or charged, the PLD accountant is back, σ is the one
calibrated to the queries alone, and nothing data-dependent is under ``privacy`` (the clean
figure stays a simulation diagnostic). The default's own tests are
``tests/test_release_labels_sanitised.py`` and ``tests/privacy/test_smooth_sensitivity.py``.
"""

import json
import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

import fedvote
from fedvote.cli.app import main, summary
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.methods.options import option_specs
from fedvote.methods.options.voting import PateFLOptions
from fedvote.methods.pate_fl import PateFL
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import confident_gnmax_events
from fedvote.privacy.gnss import holds_gnss
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import build_config, make_federation, plan, run

LEVELS = ("agent", "instance")
FAST = TrainingConfig(model="logistic", epochs=5, learning_rate=0.05)


def labels_method(sigma=3.0, queries=20, **options):
    return PateFL(
        sigma=sigma, queries=queries, min_responders=5, release_options=PateFLOptions(release="labels", **options)
    )


def test_the_option_is_on_by_default_for_label_release_and_refused_for_sums():
    assert PateFLOptions(release="labels").releases_data_dependent  # the default publishes
    assert PateFLOptions(release="labels", data_dependent_release=True).releases_data_dependent
    assert not PateFLOptions(release="labels", data_dependent_release=False).releases_data_dependent
    assert not PateFLOptions().releases_data_dependent  # sums: nothing data-dependent to release
    for value in (True, False):  # labels-only, like --threshold: refused by name either way
        with pytest.raises(ConfigError) as error:
            PateFLOptions(data_dependent_release=value)
        assert error.value.argument == "data_dependent_release"
    spec = {spec.name: spec for spec in option_specs(PateFLOptions)}["data_dependent_release"]
    assert spec.flag == "--data-dependent-release" and spec.value_type is bool


def test_the_flag_reaches_the_config_and_is_refused_with_sums(capsys):
    config = build_config(
        "pate-fl", dataset="digits", agents=50, epsilon=None, release="labels", data_dependent_release=False
    )
    assert config.options == {"release": "labels", "data_dependent_release": False}
    with pytest.raises(SystemExit) as stop:
        main(["run", "--release", "sums", "--no-data-dependent-release"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "fedvote: error: --data-dependent-release: applies to --release labels only"


@pytest.mark.parametrize("released", [True, False])
def test_planned_events_hold_a_gnss_event_only_when_the_figure_is_released(released):
    method = labels_method(data_dependent_release=released)
    planned = method.planned_events()
    queries = confident_gnmax_events(3.0, 6.0, 20)
    for level in LEVELS:
        assert holds_gnss(planned.at(level)) is released
        if not released:  # the queries' two Gaussians, and nothing else
            assert planned.at(level) == queries.at(level)


def _exact_sigma(target_epsilon, delta, queries, ratio=2.0):
    """σ at which Q checks (σ₁ = ratio·σ) and Q argmaxes, s = 1, reach ``target_epsilon`` exactly.

    Independent of fedvote's accountants: the composition is μ-GDP with
    μ = √(Q·(1/σ₁² + 1/σ²)) (Balle & Wang 2018, Thm 8: δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)).
    """

    def delta_at(mu):
        return norm.cdf(-target_epsilon / mu + mu / 2) - math.exp(target_epsilon) * norm.cdf(
            -target_epsilon / mu - mu / 2
        )

    mu = brentq(lambda m: delta_at(m) - delta, 1e-3, 50.0)
    return math.sqrt(queries * (1 / ratio**2 + 1)) / mu


def test_calibration_without_the_release_is_the_pld_calibration_of_the_queries_alone():
    """Digits defaults, ε 4: σ as before the release existed (9.20), smaller than with it (11.85)."""
    federation = make_federation(RunConfig())
    planned = {}
    for released in (True, False):
        config = RunConfig(
            privacy=PrivacyConfig(epsilon=4.0),
            options={"release": "labels", "data_dependent_release": released},
        )
        planned[released] = plan(config, federation.public_metadata())
    off, on = planned[False], planned[True]
    queries = off.queries
    expected = calibrate_sigma(lambda s: confident_gnmax_events(s, 2 * s, queries).agent, 4.0, 1e-3, "pld")
    assert off.sigma == pytest.approx(expected, rel=1e-9)
    assert off.sigma == pytest.approx(_exact_sigma(4.0, 1e-3, queries), rel=5e-3)  # PLD ≈ the exact form
    assert round(off.sigma, 2) == 9.20  # the σ of docs/privacy.md before the release
    assert on.sigma > 1.2 * off.sigma  # the release and RDP accounting cost noise
    assert not holds_gnss(off.planned_events().agent) and holds_gnss(on.planned_events().agent)


@pytest.fixture(scope="module")
def declined():
    """``fedvote.run`` with the choice off (the Python API takes it as a keyword)."""
    return fedvote.run(
        agents=10, epsilon=8.0, noise_seed=5, queries=40, release="labels", data_dependent_release=False,
        teacher_model="logistic", student_model="logistic", epochs=15,
    )


def test_without_the_release_nothing_gnss_is_charged_and_the_accountant_is_pld(declined):
    result = declined
    privacy = result.privacy
    assert privacy.accountant == "pld"
    checked = result.details["confident_gnmax"]["queries_checked"]
    queries = confident_gnmax_events(result.sigma, 2 * result.sigma, checked)
    expected = calibrate_sigma(lambda s: confident_gnmax_events(s, 2 * s, 40).agent, 8.0, 1e-3, "pld")
    assert result.sigma == pytest.approx(expected, rel=1e-9)
    for level in LEVELS:  # the headline is the queries' charge alone, by PLD
        assert getattr(privacy, level).epsilon == pytest.approx(
            epsilon_for(queries.at(level), 1e-3, "pld"), rel=1e-6
        )
    assert privacy.agent.epsilon <= 8.0


def test_ledger_holds_no_gnss_charge():
    config = RunConfig(
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(noise_seed=5, sigma=4.0),
        teacher=FAST,
        student=FAST,
        queries=30,
        options={"release": "labels", "data_dependent_release": False},
    )
    ledger = PrivacyLedger()
    result = run(config, ledger=ledger)
    for level in LEVELS:
        assert not holds_gnss(ledger.event(level))
        assert ledger.event(level) == confident_gnmax_events(4.0, 8.0, 30).at(level)
    assert result.privacy.accountant == "pld"


def test_privacy_holds_nothing_data_dependent_and_the_clean_figure_stays_a_diagnostic(declined):
    result = declined
    data = result.to_dict()
    for level in LEVELS:
        entry = data["privacy"][level]
        assert "data_dependent_epsilon_released" not in entry and "data_dependent_epsilon" not in entry
        assert "data_dependent_accountant" not in entry
        assert entry["data_dependent_label"].startswith("not released")
        numbers = {key for key, value in entry.items() if isinstance(value, float)}
        assert numbers == {"epsilon", "sensitivity"}  # no figure read off the clean votes
        clean = data["diagnostics"]["data_dependent"][level]
        assert clean["epsilon"] <= entry["epsilon"]
    assert data["diagnostics"]["data_dependent"]["label"].startswith("data-dependent (not itself private)")
    assert data["diagnostics"]["note"].startswith("simulation diagnostic — not private")
    record = data["confident_gnmax"]
    assert record["data_dependent_release"] is False and "smooth_sensitivity" not in record
    assert data["config"]["options"]["data_dependent_release"] is False
    json.dumps(data)


def test_the_text_summary_says_it_was_not_released_and_why(declined):
    result = declined
    text = summary(result)
    assert text.count("data-dependent ε not released (--no-data-dependent-release)") == 2
    assert "no smooth-sensitivity release was planned or charged" in text
    assert "released by smooth sensitivity" not in text
    dependent = [line for line in text.splitlines() if "data-dependent" in line]
    assert len(dependent) == 2 and all("not released" in line for line in dependent)  # no figure printed
