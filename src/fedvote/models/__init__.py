"""Model zoo (logistic, MLP, CNN) and the plain training loop.

The names below are imported when first used (lazy: keeps ``fedvote --help`` under 1 s):
importing this package, or its light :mod:`fedvote.models.config`, does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """The exported ``name``, imported from its module on first use."""
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value
    return value
