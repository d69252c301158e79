"""DP-FedSGD: every agent trains by DP-SGD on its own records; the server averages.

The voting paper's appendix F (after Abadi et al. 2016): in each of T rounds the
sampled agents (probability q each; default q = 1, every agent) start from the global θ
and run E steps of DP-SGD through Opacus — Poisson batches (each record with
probability q_b), per-sample gradients clipped to C, N(0, z²C²) added to every step's
sum — and send their update; the server moves θ by the data-size weighted mean of the
updates (the record counts are public metadata, so the weighting is post-processing).

**Accounting.** A record lives in exactly one agent; only that agent's DP-SGD steps
touch it. Every agent uses the same q_b and is charged E steps in every round, so every
agent — the worst one included — has the instance-level event T·E steps of
PoissonSampled(q_b, Gaussian(z)) (:func:`fedvote.privacy.events.dp_fedsgd_events`).
With q < 1 an agent that was not sampled took no step, so charging every round is an
upper bound (exact at the default q = 1). The instance level is **replace-one record**,
as everywhere in fedvote (so that ``fedvote compare`` puts one adjacency in one column):
the event is accounted under dp-accounting's REPLACE_ONE relation,
``replace_one(SelfComposed(PoissonSampled(q_b, Gaussian(z)), T·E))`` — the replaced
record's clipped gradient g (‖g‖ ≤ C) becomes another g′, each step's pair is
(1−q_b)N(0, z²) + q_b·N(∓1, z²) in units of C. DP-SGD's usual add/remove-one figure is
smaller (about half the ε at the same z) and is not what fedvote reports.

**Agent level: not private.** Per-record clipping bounds nothing about an agent's whole
data (its update is not clipped at the agent level), so the agent-level ε is ∞ (null in
result.json). ``sigma`` (the DP-SGD noise multiplier z) is therefore calibrated to the
target ε at the *instance* level, replace-one (``calibration_level = "instance"``).

**Defaults.** T = 100 rounds, E = 1 local step (the paper's choice for DP-FedSGD),
q = 1, q_b = 0.25 (about 6 of a digits agent's 25 records), C = 1, η = 1.
The paper's per-sample clip S = 0.08 is relative to its AlexNet's gradient scale; here the
step is η·C, so only the product matters for the signal while the noise-to-signal ratio
is z/(q_b·n_i); C = 1 with η = 1 was chosen on digits (η = 0.5 and 2 did worse).
Inputs are centred by the public pool's mean (``--center-inputs``, a public constant,
:mod:`fedvote.models.shifted_input`). The model follows the record counts (public
metadata, :meth:`DpFedSgd.with_public`): a logistic model when the smallest agent holds
fewer than :data:`~fedvote.methods.prifedsync.SMALL_CLIENT_RECORDS` records (the noise's
norm grows with √d, and a few dozen records cannot outweigh it in an MLP), else the MLP;
a ``--gradient-model`` the user gives is kept (``docs/defaults.md``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedvote.data.federation import PublicMetadata
from fedvote.errors import ConfigError
from fedvote.methods.gradient import GradientMethod, weighted_mean_update
from fedvote.methods.options.gradient import DpFedSgdOptions
from fedvote.methods.prifedsync import SMALL_CLIENT_RECORDS
from fedvote.models.local_training import DpSgdSpec, LocalTraining, LocalUpdates
from fedvote.privacy.events import LevelEvents, dp_fedsgd_events
from fedvote.transport import capabilities
from fedvote.transport.base import Transport

# The model for small agents (the smallest holds fewer than SMALL_CLIENT_RECORDS records).
SMALL_AGENT_MODEL = "logistic"


@dataclass(frozen=True)
class DpFedSgd(GradientMethod):
    """DP-FedSGD with DP-SGD noise multiplier ``sigma`` (z).

    Defaults: T = 100, q = 1, E = 1, q_b = 0.25, C = 1, η = 1 (×0.99 per round), inputs
    centred by the public pool's mean, the MLP — or a logistic model when the smallest
    agent holds fewer than :data:`SMALL_CLIENT_RECORDS` records or the inputs are wide
    feature vectors (:meth:`with_public`). ``sigma`` = 0 runs clipped FedSGD without noise
    (non-private). ``model_from_public`` says whether :meth:`with_public` may choose the model
    (False when the user gave one); ``smallest_agent_records`` is what it read.
    """

    name = "dp-fedsgd"
    requires: ClassVar[tuple[type, ...]] = (capabilities.LocalUpdates,)
    calibration_level: ClassVar[str | None] = "instance"
    options_type: ClassVar[type | None] = DpFedSgdOptions
    audit_release = "trainer-run"

    sampling_rate: float = 1.0
    local_steps: int = 1
    learning_rate: float = 1.0
    batch_sampling_rate: float = 0.25
    per_sample_clip: float = 1.0
    center_inputs: bool = True
    smallest_agent_records: int | None = None

    def with_public(self, public: PublicMetadata) -> DpFedSgd:
        """The model chosen from the record counts (public metadata) unless the user gave one.

        A logistic model when the smallest agent holds fewer than :data:`SMALL_CLIENT_RECORDS`
        records, else :meth:`GradientMethod.with_public`'s choice (logistic on wide feature
        vectors, the MLP by default). Nothing else changes: the events depend on q_b, z and
        T·E only, so ε is the same whichever model is trained. Without record counts (None)
        only the shape rule applies.
        """
        shaped = super().with_public(public)
        assert isinstance(shaped, DpFedSgd)
        if public.agent_records is None or len(public.agent_records) == 0 or not self.model_from_public:
            return shaped
        smallest = int(min(public.agent_records))
        method = dataclasses.replace(shaped, smallest_agent_records=smallest)
        if smallest < SMALL_CLIENT_RECORDS:
            rule = f"record counts: the smallest agent holds {smallest} < {SMALL_CLIENT_RECORDS} records"
            return dataclasses.replace(method, model=SMALL_AGENT_MODEL, model_rule=rule)
        if shaped.model_rule == "default":
            rule = f"record counts: the smallest agent holds {smallest} >= {SMALL_CLIENT_RECORDS} records"
            return dataclasses.replace(method, model_rule=rule)
        return method

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.batch_sampling_rate <= 1.0:
            raise ConfigError("batch_sampling_rate", f"must lie in (0, 1], got {self.batch_sampling_rate}")
        if not self.per_sample_clip > 0 or not math.isfinite(self.per_sample_clip):
            raise ConfigError("per_sample_clip", f"must be > 0, got {self.per_sample_clip}")

    @property
    def total_local_steps(self) -> int:
        """DP-SGD steps charged to every agent: E per round, T rounds."""
        return self.local_steps * self.rounds

    def planned_events(self) -> LevelEvents:
        """Instance: replace-one of T·E steps of PoissonSampled(q_b, Gaussian(z)); agent: non-private."""
        return dp_fedsgd_events(self.batch_sampling_rate, self.sigma, self.total_local_steps)

    def round_events(self) -> LevelEvents:
        """One round: E DP-SGD steps of every agent."""
        return dp_fedsgd_events(self.batch_sampling_rate, self.sigma, self.local_steps)

    def check_accountant(self, accountant: str) -> None:
        """Replace-one of a Poisson-subsampled Gaussian needs the PLD accountant."""
        if self.batch_sampling_rate < 1 and self.sigma > 0 and accountant != "pld":
            raise ConfigError(
                "accountant",
                f"DP-FedSGD's instance level is replace-one of a Poisson-subsampled Gaussian, which "
                f"only the pld accountant computes; got {accountant!r}",
            )

    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """E DP-SGD steps (Opacus) on the agent's own records."""
        return LocalTraining(
            model=self.model,
            steps=self.local_steps,
            learning_rate=learning_rate,
            round_index=round_index,
            dp_sgd=DpSgdSpec(
                sampling_rate=self.batch_sampling_rate,
                noise_multiplier=self.sigma,
                max_grad_norm=self.per_sample_clip,
            ),
        )

    def aggregate(
        self, theta: np.ndarray, received: LocalUpdates, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """θ + Σ n_i Δ_i / Σ n_i."""
        return theta + weighted_mean_update(received)

    def details(self, transport: Transport) -> dict[str, object]:
        """The values the accounting used: q_b, z, E·T, C (the model and why: every gradient method's)."""
        return {
            "batch_sampling_rate": self.batch_sampling_rate,
            "noise_multiplier": self.sigma,
            "local_steps": self.total_local_steps,
            "per_sample_clip": self.per_sample_clip,
        }
