"""Privacy accounting: events describe releases, accountants turn them into (ε, δ).

Methods describe each release as ``dp_accounting`` events at both levels (agent and
instance, see :mod:`fedvote.privacy.events`); a :class:`PrivacyLedger` records them
before anything is released; :func:`epsilon_for` converts with the PLD accountant
(default), RDP, or the exact Gaussian closed form.

The names below are imported when first used (lazy: keeps ``fedvote --help`` under 1 s):
importing this package, or its light :mod:`fedvote.privacy.config`, does not import
dp_accounting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedvote._meta import lazy_exports

if TYPE_CHECKING:
    from fedvote.privacy.accountant import (
        ExactGaussianAccountant,
        epsilon_for,
        gaussian_delta,
        gaussian_epsilon,
        gaussian_mu,
        make_accountant,
    )
    from fedvote.privacy.calibrate import calibrate_sigma
    from fedvote.privacy.config import ACCOUNTANTS, LEVELS
    from fedvote.privacy.events import LevelEvents, gaussian_release_event, pate_fl_events
    from fedvote.privacy.ledger import PrivacyLedger

__all__ = [
    "ACCOUNTANTS",
    "LEVELS",
    "ExactGaussianAccountant",
    "LevelEvents",
    "PrivacyLedger",
    "calibrate_sigma",
    "epsilon_for",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "gaussian_release_event",
    "make_accountant",
    "pate_fl_events",
]

# Where each name of __all__ is defined.
_SOURCES = {
    "ACCOUNTANTS": "fedvote.privacy.config",
    "LEVELS": "fedvote.privacy.config",
    "ExactGaussianAccountant": "fedvote.privacy.accountant",
    "LevelEvents": "fedvote.privacy.events",
    "PrivacyLedger": "fedvote.privacy.ledger",
    "calibrate_sigma": "fedvote.privacy.calibrate",
    "epsilon_for": "fedvote.privacy.accountant",
    "gaussian_delta": "fedvote.privacy.accountant",
    "gaussian_epsilon": "fedvote.privacy.accountant",
    "gaussian_mu": "fedvote.privacy.accountant",
    "gaussian_release_event": "fedvote.privacy.events",
    "make_accountant": "fedvote.privacy.accountant",
    "pate_fl_events": "fedvote.privacy.events",
}


__getattr__ = lazy_exports(__name__, _SOURCES)
