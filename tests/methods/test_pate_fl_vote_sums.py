"""PATE-FL's ``--student-targets``: the student regresses the released sums (post-processing).

What is checked: "auto" resolves from public metadata only (wide vectors → vote-sums, images
and small vectors → labels, Confident-GNMax → labels); Q defaults to the whole pool (capped)
and σ is calibrated for it; the ε is the same as with label targets at the same σ and Q; the
student is the ridge fit of exactly the sums the ledger was charged for.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.data.federation import PublicMetadata
from fedvote.errors import ConfigError
from fedvote.methods.options.voting import PateFLOptions
from fedvote.models.config import MAX_REGRESSION_QUERIES, resolve_student_targets
from fedvote.models.vote_regression import fit_vote_regression
from fedvote.runner import default_queries, plan, run
from fedvote.settings import build_config

CIFAR_FEATURES = PublicMetadata(
    pool_size=3_000, num_agents=100, num_classes=10, example_shape=(3_200,), agent_records=(500,) * 100
)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((3_200,), "vote-sums"), ((1_024,), "vote-sums"), ((1_023,), "labels"), ((64,), "labels"),
     ((1, 28, 28), "labels"), ((3, 32, 32), "labels")],
)
def test_auto_resolves_from_the_example_shape(shape: tuple[int, ...], expected: str) -> None:
    assert resolve_student_targets("auto", shape) == expected
    assert resolve_student_targets("labels", shape) == "labels"
    assert resolve_student_targets("vote-sums", shape) == "vote-sums"


def test_wide_vectors_plan_the_whole_pool_calibrated_to_the_target() -> None:
    config = build_config("pate-fl", epsilon=4.0, delta=1e-3)
    planned = plan(config, CIFAR_FEATURES)
    assert planned.release_options.student_targets == "vote-sums"
    assert planned.queries == CIFAR_FEATURES.pool_size
    assert planned.planned_details()["student_targets"] == "vote-sums"
    # The same ε as label targets asking as many queries: σ depends on Q alone.
    labels_config = build_config("pate-fl", epsilon=4.0, delta=1e-3, queries=3_000, student_targets="labels")
    labels = plan(labels_config, CIFAR_FEATURES)
    assert planned.sigma == labels.sigma
    # The runner's noise cap does not shrink Q here: the regression averages the noise.
    assert planned.sigma > 0.25 * CIFAR_FEATURES.num_agents


def test_the_pool_cap_and_a_given_q() -> None:
    big = PublicMetadata(pool_size=20_000, num_agents=100, num_classes=10, example_shape=(3_200,))
    assert plan(build_config("pate-fl", sigma=40.0), big).queries == MAX_REGRESSION_QUERIES
    assert plan(build_config("pate-fl", sigma=40.0, queries=300), big).queries == 300


def test_images_keep_the_label_rule() -> None:
    images = PublicMetadata(pool_size=3_000, num_agents=100, num_classes=10, example_shape=(1, 28, 28))
    planned = plan(build_config("pate-fl", sigma=11.0), images)
    assert planned.release_options.student_targets == "labels"
    assert planned.queries == default_queries(3_000)


def test_confident_gnmax_releases_no_sums() -> None:
    confident = plan(build_config("pate-fl", sigma=40.0, release="labels"), CIFAR_FEATURES)
    assert confident.release_options.student_targets == "labels"
    with pytest.raises(ConfigError, match="student_targets"):
        PateFLOptions(release="labels", student_targets="vote-sums")
    with pytest.raises(ConfigError, match="student_targets"):
        PateFLOptions(student_targets="sums")


def test_the_student_is_the_fit_of_the_charged_sums(regressed_sums: dict[str, np.ndarray]) -> None:
    """End to end on digits with vote-sums forced: same ε as labels, the student fits the released sums."""
    seen = regressed_sums
    common = {"agents": 10, "sigma": 6.0, "queries": 60, "teacher_model": "logistic", "epochs": 5}
    regressed = run(build_config("pate-fl", student_targets="vote-sums", **common))
    labelled = run(build_config("pate-fl", student_targets="labels", student_epochs=2, **common))
    assert seen["sums"].shape == (60, 10)
    assert regressed.details["student_queries"] == 60  # every released query, whatever its margin
    assert regressed.privacy.agent.epsilon == pytest.approx(labelled.privacy.agent.epsilon, rel=1e-12)
    assert regressed.privacy.instance.epsilon == pytest.approx(labelled.privacy.instance.epsilon, rel=1e-12)
    # The released argmaxes are the labels of the same sums.
    np.testing.assert_array_equal(regressed.analysis.pseudo_labels, seen["sums"].argmax(axis=1))
    fit = fit_vote_regression(seen["features"], seen["sums"])
    assert fit.ridge in fit.loo_errors


def test_weighted_pate_inherits_the_rule_and_passes_it_to_its_student(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weighted PATE plans like PATE-FL and its run hands the resolved targets to label_and_teach."""
    planned = plan(build_config("weighted-pate", sigma=40.0), CIFAR_FEATURES)
    assert planned.release_options.student_targets == "vote-sums"
    assert planned.queries == CIFAR_FEATURES.pool_size
    seen: list[str] = []
    from fedvote.methods import weighted_pate

    real = weighted_pate.label_and_teach

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs["student_targets"])
        return real(*args, **kwargs)

    monkeypatch.setattr(weighted_pate, "label_and_teach", spy)
    run(build_config("weighted-pate", agents=10, sigma=6.0, queries=40, teacher_model="logistic", epochs=3))
    assert seen == ["labels"]  # digits' 64 pixels
