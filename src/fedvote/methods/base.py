"""The method template: what happens in a run, written only against Transport and ledger."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from torch import nn

from fedvote.data.federation import Federation, ServerData
from fedvote.methods.options import build_options
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import PrivacyReport
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig


@dataclass(frozen=True, eq=False)
class MethodOutcome:
    """What a method hands back: the student and the pseudo-labels it released.

    ``query_indices`` (Q,) index the public pool; ``pseudo_labels`` (Q,) are the
    released labels for them; ``details`` holds method-specific result keys.
    """

    student: nn.Module
    query_indices: np.ndarray
    pseudo_labels: np.ndarray
    details: Mapping[str, Any] = field(default_factory=dict)


class Method(ABC):
    """A federated algorithm. Subclasses set ``name`` and implement the two hooks.

    ``planned_events`` describes, before anything runs, every release the method
    will make (used to calibrate noise to a target ε); ``run`` carries the method
    out, charging each release to the ledger *before* its result is used.
    """

    name: ClassVar[str]
    # The level whose ε ``--epsilon`` calibrates σ to; None: nothing to calibrate.
    calibration_level: ClassVar[str | None] = "agent"
    # The frozen dataclass of the method's own settings (fields made with
    # fedvote.methods.options.method_option); None: the method has none.
    options_type: ClassVar[type | None] = None
    sigma: float  # the noise parameter of the method's releases (σ or noise multiplier)

    @classmethod
    def options_from(cls, config: RunConfig) -> Any:
        """The method's options dataclass built from ``config.options`` (None: it has none).

        Where a method's settings are validated: a key the method does not take is refused
        by name (:func:`fedvote.methods.options.build_options`), as is a bad value.
        """
        return build_options(cls.name, cls.options_type, config.options)

    @classmethod
    @abstractmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> Method:
        """The method as ``config`` describes it, with the run's resolved σ, Q and t."""

    @classmethod
    def prepare_federation(cls, config: RunConfig, federation: Federation) -> Federation:
        """The federation the method runs on, from the one ``config`` built (default: as is).

        A hook for methods that need a different public view of the same data, e.g. a
        labelled validation slice of the public pool. Must be idempotent: a federation it
        already prepared comes back unchanged.
        """
        return federation

    @abstractmethod
    def with_sigma(self, sigma: float) -> Method:
        """The same method with noise std ``sigma``."""

    @abstractmethod
    def planned_events(self) -> LevelEvents:
        """Events of every release the method will make, at both levels."""

    def stated_privacy(self, report: PrivacyReport) -> PrivacyReport:
        """The run's privacy report as the method states it; by default the accountant's, unchanged.

        A method whose paper states its ε by a composition rule of its own (FedAUXfdp: the
        basic composition ε_scores + ε_classes) reports it here. It may only ever be
        looser than (or equal to) what the ledger's events prove.
        """
        return report

    @abstractmethod
    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Carry out the method; agents act only through ``transport``."""
