"""The options of multi-label PATE-FL (``--method pate-fl-multilabel``).

Light, as every options module: the command line builds its flags from it without
importing the method (:mod:`fedvote.methods.registry`). Multi-label DP-FedAvg takes
DP-FedAvg's options (:class:`fedvote.methods.options.gradient.DpFedAvgOptions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedvote.errors import ConfigError
from fedvote.methods.options import method_option

# The voting paper's τ on CelebA (appendix "Details of CelebA Datasets Evaluation"), and the
# τ of a single-label dataset read as one-hot attributes (at most one is true).
DEFAULT_TAU = 4
ONE_HOT_TAU = 1


@dataclass(frozen=True)
class MultiLabelOptions:
    """The settings of ``--method pate-fl-multilabel`` (each a ``fedvote run`` flag)."""

    tau: int | None = method_option(
        None,
        "τ: each agent votes for at most this many attributes (its top τ with probability > 1/2); "
        "the vote's sensitivity is √τ (agent) and √(2τ) (instance). Default 4 (the voting paper) on a "
        "multi-label dataset, 1 on a single-label one (its classes read as one-hot attributes); "
        "capped at the number of attributes A.",
    )
    vote_threshold: float = method_option(
        0.5,
        "Attribute a's pseudo-label is 1 iff its noisy vote count exceeds this fraction of the "
        "voters (post-processing of the released sums; no ε).",
    )

    def __post_init__(self) -> None:
        tau = self.tau
        if tau is not None and (isinstance(tau, bool) or not isinstance(tau, int) or tau < 1):
            raise ConfigError("tau", f"must be an integer >= 1, got {tau!r}")
        threshold = self.vote_threshold
        if isinstance(threshold, bool) or not (
            isinstance(threshold, int | float) and math.isfinite(threshold) and 0.0 <= threshold < 1.0
        ):
            raise ConfigError("vote_threshold", f"must be a fraction in [0, 1), got {threshold!r}")

    def tau_for(self, num_attributes: int, encoding: str) -> int:
        """τ as run on A attributes: the option, else 4 (bitmask) or 1 (one-hot); capped at A."""
        default = ONE_HOT_TAU if encoding == "one-hot" else DEFAULT_TAU
        return min(self.tau if self.tau is not None else default, num_attributes)
