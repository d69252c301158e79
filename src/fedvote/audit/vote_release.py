"""The vote release of PATE-FL, Private-kNN-FL and weighted PATE, run many times on a canary federation.

Everything that is not the randomness under audit is computed once, as ``fedvote sweep``
reuses it: the federation and σ as the run plans them (:func:`fedvote.runner.plan`), the
queries the method would ask (:func:`fedvote.data.query_selection.choose_queries`), every
agent's teacher (or kNN voter, or vote weight) and its clean votes. The noise is drawn
through the code a real run executes: each agent is an :class:`~fedvote.agents.agent.Agent`
built as :class:`~fedvote.transport.local.LocalTransport` builds it (its own noise
stream), every release leaves through the method's agent-side release function and so
through :meth:`Agent.release` — validation, then the agent's noise share of std
``noise_share_std(σ, t)`` — and the server's view is the sum of the N releases. Agent 0
is the canary (:mod:`fedvote.audit.canaries`); in D' at agent level it sends a zero vote
through the same exit (its noise share alone), as zero-out prescribes.

``secure_noise`` (``fedvote audit --secure-noise``, PATE-FL): the agents are built as a
``--secure-noise`` run builds them, so each integer vote leaves with an exact discrete
Gaussian share N_Z(0, σ²/t) from OpenDP's CSPRNG sampler — the release a deployment
runs, audited against its discrete accounting (:mod:`fedvote.privacy.discrete`).

Many trials are released in one call per agent: a trial is Q rows, so T trials are one
release of T·Q rows (each row validated and noised independently, exactly as T releases
of Q rows would be).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from fedvote.agents import teacher_votes
from fedvote.agents.agent import Agent, VoteOutput
from fedvote.agents.knn_votes import KnnVoter
from fedvote.agents.weighted_votes import WeightedVoter, validation_accuracy
from fedvote.aggregation import voting as aggregation_voting
from fedvote.aggregation.secure_noise import csprng_seeded_generator
from fedvote.aggregation.voting import accuracy_bin, one_hot_votes
from fedvote.audit.canaries import VoteCanary, vote_canary
from fedvote.data.federation import Federation
from fedvote.data.query_selection import choose_queries
from fedvote.errors import ConfigError
from fedvote.methods import PateFL, PrivateKnnFL, WeightedPate
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import agent_noise_seeds, agent_training_seeds

# How one agent releases votes (rows, C) with noise std s: the method's agent-side function.
Release = Callable[[np.ndarray, float, int], np.ndarray]



@dataclass(frozen=True, eq=False)
class VoteRelease:
    """A canary federation's vote release: N agents' release functions, their clean votes, σ/√t.

    ``clean`` (N, Q, C): agent i's clean votes (row 0, the canary's slot, is unused);
    ``noise_std``: each agent's share σ/√t, from the method's own σ and t.
    """

    agents: tuple[Agent, ...]
    releases: tuple[Release, ...]
    clean: np.ndarray
    noise_std: float
    canary: VoteCanary

    @property
    def others(self) -> np.ndarray:
        """The other agents' clean vote sums (Q, C), known to the auditor."""
        return self.clean[1:].sum(axis=0)

    @property
    def baseline(self) -> np.ndarray:
        """What the server receives in D' without noise, (Q, C)."""
        return self.others + self.canary.baseline

    @property
    def difference(self) -> np.ndarray:
        """What the canary adds in D, (Q, C)."""
        return self.canary.difference

    def received(self, canary_in: bool, trials: int) -> np.ndarray:
        """The server's view of ``trials`` independent releases on D (``canary_in``) or D', (T, Q, C)."""
        queries, classes = self.clean.shape[1:]
        rows = trials * queries
        total = np.zeros((rows, classes), dtype=np.float64)
        for release, votes in zip(self.releases[1:], self.clean[1:], strict=True):
            total += release(np.tile(votes, (trials, 1)), self.noise_std, rows)
        if canary_in:
            total += self.releases[0](np.tile(self.canary.present, (trials, 1)), self.noise_std, rows)
        elif self.canary.absent is None:  # zero-out: the canary agent sends a zero vote and its share
            zeros = np.zeros((rows, classes), dtype=np.float64)
            total += self.agents[0].release(zeros, self.noise_std, VoteOutput(num_queries=rows))
        else:
            total += self.releases[0](np.tile(self.canary.absent, (trials, 1)), self.noise_std, rows)
        return total.reshape(trials, queries, classes)


def build_vote_release(
    method: PateFL | PrivateKnnFL,
    federation: Federation,
    level: str,
    *,
    seed: int,
    noise_seed: int | None,
    progress: Progress = NO_PROGRESS,
    secure_noise: bool = False,
) -> VoteRelease:
    """The canary federation of ``method`` (planned on ``federation``) at ``level``.

    Teachers are trained (kNN voters prepared, weights fixed) once, with the run's seeds;
    the agents' noise streams come from ``noise_seed`` (None: OS entropy). With
    ``secure_noise`` (PATE-FL only) the agents draw discrete Gaussian shares from the CSPRNG.
    """
    if secure_noise and not method.audit_secure_noise:  # Method.audit_secure_noise
        raise ConfigError("secure_noise", f"is not audited for {method.name}'s vote sums")
    if secure_noise and noise_seed is not None:
        raise ConfigError("secure_noise", "cannot be seeded (drop --noise-seed)")
    entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
    training_seeds = agent_training_seeds(seed, federation.num_agents)
    agents = tuple(
        Agent(
            agent_id=i,
            data=data,
            public_features=federation.public.features,
            num_classes=federation.num_classes,
            noise_rng=csprng_seeded_generator()
            if secure_noise
            else np.random.default_rng(agent_noise_seeds(entropy, i)),
            seed=training_seeds[i],
            secure_noise=secure_noise,
        )
        for i, data in enumerate(federation.agents)
    )
    queries = choose_queries(
        federation.public.features, method.queries, method.seed, method.query_selection
    )  # (Q,)
    if method.audit_release == "knn-votes":  # Method.audit_release: which votes to reproduce
        knn = cast(PrivateKnnFL, method)
        releases, clean, k = _knn_voters(knn, federation, agents, queries, progress)
        canary = vote_canary(level, clean[1:].sum(axis=0), k=k)
    elif method.audit_release == "weighted-votes":
        weighted = cast(WeightedPate, method)
        releases, clean, weight = _weighted_voters(weighted, federation, agents, queries, progress)
        canary = vote_canary(level, clean[1:].sum(axis=0), weight=weight)
    else:  # "teacher-votes"
        releases, clean = _teacher_voters(cast(PateFL, method), agents, queries, progress)
        canary = vote_canary(level, clean[1:].sum(axis=0))
    noise_std = aggregation_voting.noise_share_std(method.sigma, method.min_responders)
    return VoteRelease(agents=agents, releases=releases, clean=clean, noise_std=noise_std, canary=canary)


def _trained(method: PateFL, agents: tuple[Agent, ...], progress: Progress) -> None:
    with progress.step("training the agents' teachers (once)", total=len(agents) - 1) as bar:
        for agent in agents[1:]:  # agent 0 is the canary: its votes are the canary's
            agent.train_teacher(method.teacher)
            bar.advance()


def _teacher_voters(
    method: PateFL, agents: tuple[Agent, ...], queries: np.ndarray, progress: Progress
) -> tuple[tuple[Release, ...], np.ndarray]:
    """PATE-FL: one-hot teacher votes released by :func:`teacher_votes.release_votes`."""
    _trained(method, agents, progress)
    clean = np.zeros((len(agents), queries.shape[0], agents[0].num_classes))  # (N, Q, C)
    for i, agent in enumerate(agents[1:], start=1):
        clean[i] = one_hot_votes(agent.voted_labels(agent.public_features[queries]), agent.num_classes)
    releases = tuple(_teacher_release(agent) for agent in agents)
    return releases, clean


def _teacher_release(agent: Agent) -> Release:
    return lambda votes, noise_std, rows: teacher_votes.release_votes(agent, votes, noise_std, rows)


def _weighted_voters(
    method: WeightedPate,
    federation: Federation,
    agents: tuple[Agent, ...],
    queries: np.ndarray,
    progress: Progress,
) -> tuple[tuple[Release, ...], np.ndarray, float]:
    """Weighted PATE: each agent's weight from the rule; the canary votes with w_max (the accounted bound).

    The relative schemes read a released accuracy summary; here its clean histogram stands in
    (the summary's own noise is not what this audit measures; a lower bound on the votes'
    release alone is a lower bound on the whole run's, which composes it with the summary).
    """
    options = method.options
    _trained(method, agents, progress)
    validation = federation.validation
    histogram = None
    if options.relative:
        assert validation is not None
        histogram = np.zeros(options.summary_bins)
        for agent in agents[1:]:
            histogram[accuracy_bin(validation_accuracy(agent, validation), options.summary_bins)] += 1
    rule = options.weight_rule(histogram)
    max_weight = options.vote_max_weight
    voters = [WeightedVoter(agents[0], max_weight)]
    voters += [WeightedVoter.from_rule(agent, validation, rule) for agent in agents[1:]]
    clean = np.zeros((len(agents), queries.shape[0], agents[0].num_classes))
    for i, voter in enumerate(voters[1:], start=1):
        clean[i] = voter.noisy_votes(queries, 0.0)  # noise std 0: the clean weighted votes
    releases = tuple(_weighted_release(voter) for voter in voters)
    return releases, clean, float(max_weight)


def _weighted_release(voter: WeightedVoter) -> Release:
    """An agent's weighted release from its clean weighted vote w·one-hot (rows, C).

    The :class:`WeightedVoter` weighs a one-hot vote itself (its weight never leaves it), so
    the one-hot vote is handed back to it: the canary's voter holds w_max, the others their own.
    """

    def release(votes: np.ndarray, noise_std: float, rows: int) -> np.ndarray:
        one_hot = (votes > 0).astype(np.float64)  # (rows, C)
        return voter.release_votes(one_hot, noise_std, rows)

    return release


def _knn_voters(
    method: PrivateKnnFL,
    federation: Federation,
    agents: tuple[Agent, ...],
    queries: np.ndarray,
    progress: Progress,
) -> tuple[tuple[Release, ...], np.ndarray, int]:
    """Private-kNN-FL: φ fitted on the public pool, each agent's :class:`KnnVoter`; the canary at k_min."""
    with progress.step("fitting φ and the agents' kNN voters (once)", total=len(agents)) as bar:
        extractor = method.fit_features(federation.server_data())
        public = extractor.transform(federation.public.features)  # (P, d), public
        voters = []
        for agent in agents:
            voters.append(
                KnnVoter.prepare(
                    agent, extractor, k=method.k, k_fraction=method.k_fraction, public_embedding=public
                )
            )
            bar.advance()
    clean = np.zeros((len(agents), queries.shape[0], agents[0].num_classes))
    for i, voter in enumerate(voters[1:], start=1):
        clean[i] = voter.noisy_votes(queries, 0.0)
    k_min = int(min(voter.k for voter in voters))  # the accounting's k (the smallest any agent uses)
    releases = tuple(voter.release_votes for voter in voters)
    return releases, clean, k_min
