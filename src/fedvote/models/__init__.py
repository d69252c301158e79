"""Model zoo (logistic, MLP, CNN) and the plain training loop.

The names below are imported when first used (lazy: keeps ``fedvote --help`` under 1 s):
importing this package, or its light :mod:`fedvote.models.config`, does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedvote._meta import lazy_exports

if TYPE_CHECKING:
    from fedvote.models.config import MODEL_NAMES, TrainingConfig
    from fedvote.models.training import fit_classifier, predict_labels
    from fedvote.models.zoo import build_model

__all__ = ["MODEL_NAMES", "TrainingConfig", "build_model", "fit_classifier", "predict_labels"]

# Where each name of __all__ is defined.
_SOURCES = {
    "MODEL_NAMES": "fedvote.models.config",
    "TrainingConfig": "fedvote.models.config",
    "build_model": "fedvote.models.zoo",
    "fit_classifier": "fedvote.models.training",
    "predict_labels": "fedvote.models.training",
}


__getattr__ = lazy_exports(__name__, _SOURCES)
