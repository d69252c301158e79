"""Model zoo (logistic, MLP, CNN) and the plain training loop."""

from fedvote.models.training import TrainingConfig, fit_classifier, predict_labels
from fedvote.models.zoo import MODEL_NAMES, build_model

__all__ = ["MODEL_NAMES", "TrainingConfig", "build_model", "fit_classifier", "predict_labels"]
