"""Issue 42, defect 3: ``--release labels`` published the Confident-GNMax data-dependent ε unsanitised.

It was a noiseless function of the clean votes, shown under ``privacy`` and on the report's
headline cards, so the figure itself told neighbouring federations apart; ``queries``
counted only the answered queries. Now ``privacy`` holds only its release by smooth
sensitivity (PATE'18 §4), whose own cost is charged to the ledger and so is in the headline
ε; the clean figure is a simulation diagnostic; the counts say what they count. Every test
here fails on the code before the fix (no ``data_dependent_epsilon_released``, no GNSS
charge, the clean figure under ``privacy``).
"""

import copy
import json
import math

import pytest

from fedvote.cli.app import summary
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import compose_events, confident_gnmax_events
from fedvote.privacy.gnss import SmoothSensitivityGaussianDpEvent, holds_gnss
from fedvote.privacy.smooth_sensitivity import RELEASED_LABEL, plan_release, release_events
from fedvote.report.html import write_report
from fedvote.runner import run

FAST = TrainingConfig(model="logistic", epochs=15, learning_rate=0.05)


@pytest.fixture(scope="module")
def labels_run():
    config = RunConfig(
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(noise_seed=5, epsilon=8.0),
        teacher=FAST,
        student=FAST,
        queries=40,
        options={"release": "labels"},
    )
    return run(config)


def test_privacy_holds_only_the_smooth_sensitivity_release_and_the_clean_figure_is_a_diagnostic(labels_run):
    data = labels_run.to_dict()
    for level in ("agent", "instance"):
        entry = data["privacy"][level]
        assert "data_dependent_epsilon" not in entry  # the clean figure is never a privacy figure
        assert entry["data_dependent_label"] == RELEASED_LABEL
        assert 0 <= entry["data_dependent_epsilon_released"] <= entry["epsilon"]
        assert "smooth-sensitivity release" in entry["data_dependent_accountant"]
        clean = data["diagnostics"]["data_dependent"][level]
        assert clean["epsilon"] <= entry["epsilon"] and clean["smooth_sensitivity"] > 0
    assert data["diagnostics"]["data_dependent"]["label"].startswith("data-dependent (not itself private)")
    json.dumps(data)  # standard JSON


def test_the_release_is_charged_and_its_cost_is_in_the_headline(labels_run):
    record = labels_run.details["confident_gnmax"]
    plans = {
        level: plan_release(sigma=labels_run.sigma, threshold_sigma=2 * labels_run.sigma, queries=40, delta=1e-3,
                            sensitivity=s)
        for level, s in (("agent", 1.0), ("instance", math.sqrt(2.0)))
    }
    charge = release_events(plans["agent"], plans["instance"])
    queries = confident_gnmax_events(labels_run.sigma, 2 * labels_run.sigma, record["queries_checked"])
    for level in ("agent", "instance"):
        headline = getattr(labels_run.privacy, level).epsilon
        with_charge = epsilon_for(compose_events([queries.at(level), charge.at(level)]), 1e-3)
        assert headline == pytest.approx(with_charge, rel=1e-6)
        assert headline > epsilon_for(queries.at(level), 1e-3, "rdp")  # the release is not free
        assert holds_gnss(charge.at(level))
    assert labels_run.privacy.agent.epsilon <= 8.0  # calibration planned the release too
    assert labels_run.privacy.accountant == "rdp"  # GNSS has an RDP bound only
    assert isinstance(charge.agent.events[0], SmoothSensitivityGaussianDpEvent)


def test_counts_say_what_they_count(labels_run):
    data = labels_run.to_dict()
    record = data["confident_gnmax"]
    assert data["queries_checked"] == record["queries_checked"] == len(record["answered"]) == 40
    assert data["queries_answered"] == record["queries_answered"] == sum(record["answered"])
    assert data["queries"] == data["queries_answered"]  # old readers: the labels released


def test_the_text_summary_prints_the_released_figure_labelled(labels_run):
    text = summary(labels_run)
    assert "40 queries checked" in text and f"{labels_run.details['queries_answered']} answered" in text
    released = labels_run.privacy.agent.data_dependent_epsilon_released
    assert f"data-dependent ε {released:.4f}, released by smooth sensitivity" in text
    assert f"{labels_run.diagnostics['data_dependent']['agent']['epsilon']:.4f}" not in text


def test_the_report_cards_show_only_the_release_and_old_files_keep_the_clean_figure_off_them(labels_run, tmp_path):
    labels_run.save(tmp_path / "new")
    page = write_report(tmp_path / "new", plot_files=False).read_text()
    assert "data-dependent ε (released), agent level" in page
    assert 'data-key="queries_checked"' in page and 'data-key="queries_answered"' in page
    cards = page[: page.index('id="diagnostics"')]
    clean = labels_run.diagnostics["data_dependent"]["agent"]["epsilon"]
    assert json.dumps(clean) not in cards
    # A result.json written before the fix: its clean figure is shown in the table, labelled, never as a card.
    old = copy.deepcopy(labels_run.to_dict())
    for level in ("agent", "instance"):
        entry = old["privacy"][level]
        entry["data_dependent_epsilon"] = entry.pop("data_dependent_epsilon_released")
        entry["data_dependent_label"] = "data-dependent (not itself private): Confident-GNMax"
    for key in ("queries_checked", "queries_answered", "diagnostics"):
        old.pop(key)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "result.json").write_text(json.dumps(old))
    page = write_report(tmp_path / "old", plot_files=False).read_text()
    assert "data-dependent ε (released)" not in page and "data-dependent ε, agent level" not in page
    assert "data-dependent ε (clean, not itself private)" in page
    assert "queries checked (pass bits)" in page  # from confident_gnmax's own counts
