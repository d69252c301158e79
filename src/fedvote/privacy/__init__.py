"""Privacy accounting: events describe releases, accountants turn them into (ε, δ).

Methods describe each release as ``dp_accounting`` events at both levels (agent and
instance, see :mod:`fedvote.privacy.events`); a :class:`PrivacyLedger` records them
before anything is released; :func:`epsilon_for` converts with the PLD accountant
(default), RDP, or the exact Gaussian closed form.
"""

from fedvote.privacy.accountant import (
    ACCOUNTANTS,
    ExactGaussianAccountant,
    epsilon_for,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    make_accountant,
)
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import LEVELS, LevelEvents, gaussian_release_event, pate_fl_events
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
