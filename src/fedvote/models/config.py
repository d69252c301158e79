"""How a model is chosen and trained, as configuration: names and :class:`TrainingConfig`.

Light on purpose: nothing here imports torch, so that ``fedvote --help`` and the
validation of a config answer at once (the command line builds its choices from these
names). The modules that train (:mod:`~fedvote.models.zoo`, :mod:`~fedvote.models.training`,
:mod:`~fedvote.models.student`, …) take their names from here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fedvote.errors import ConfigError

# The architectures of :func:`fedvote.models.zoo.build_model`: "cnn" is the small CNN sized for
# MNIST-like grey images, "cifar-cnn" the TensorFlow-tutorial CNN PriFedSync trains on CIFAR-10
# (fedvote.models.cifar_cnn), "resnet8" FedAUX's ResNet-8 (fedvote.models.resnet).
MODEL_NAMES: tuple[str, ...] = ("auto", "logistic", "mlp", "cnn", "cifar-cnn", "resnet8")
# The convolutional networks among them: they are what "auto" may pick for images.
CONV_MODELS: tuple[str, ...] = ("cnn", "cifar-cnn", "resnet8")
# "auto" picks the small "cnn" for every image. The example shape cannot tell RGB photos from
# RGB digits (CIFAR-10 and the synthetic digits are both 3x32x32, and a horizontal flip is wrong
# for digits), and at its default learning rate "cifar-cnn" trained worse CIFAR-10 teachers
# than measured needed (docs/defaults.md, CIFAR-10): the RGB models are chosen by name.
# Per-batch image augmentations of :mod:`fedvote.models.crop_flip`: "crop-flip" is the standard
# CIFAR one (a random 32x32 crop of the image padded by 4 zero pixels, and a horizontal flip
# with probability 1/2); "auto" is crop-flip for the RGB models ("cifar-cnn", "resnet8"), else none.
AUGMENTATIONS: tuple[str, ...] = ("auto", "none", "crop-flip")
# The public feature extractors of :func:`fedvote.models.features.fit_feature_extractor`.
FEATURE_KINDS: tuple[str, ...] = (
    "identity", "pca", "random", "autoencoder", "contrastive", "patch", "module"
)
# What every record of a run is seen through (fedvote.models.input_features): "patch" is the
# single-layer patch features of Coates & Ng fitted on the public pool only (a public map φ
# that every agent applies to its own records, so every method trains on φ(x)); "none" the
# records as they are; "auto" is "patch" for the datasets of photographed objects, whose class a
# mirror image keeps (:data:`PHOTO_DATASETS`, known by name: public; CIFAR-10's scenes and
# Fashion-MNIST's product photos), and "none" for every other (digits and handwriting).
INPUT_FEATURES: tuple[str, ...] = ("auto", "none", "patch")
PHOTO_DATASETS: tuple[str, ...] = ("cifar10", "fashion-mnist")
# The photo datasets whose pixels the methods that fit their own few-dozen-direction PCA of the
# inputs (Private-kNN-FL's φ, FedAUX's h₀) cannot use on a CPU: only there "auto" gives them the
# patch features. On Fashion-MNIST the PCA of its pixels kept more of the classes than the PCA of
# the standardised patch features (docs/defaults.md, "Fashion-MNIST: the voting paper's non-IID
# command").
COLOUR_PHOTO_DATASETS: tuple[str, ...] = ("cifar10",)
# The local noisy optimizers of :mod:`fedvote.models.batched_dp_sgd`.
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
# The class head's replace-one sensitivity: "tight" 2√2/(λ·n) (max per-record gradient
# norm √2) or "paper" 2√C/(λ·n) (fedaux-fdp.txt, Theorem 1: each of C rows bounded by 1).
CLASS_HEAD_BOUNDS: tuple[str, ...] = ("tight", "paper")

# The student's semi-supervised methods, by name: "fixmatch" needs images.
SEMI_SUPERVISED_METHODS: tuple[str, ...] = ("fixmatch", "vat")
# How the student uses the unlabelled pool; "auto" is FixMatch for images of at least
# fedvote.models.student.FIXMATCH_MIN_SIDE pixels a side, else VAT (measured on digits and
# MNIST: docs/defaults.md).
STUDENT_TRAINING: tuple[str, ...] = ("auto", *SEMI_SUPERVISED_METHODS, "self-training", "supervised")
# The arithmetic a model trains in (fedvote.models.precision): "bfloat16" runs the forward and
# backward products under bfloat16 autocast, the weights and optimiser staying float32;
# "auto" is bfloat16 for images of at least 16x16 where the CPU multiplies bfloat16 natively.
PRECISIONS: tuple[str, ...] = ("auto", "float32", "bfloat16")

# Passes over the data when none is given: every student, and perceptron teachers.
DEFAULT_EPOCHS = 40
# "auto" teachers are CNNs for images at least this many pixels a side whose smallest agent
# holds at least CNN_TEACHER_MIN_RECORDS records (ten batches of 32), else MLPs; a CNN teacher
# whose epochs are not given sees about CNN_TEACHER_EXAMPLES examples (at least
# CNN_TEACHER_MIN_EPOCHS passes). Measured on the voting paper's MNIST federation (100
# agents x 600, 6 classes each; docs/defaults.md): CNN teachers at 5 epochs train in the time
# MLP teachers take for 40 and err on fewer queries; on digits (8x8, ~15 records per agent)
# CNN teachers fall far below the MLP's. 9,000 examples (15 passes at 600 records; was 3,000):
# on the same federation of Fashion-MNIST (issue 43) 15 passes lifted the teachers' clean
# plurality on the 3,000-image pool from 0.818 to 0.853 (tried on that dataset: docs/defaults.md).
CNN_TEACHER_MIN_SIDE = 16
CNN_TEACHER_MIN_RECORDS = 320
CNN_TEACHER_EXAMPLES = 9_000
CNN_TEACHER_MIN_EPOCHS = 5
# "auto" teachers are linear (logistic) for vectors of at least this many features, such as the
# 1,600 patch features of --input-features patch: made for a linear classifier (Coates et al.),
# and on CIFAR-10 (100 agents, Dirichlet 0.5; docs/defaults.md) logistic teachers trained in a third
# of the MLP's time and gave right pseudo-labels more often (0.570 vs 0.515 at Q = 200).
LINEAR_TEACHER_MIN_FEATURES = 1_024


def check_student_training(name: str) -> None:
    """Refuse an unknown ``--semi-supervised`` name."""
    if name not in STUDENT_TRAINING:
        raise ConfigError("semi_supervised", f"unknown {name!r}; choose from {', '.join(STUDENT_TRAINING)}")


@dataclass(frozen=True)
class TrainingConfig:
    """How one model is trained: architecture and optimiser settings (Adam, mini-batches).

    Parameters
    ----------
    model : str
        One of :data:`MODEL_NAMES`, or ``"auto"`` (a CNN for images, else an MLP).
    epochs : int or None
        Passes over the training data. ``None`` (teachers only): chosen with the model from
        public metadata (:func:`teacher_training`) before anything is trained.
    batch_size : int
        Mini-batch size (the last batch of an epoch may be smaller).
    learning_rate : float
        Adam step size.
    weight_decay : float
        L2 penalty (Adam's ``weight_decay``).
    augment_shift : int
        Images only: each mini-batch is shifted by a random (dy, dx) in
        [−augment_shift, augment_shift]² (circularly), a cheap augmentation for small
        labelled sets. 0 (default) trains on the data as is.
    augment : str
        One of :data:`AUGMENTATIONS`: ``"crop-flip"`` gives every image of every mini-batch its
        own random crop (4-pixel zero padding) and horizontal flip, drawn from the model's
        generator; ``"auto"`` (default) is crop-flip for the RGB models and nothing otherwise
        (:func:`resolve_augment`). The batched teachers apply it per agent as each alone would.
    validation_fraction : float
        Early stopping: the fraction of a model's own training data held out, drawn
        from its seeded generator, to measure a validation loss after every epoch
        (:meth:`validation_size` records of n). 0 (default) holds nothing out.
    patience : int or None
        Early stopping: stop after this many epochs in a row without a strictly lower
        validation loss, and keep the weights of the epoch with the lowest one. ``None``
        (default) trains every epoch. Set both or neither; a dataset too small to spare
        a validation record (``validation_size(n) == 0``) trains every epoch on all of
        it. :func:`fit_classifier` and the batched
        :func:`fedvote.models.ensemble.fit_ensemble` apply the same rule per agent.
    precision : str
        One of :data:`PRECISIONS`: the arithmetic of the student's training steps
        (:mod:`fedvote.models.precision`). ``"float32"`` (default) everywhere else; the
        batched teachers always train in float32.

    """

    model: str = "mlp"
    epochs: int | None = DEFAULT_EPOCHS
    batch_size: int = 32
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4
    augment_shift: int = 0
    augment: str = "auto"
    validation_fraction: float = 0.0
    patience: int | None = None
    precision: str = "float32"

    def __post_init__(self) -> None:
        if self.model not in MODEL_NAMES:
            raise ConfigError("model", f"unknown model {self.model!r}; choose from {', '.join(MODEL_NAMES)}")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError("epochs", f"must be at least 1, got {self.epochs}")
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be at least 1, got {self.batch_size}")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", f"must be > 0, got {self.learning_rate}")
        if self.augment_shift < 0:
            raise ConfigError("augment_shift", f"must be >= 0, got {self.augment_shift}")
        if self.augment not in AUGMENTATIONS:
            raise ConfigError("augment", f"unknown {self.augment!r}; choose from {', '.join(AUGMENTATIONS)}")
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError(
                "validation_fraction", f"must be in [0, 1), got {self.validation_fraction}"
            )
        if self.patience is not None and self.patience < 1:
            raise ConfigError("patience", f"must be at least 1 (or None), got {self.patience}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                "precision", f"unknown {self.precision!r}; choose from {', '.join(PRECISIONS)}"
            )
        if (self.patience is None) != (self.validation_fraction == 0.0):
            raise ConfigError(
                "patience",
                "early stopping needs both validation_fraction > 0 and patience; got "
                f"validation_fraction={self.validation_fraction}, patience={self.patience}",
            )

    @property
    def planned_epochs(self) -> int:
        """The epochs to train; refused (by name) while still unset, before any training starts."""
        if self.epochs is None:
            raise ConfigError("epochs", "not planned yet: teacher_training() sets it from public metadata")
        return self.epochs

    @property
    def early_stopping(self) -> bool:
        """Whether models hold out validation data and stop early (``patience`` set)."""
        return self.patience is not None

    def validation_size(self, num_records: int) -> int:
        """Records held out for validation from ``num_records``: floor(fraction · n)."""
        return int(math.floor(self.validation_fraction * num_records)) if self.early_stopping else 0


def image_model(example_shape: tuple[int, ...]) -> str:
    """The convolutional network "auto" picks for images of ``example_shape`` (public metadata).

    The small "cnn" for every image shape: the shape alone cannot tell photos (where the RGB
    models and their flips suit) from digits (where they do not); "cifar-cnn" and "resnet8"
    are chosen by name (``--teacher-model``, ``--student-model``).
    """
    del example_shape  # one answer for every image, kept as a parameter for its callers
    return "cnn"


def resolve_augment(augment: str, model: str, example_shape: tuple[int, ...]) -> str:
    """``"auto"`` becomes ``"crop-flip"`` for image models made for RGB photos, else ``"none"``."""
    if augment != "auto":
        return augment
    is_image = len(example_shape) == 3
    return "crop-flip" if is_image and model in ("cifar-cnn", "resnet8") else "none"


# With vote-sum targets and no --queries, Q is the whole pool up to this many queries: the
# regression averages the noise over queries, so more (noisier) sums at the same ε cost
# nothing in what it learns and cover more of the pool (fedvote.models.vote_regression).
MAX_REGRESSION_QUERIES = 5_000


def resolve_student_targets(targets: str, example_shape: tuple[int, ...]) -> str:
    """``"auto"`` is ``"vote-sums"`` for vectors of at least :data:`LINEAR_TEACHER_MIN_FEATURES` features.

    There the teachers are linear too (:func:`teacher_training`) and a linear student fitted
    to every noisy sum beats one trained on the few confident noisy-argmax labels; images keep
    ``"labels"`` (their FixMatch/VAT students need labels). Public metadata only: no ε.
    """
    if targets != "auto":
        return targets
    is_wide_vector = len(example_shape) == 1 and example_shape[0] >= LINEAR_TEACHER_MIN_FEATURES
    return "vote-sums" if is_wide_vector else "labels"


def teacher_training(
    teacher: TrainingConfig, example_shape: tuple[int, ...], agent_records: tuple[int, ...] | None
) -> TrainingConfig:
    """``teacher`` with ``"auto"`` and unset epochs resolved from public metadata alone.

    ``"auto"``: a CNN for images (channels, h, w) of at least :data:`CNN_TEACHER_MIN_SIDE`
    pixels a side when the smallest agent holds at least :data:`CNN_TEACHER_MIN_RECORDS`
    records (the small "cnn": :func:`image_model`); a linear (logistic) teacher for vectors of at
    least :data:`LINEAR_TEACHER_MIN_FEATURES` features; else an MLP (record counts unknown: an
    MLP); augmentation ``"auto"`` stays, and the trainers resolve it from the model and shape
    (:func:`resolve_augment`).
    Epochs not given: a CNN sees
    about :data:`CNN_TEACHER_EXAMPLES` examples, ⌈9000 / n_min⌉ passes clipped to
    [:data:`CNN_TEACHER_MIN_EPOCHS`, :data:`DEFAULT_EPOCHS`]; any other model
    :data:`DEFAULT_EPOCHS`. Choices from the example shape and record counts only: they
    cost no privacy (docs/defaults.md).
    """
    smallest = min(agent_records) if agent_records else None
    model = teacher.model
    if model == "auto":
        is_large_image = len(example_shape) == 3 and min(example_shape[1:]) >= CNN_TEACHER_MIN_SIDE
        enough_records = smallest is not None and smallest >= CNN_TEACHER_MIN_RECORDS
        is_wide_vector = len(example_shape) == 1 and example_shape[0] >= LINEAR_TEACHER_MIN_FEATURES
        if is_wide_vector:
            model = "logistic"
        else:
            model = image_model(example_shape) if is_large_image and enough_records else "mlp"
    epochs = teacher.epochs
    if epochs is None:
        epochs = DEFAULT_EPOCHS
        if model in CONV_MODELS:
            passes = math.ceil(CNN_TEACHER_EXAMPLES / smallest) if smallest else CNN_TEACHER_MIN_EPOCHS
            epochs = min(DEFAULT_EPOCHS, max(CNN_TEACHER_MIN_EPOCHS, passes))
    return dataclasses.replace(teacher, model=model, epochs=epochs)
