"""The method template: what happens in a run, written only against Transport and ledger."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from torch import nn

from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.data.validation import ValidationNeed
from fedvote.errors import ConfigError
from fedvote.methods.options import build_options
from fedvote.models.config import PHOTO_DATASETS
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import AgentGroup, PrivacyStatement
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig


@dataclass(frozen=True, eq=False)
class MethodOutcome:
    """What a method hands back: the student, the pseudo-labels it released, what it states.

    ``query_indices`` (Q,) index the public pool; ``pseudo_labels`` (Q,) are the
    released labels for them; ``details`` holds method-specific public result keys
    (settings, histories of released values). ``statements`` are the method's privacy
    figures beside the accountant's (typed; rendered generically), ``diagnostics`` its
    noiseless functions of private data (simulation only; result.json's "diagnostics").
    """

    student: nn.Module
    query_indices: np.ndarray
    pseudo_labels: np.ndarray
    details: Mapping[str, Any] = field(default_factory=dict)
    statements: tuple[PrivacyStatement, ...] = ()
    # --agent-budgets: each budget group's ε (result.json's privacy.agent_groups).
    agent_groups: tuple[AgentGroup, ...] = ()
    diagnostics: Mapping[str, Any] = field(default_factory=dict)


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
    # The transport capabilities (fedvote.transport.capabilities) every run of the method
    # uses; :meth:`requirements` adds those its options turn on.
    requires: ClassVar[tuple[type, ...]] = ()
    # True where σ is the std of Gaussian noise on vote sums to which each agent adds at most
    # one unit per query (one-hot or probability votes): the vote mass is N, so σ / N says how
    # much of it the noise drowns (the runner's default Q reads it: fedvote.runner.plan).
    votes_with_unit_mass: ClassVar[bool] = False
    # --- What Flower, the audit and the report need to know of the method (its hooks; the
    # contract suite checks them for every method). Those packages read these, never the
    # method's name or type.
    # ``fedvote audit``: the release it reproduces to test the method's claim, one of
    # fedvote.audit.api.AUDIT_RELEASES — multi-trial on the vote sums ("teacher-votes",
    # "knn-votes", "weighted-votes") or on FedAUX's heads ("heads"); one run of DP-FedAvg on
    # canary clients ("fedavg-run") or of a DP-SGD trainer on record canaries ("trainer-run");
    # None: no audit is defined for it ...
    audit_release: ClassVar[str | None] = None
    # ... and whether that audit covers the --secure-noise path too.
    audit_secure_noise: ClassVar[bool] = False
    # ``fedvote deploy``: True where Flower runs the method (a voting method whose vote sums
    # go through SecAgg+; fedvote.flower.files.planned_method) ...
    flower_support: ClassVar[bool] = False
    # ... and, where --secure-noise does not apply on Flower yet, why not (one line, the fix).
    flower_secure_noise_refusal: ClassVar[str | None] = None
    # What the agents' local models are called in the report ("Teacher accuracy across
    # agents"); recorded in result.json's diagnostics.teacher_kind beside their accuracies.
    agent_models: ClassVar[str] = "teacher"
    # The datasets on which ``--input-features auto`` means the patch features for this method
    # (:func:`fedvote.models.input_features.resolve_input_features`).
    auto_patch_datasets: ClassVar[tuple[str, ...]] = PHOTO_DATASETS
    sigma: float  # the noise parameter of the method's releases (σ or noise multiplier)

    def requirements(self) -> tuple[type, ...]:
        """The capabilities this run needs of its transport (default: :attr:`requires`).

        Checked before anything is charged or trained
        (:func:`fedvote.transport.capabilities.check_capabilities`). Never a
        :class:`~fedvote.transport.capabilities.SimulationDiagnostics`: a method computes a
        diagnostic only where its transport has it.
        """
        return self.requires

    @classmethod
    def check_privacy_flags(cls, config: RunConfig) -> None:
        """Refuse the privacy flags this method cannot take, before any data is loaded.

        A method with nothing to calibrate (``calibration_level`` None: FedAvg) refuses
        ``--epsilon``; one that reads its budget otherwise overrides this with its own rule.
        """
        if cls.calibration_level is None and config.privacy.epsilon is not None:
            raise ConfigError("epsilon", f"{cls.name} is not private; drop --epsilon (or use --sigma 0)")

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
    def validation_need(cls, config: RunConfig) -> ValidationNeed | None:
        """The labelled public validation set the method needs, if any (default: none).

        A method never receives the federation: it declares what it needs from the public
        side and the runner provides it (:func:`fedvote.data.validation.provide_validation`),
        before the method is planned.
        """
        return None

    def planned_details(self) -> dict[str, Any]:
        """What the method chose from public metadata, for result.json's ``details`` (default: nothing).

        E.g. the teachers' model and epochs (:func:`~fedvote.models.config.teacher_training`),
        so that a reader sees what ran without rebuilding the plan.
        """
        return {}

    def with_public(self, public: PublicMetadata) -> Method:
        """The method knowing the federation's public metadata (default: it needs none).

        Called by the runner's :func:`~fedvote.runner.plan` before calibration, e.g. with
        the agents' record counts where a bound depends on them.
        """
        return self

    def with_calibrated_settings(self, calibrate: Callable[[Method], float]) -> Method:
        """The method with the settings it plans from the noise its target ε needs (default: none).

        ``calibrate(m)`` is the σ that meets the run's target ε for method ``m``, as the planner
        calibrates it (public quantities only). Called by :func:`~fedvote.runner.plan` before the
        run's own calibration, and only when the run has a target ε: e.g. DP-FedAvg's q
        (:mod:`fedvote.methods.cohort`).
        """
        return self

    def default_queries(self, pool_size: int) -> int | None:
        """Q when ``--queries`` is not given, planned (default None: the runner's own rule).

        Public metadata only, e.g. PATE-FL with vote-sum targets asks for the whole pool
        (:data:`~fedvote.models.config.MAX_REGRESSION_QUERIES` at most).
        """
        return None

    def calibration_target(self, target: float | None) -> float | None:
        """The ε that calibration aims σ at, given the run's target (default: that target).

        PATE-FL with ``--agent-budgets`` aims at the largest budget (issue 45).
        """
        return target

    @property
    def instance_adjacency(self) -> str | None:
        """The instance adjacency the method's ε is stated under, where it says more than replace-one."""
        return None

    @property
    def instance_bound(self) -> str | None:
        """The name of the instance-level sensitivity bound used, where the method chooses one."""
        return None

    @abstractmethod
    def with_sigma(self, sigma: float) -> Method:
        """The same method with noise std ``sigma``."""

    @abstractmethod
    def planned_events(self) -> LevelEvents:
        """Events of every release the method will make, at both levels."""

    @abstractmethod
    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Carry out the method; agents act only through ``transport``."""
