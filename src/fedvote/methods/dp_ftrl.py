"""DP-FTRL: federated learning with tree-aggregation noise and no sampling (Kairouz et al., ICML 2021).

"Practical and private (deep) learning without sampling or shuffling" (Kairouz, McMahan, Song,
Thakkar, Thakurta & Xu), §5's federated form (as Gboard trained its models, McMahan & Thakurta
2022). No agent is sampled at random: the N agents form K fixed groups (``epoch_rounds``; a
permutation from the training seed, public) and group t mod K takes part in round t, so each
agent contributes once per epoch of K rounds. Each participant trains E local SGD steps from θ
and clips its update Δ_i to norm C. The server sums the round's clipped updates — the leaf x_t
of a binary tree — and releases the noisy prefix sum of the epoch's leaves by tree aggregation
(:class:`fedvote.privacy.tree_aggregation.TreeAggregator`: each released node gets N(0, z²C²);
``tree_estimator`` "honaker", the default, releases every node of the complete tree and estimates
the prefix by Honaker's efficient estimator, the paper's Appendix B.1; "plain" one node a round),
and FTRL takes θ_t = θ_e + η_s·(noisy x_1 + … + x_t)/(N/K), θ_e the model at the epoch's start.
The tree restarts every epoch (the paper's restart variant), with θ_e carried over. With
``server_momentum`` γ > 0 (the paper's DP-FTRLM) the server steps by heavy-ball momentum on the
increments of the noisy prefix sums: u_t = γ·u_{t−1} + (S_t − S_{t−1}), θ_t = θ_{t−1} + η_s·u_t/(N/K),
u carried across restarts — a function of the released prefix sums only, so the ε is the same.

**Accounting** (:func:`fedvote.privacy.events.dp_ftrl_events`; ``docs/privacy.md``, "DP-FTRL").
An agent lies in one leaf per epoch, so in at most ⌊log₂ k_e⌋ + 1 released nodes of the epoch's
tree of k_e leaves: Σ_e (⌊log₂ k_e⌋ + 1) Gaussians of sensitivity C (agent, zero-out) or 2C
(instance, replace-one), each with noise z·C: the paper's sensitivity √(levels × participations)
bound, ρ = Σ_e levels(k_e)/(2z²)-zCDP. No sampling, so no amplification: the bound holds whatever
an observer knows of who took part. Each epoch's Gaussians are charged before its first round.
The tree's noise is added by the server (Gboard's trust model): the ε holds against observers of
the released models, not against the server, which sees each round's sum without noise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedvote.errors import ConfigError
from fedvote.methods.cohort import planned_epoch_rounds
from fedvote.methods.gradient import GradientMethod
from fedvote.methods.options.gradient import DpFtrlOptions
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.privacy import tree_aggregation
from fedvote.privacy.config import TREE_ESTIMATORS
from fedvote.privacy.events import LevelEvents, dp_ftrl_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport import capabilities
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig
    from fedvote.data.federation import ServerData
    from fedvote.methods.base import MethodOutcome

# K of a DpFtrl built directly: one group, every agent in every round (what the planner takes for
# N ≤ 100; from the command line K not given is ⌈N/100⌉, :func:`fedvote.methods.cohort.planned_epoch_rounds`).
DEFAULT_EPOCH_ROUNDS = 1

HOLDS_AGAINST = (
    "observers of the released models only; the server is trusted (it sums each round's clipped "
    "updates and adds the tree's noise: against it ε = ∞)"
)


@dataclass(eq=False)
class _FtrlState:
    """One run's server state: the epoch's tree, the model θ_e it started from, and the momentum.

    ``previous_prefix`` S_{t−1} (this epoch's estimate at round t − 1; zero at its start),
    ``velocity`` u_{t−1} (carried across epochs) and ``lagged_velocity`` Σ u_{s−1} over the epoch's
    rounds s ≤ t, so that θ_t = θ_e + η_s·(S_t + γ·Σ u_{s−1})/(N/K) — the heavy-ball model in FTRL form,
    which at γ = 0 is θ_e + η_s·S_t/(N/K) exactly.
    """

    tree: tree_aggregation.TreeAggregator | None = None
    epoch_start: np.ndarray | None = None
    previous_prefix: np.ndarray | None = None
    velocity: np.ndarray | None = None
    lagged_velocity: np.ndarray | None = None


@dataclass(frozen=True)
class DpFtrl(GradientMethod):
    """DP-FTRL with noise multiplier ``sigma`` = z; defaults T = 100, K = 1, E = 20, C = 0.08, η_s = 1, γ = 0.

    ``epoch_rounds`` K: the agents' groups and the tree's restart period; ``clip_norm`` C;
    ``server_learning_rate`` η_s; ``server_momentum`` γ (0: plain FTRL); ``tree_estimator`` how
    prefix sums are read from the tree
    (:data:`fedvote.privacy.config.TREE_ESTIMATORS`; the same bound for either).
    ``sampling_rate`` is not used (nobody is sampled).
    """

    name = "dp-ftrl"
    requires: ClassVar[tuple[type, ...]] = (capabilities.LocalUpdates,)
    calibration_level: ClassVar[str | None] = "agent"
    options_type: ClassVar[type | None] = DpFtrlOptions

    clip_norm: float = 0.08
    epoch_rounds: int = DEFAULT_EPOCH_ROUNDS
    server_learning_rate: float = 1.0
    server_momentum: float = 0.0
    tree_estimator: str = "honaker"
    _state: _FtrlState = field(default_factory=_FtrlState, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.clip_norm > 0 and np.isfinite(self.clip_norm)):
            raise ConfigError("clip_norm", f"must be > 0, got {self.clip_norm}")
        rounds = self.epoch_rounds
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigError("epoch_rounds", f"must be an integer >= 1, got {self.epoch_rounds!r}")
        if not (self.server_learning_rate > 0 and np.isfinite(self.server_learning_rate)):
            raise ConfigError("server_learning_rate", f"must be > 0, got {self.server_learning_rate}")
        if not 0.0 <= self.server_momentum < 1.0:
            raise ConfigError("server_momentum", f"must be in [0, 1), got {self.server_momentum}")
        if self.tree_estimator not in TREE_ESTIMATORS:
            choices = ", ".join(TREE_ESTIMATORS)
            raise ConfigError("tree_estimator", f"must be one of {choices}, got {self.tree_estimator!r}")

    def gaussians(self) -> int:
        """Σ_e (⌊log₂ k_e⌋ + 1): the node Gaussians one agent lies in over the T rounds."""
        return tree_aggregation.gaussian_count(self.rounds, self.epoch_rounds)

    def planned_events(self) -> LevelEvents:
        """All epochs' trees (:func:`fedvote.privacy.events.dp_ftrl_events`)."""
        return dp_ftrl_events(self.sigma, self.gaussians())

    def round_events(self) -> LevelEvents:
        """One full epoch's tree (what :meth:`events_of_round` charges at an epoch's first round)."""
        return dp_ftrl_events(self.sigma, tree_aggregation.levels(self.epoch_rounds))

    def events_of_round(self, round_index: int) -> LevelEvents:
        """The epoch's tree at its first round (⌊log₂ k_e⌋ + 1 Gaussians), nothing at the others."""
        if round_index % self.epoch_rounds:
            return dp_ftrl_events(self.sigma, 0)
        leaves = min(self.epoch_rounds, self.rounds - round_index)
        return dp_ftrl_events(self.sigma, tree_aggregation.levels(leaves))

    def groups(self, num_agents: int) -> list[np.ndarray]:
        """The K fixed groups: a permutation of the agents from the training seed, cut in K (public)."""
        order = np.random.default_rng(np.random.SeedSequence([self.seed, 0xF7B1])).permutation(num_agents)
        return [np.sort(part) for part in np.array_split(order, self.epoch_rounds)]

    def participants(self, round_index: int, num_agents: int, rng: np.random.Generator) -> np.ndarray:
        """Group t mod K: every agent once per epoch, nobody sampled (``rng`` is not drawn from)."""
        return self.groups(num_agents)[round_index % self.epoch_rounds]

    def participation_details(self) -> dict[str, object]:
        """No sampling rate: cyclic fixed groups."""
        return {
            "sampling_rate": None,
            "participation": f"cyclic: {self.epoch_rounds} fixed groups, group t mod K in round t",
        }

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> DpFtrl:
        """As every gradient method; K not given: ⌈N/100⌉ (:mod:`fedvote.methods.cohort`), K > N refused."""
        method = super().from_config(config, sigma=sigma, queries=queries, min_responders=min_responders)
        assert isinstance(method, DpFtrl)
        agents = config.federation.agents
        if cls.options_from(config).epoch_rounds is None:
            method = dataclasses.replace(method, epoch_rounds=planned_epoch_rounds(agents))
        method._check_groups(agents)
        return method

    def _check_groups(self, num_agents: int) -> None:
        if self.epoch_rounds > num_agents:
            raise ConfigError(
                "epoch_rounds", f"K = {self.epoch_rounds} groups exceed the {num_agents} agents"
            )

    def check_transport(self, transport: Transport) -> None:
        """Every group must hold an agent (K ≤ N), or a round would release nothing but noise."""
        self._check_groups(transport.num_agents)

    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """E SGD iterations, the update clipped to C; the agent adds no noise (the tree does)."""
        return LocalTraining(
            model=self.model,
            steps=self.local_steps,
            learning_rate=learning_rate,
            batch_size=self.batch_size,
            round_index=round_index,
            clip_norm=self.clip_norm,
        )

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """The gradient loop on a copy holding this run's own trees."""
        method = dataclasses.replace(self)  # a fresh _FtrlState
        return GradientMethod.run(method, server, transport, ledger, progress)

    def aggregate(
        self, theta: np.ndarray, received: LocalUpdates, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """Leaf x_t = Σ clipped updates; θ = θ_e + η_s·(S_t + γ·Σ_s u_{s−1})/(N/K), S_t the noisy prefix.

        At γ = 0 this is FTRL, θ_e + η_s·S_t/(N/K); at γ > 0 it equals the heavy-ball steps
        θ_t = θ_{t−1} + η_s·u_t/(N/K), u_t = γ·u_{t−1} + (S_t − S_{t−1}) (summed over the epoch's rounds).
        The tree's node noise comes from ``rng``, the run's privacy generator (CSPRNG-seeded
        only on the secure path, which DP-FTRL is not on).
        """
        state = self._state
        dim = theta.shape[0]
        if state.velocity is None:  # the run's first round: no momentum yet
            state.velocity = np.zeros(dim, dtype=np.float64)
        if state.tree is None:  # an epoch's first round: a fresh tree from θ_e = θ
            node_std = self.sigma * self.clip_norm
            state.tree = tree_aggregation.TreeAggregator(dim, node_std, self.tree_estimator)
            state.epoch_start = theta.astype(np.float64)
            state.previous_prefix = np.zeros(dim, dtype=np.float64)
            state.lagged_velocity = np.zeros(dim, dtype=np.float64)
        assert state.epoch_start is not None and state.previous_prefix is not None
        assert state.lagged_velocity is not None
        leaf = np.zeros(dim, dtype=np.float64)  # (d,): zeros for an empty group
        if received.updates.shape[0] > 0:
            leaf = received.updates.astype(np.float64).sum(axis=0)
        prefix = state.tree.add(leaf, rng)  # (d,): the estimate S_t of x_1 + … + x_t of this epoch
        state.lagged_velocity += state.velocity  # Σ u_{s−1}, s ≤ t
        state.velocity = self.server_momentum * state.velocity + (prefix - state.previous_prefix)  # u_t
        state.previous_prefix = prefix
        mean_group = num_agents / self.epoch_rounds  # public
        step = prefix + self.server_momentum * state.lagged_velocity  # (d,): Σ u_s over the epoch
        updated = state.epoch_start + self.server_learning_rate * step / mean_group
        if state.tree.steps == self.epoch_rounds:  # the epoch ends: restart the tree, keep u
            state.tree, state.epoch_start = None, None
        return updated

    def details(self, transport: Transport) -> dict[str, object]:
        """The values the accounting used: z, C, K, the Gaussians per agent; whom ε holds against."""
        return {
            "noise_multiplier": self.sigma,
            "clip_norm": self.clip_norm,
            "noise": "server",
            "epoch_rounds": self.epoch_rounds,
            "epochs": len(tree_aggregation.epoch_lengths(self.rounds, self.epoch_rounds)),
            "tree": "binary tree aggregation, restarted every epoch",
            "tree_estimator": self.tree_estimator,
            "node_gaussians_per_agent": self.gaussians(),
            "node_noise_std": self.sigma * self.clip_norm,
            "server_learning_rate": self.server_learning_rate,
            "server_momentum": self.server_momentum,
            "update_denominator": transport.num_agents / self.epoch_rounds,
            "epsilon_holds_against": HOLDS_AGAINST,
        }
