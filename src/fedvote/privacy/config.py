"""How privacy is configured, by name: accountants, levels, kNN bounds, the range of σ.

Light on purpose: nothing here imports dp_accounting or scipy, so that ``fedvote --help``
and the validation of a config answer at once (the command line builds its choices from
these names). :mod:`~fedvote.privacy.accountant`, :mod:`~fedvote.privacy.events` and
:mod:`~fedvote.privacy.calibrate` take them from here.
"""

from __future__ import annotations

# The accountants of :func:`fedvote.privacy.accountant.epsilon_for`.
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp", "exact", "classic")

# The two levels every release is accounted at (:class:`fedvote.privacy.events.LevelEvents`).
LEVELS: tuple[str, ...] = ("agent", "instance")

# How DP-FTRL reads prefix sums from its tree (:mod:`fedvote.privacy.tree_aggregation`): Honaker's
# estimator over every node of the complete tree, or the plain binary decomposition.
TREE_ESTIMATORS: tuple[str, ...] = ("honaker", "plain")

# Private-kNN-FL's instance-level sensitivity: tight √2/k_min or the paper's √(2/k_min).
KNN_BOUNDS: tuple[str, ...] = ("tight", "paper")

# The range calibration searches σ in (σ as the method defines it: the noise std on a vote
# sum of sensitivity 1, or a noise multiplier; noise per unit of sensitivity either way).
# Below SIGMA_FLOOR a release is not private in any useful sense (noise a hundredth of one
# vote: ε in the thousands for a hundred queries), and the numerical accountants' cost
# grows without bound (a PLD's support spans ~1/σ² per step): a target ε met only there is
# refused, saying so. Above SIGMA_CEILING the noise drowns every release (ε ≈ 0, nothing
# is learned); PrivacyConfig refuses a larger --sigma, for which noise arithmetic overflows.
SIGMA_FLOOR = 1e-2
SIGMA_CEILING = 1e6
