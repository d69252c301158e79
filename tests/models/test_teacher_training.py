"""The teachers' model and epochs chosen from public metadata (``fedvote.models.config.teacher_training``)."""

from __future__ import annotations

import math

import pytest

import fedvote
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.models.config import (
    CNN_TEACHER_EXAMPLES,
    CNN_TEACHER_MIN_EPOCHS,
    CNN_TEACHER_MIN_RECORDS,
    CNN_TEACHER_MIN_SIDE,
    DEFAULT_EPOCHS,
    LINEAR_TEACHER_MIN_FEATURES,
    TrainingConfig,
    teacher_training,
)
from fedvote.runner import make_federation, plan, prepare_public
from fedvote.settings import build_config

UNSET = TrainingConfig(model="auto", epochs=None)
MNIST_SHAPE = (1, 28, 28)


def test_mnist_sized_images_with_enough_records_get_cnn_teachers_for_9000_examples():
    """The voting paper's federation (600 records each): CNN teachers, ⌈9000 / 600⌉ = 15 epochs."""
    chosen = teacher_training(UNSET, MNIST_SHAPE, (600,) * 100)
    assert (chosen.model, chosen.epochs) == ("cnn", 15)
    # 20 agents of Fashion-MNIST's 60,000 (3,000 each): ⌈9000 / 3000⌉ = 3, raised to the minimum 5.
    assert teacher_training(UNSET, MNIST_SHAPE, (3_000,) * 20).epochs == CNN_TEACHER_MIN_EPOCHS == 5
    # 400 records: ⌈9000 / 400⌉ = 23 passes; the smallest agent decides.
    assert teacher_training(UNSET, MNIST_SHAPE, (400, 900, 1_200)).epochs == math.ceil(CNN_TEACHER_EXAMPLES / 400)


@pytest.mark.parametrize(
    ("shape", "records", "why"),
    [
        ((1, 8, 8), (900,), "digits-sized images: smaller than 16 a side"),
        ((1, CNN_TEACHER_MIN_SIDE - 1, 28), (900,), "one side under the minimum"),
        (MNIST_SHAPE, (CNN_TEACHER_MIN_RECORDS - 1, 900), "the smallest agent holds too few records"),
        (MNIST_SHAPE, None, "record counts unknown"),
        ((784,), (900,), "flat features: not an image"),
        ((LINEAR_TEACHER_MIN_FEATURES - 1,), (900,), "a vector just under the wide threshold"),
    ],
)
def test_everything_else_gets_mlp_teachers_at_the_default_epochs(shape, records, why):
    chosen = teacher_training(UNSET, shape, records)
    assert (chosen.model, chosen.epochs) == ("mlp", DEFAULT_EPOCHS), why


@pytest.mark.parametrize("width", [LINEAR_TEACHER_MIN_FEATURES, 3_200])
def test_wide_vectors_such_as_patch_features_get_linear_teachers(width):
    """The 3,200 patch features of --input-features patch: logistic teachers, whatever the counts."""
    for records in ((124, 1_111), None):
        chosen = teacher_training(UNSET, (width,), records)
        assert (chosen.model, chosen.epochs) == ("logistic", DEFAULT_EPOCHS)


def test_the_threshold_itself_gets_cnn_teachers():
    chosen = teacher_training(UNSET, (3, CNN_TEACHER_MIN_SIDE, CNN_TEACHER_MIN_SIDE), (CNN_TEACHER_MIN_RECORDS,))
    assert chosen.model == "cnn"
    assert chosen.epochs == math.ceil(CNN_TEACHER_EXAMPLES / CNN_TEACHER_MIN_RECORDS)  # 29


def test_cnn_epochs_stay_between_the_minimum_and_the_default():
    given_cnn = TrainingConfig(model="cnn", epochs=None)
    assert teacher_training(given_cnn, MNIST_SHAPE, (60_000,)).epochs == CNN_TEACHER_MIN_EPOCHS
    assert teacher_training(given_cnn, MNIST_SHAPE, (10,)).epochs == DEFAULT_EPOCHS
    assert teacher_training(given_cnn, MNIST_SHAPE, None).epochs == CNN_TEACHER_MIN_EPOCHS


def test_what_the_user_gave_is_never_replaced():
    assert teacher_training(TrainingConfig(model="mlp", epochs=None), MNIST_SHAPE, (600,)).epochs == DEFAULT_EPOCHS
    assert teacher_training(TrainingConfig(model="auto", epochs=12), MNIST_SHAPE, (600,)) == TrainingConfig(
        model="cnn", epochs=12
    )
    given = TrainingConfig(model="logistic", epochs=3, learning_rate=0.05)
    assert teacher_training(given, MNIST_SHAPE, (600,)) == given


def test_unplanned_epochs_are_refused_by_name_before_training():
    with pytest.raises(ConfigError) as raised:
        _ = UNSET.planned_epochs
    assert raised.value.argument == "epochs"
    assert TrainingConfig(epochs=7).planned_epochs == 7


def test_the_student_always_has_epochs():
    with pytest.raises(ConfigError) as raised:
        RunConfig(student=TrainingConfig(model="auto", epochs=None))
    assert raised.value.argument == "student_epochs"


def test_flags_left_out_leave_the_teachers_to_the_planner_and_the_student_at_40():
    config = build_config("pate-fl")
    assert config.teacher == UNSET
    assert config.student.epochs == DEFAULT_EPOCHS
    assert (config.teacher, config.student) == (RunConfig().teacher, RunConfig().student)  # as in Python
    both = build_config("pate-fl", epochs=7)
    assert (both.teacher.epochs, both.student.epochs) == (7, 7)
    student_only = build_config("pate-fl", student_epochs=9)
    assert (student_only.teacher.epochs, student_only.student.epochs) == (None, 9)


@pytest.mark.parametrize("method", ["pate-fl", "weighted-pate", "majority-vote"])
def test_planned_teacher_methods_hold_the_resolved_teachers(method):
    """Digits (8x8): MLP teachers at 40 epochs, as before the planner chose them."""
    config = build_config(method)
    federation = make_federation(config)
    planned = plan(config, prepare_public(config, federation).public_metadata())
    assert (planned.teacher.model, planned.teacher.epochs) == ("mlp", DEFAULT_EPOCHS)
    teachers = {"teacher_model": "mlp", "teacher_epochs": DEFAULT_EPOCHS}
    # Each also records its student's targets, resolved from the same public shape (64 pixels: labels).
    assert planned.planned_details() == {**teachers, "student_targets": "labels"}


def test_result_records_the_teachers_as_trained():
    result = fedvote.run(
        "pate-fl", agents=10, queries=20, student_model="logistic", student_epochs=2,
        semi_supervised="supervised", epsilon=4.0,
    )  # fmt: skip
    assert result.details["teacher_model"] == "mlp"
    assert result.details["teacher_epochs"] == DEFAULT_EPOCHS
    assert result.config["teacher"]["epochs"] is None  # the config as given: rerun, it plans the same
