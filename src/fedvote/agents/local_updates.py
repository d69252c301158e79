"""Agent-side local training for the gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD).

The agent loads the global θ, trains on its own records and releases its update
Δ = θ' − θ through its one exit (:meth:`fedvote.agents.agent.Agent.release`): checked to be
finite, of θ's shape and — when the round clips — within norm S, then noised with the
agent's share (:func:`release_update`). An agent that was not sampled sends its noise share
alone (:meth:`fedvote.agents.agent.Agent.noise_share`).

An in-process transport may train many agents' rounds as one vectorised computation
(:mod:`fedvote.transport.batched_clients`). It takes each agent's randomness from here
(:func:`local_draws`: the same generator, the same draws as :func:`local_update`) and
sends each trained update out through :func:`release_update`: what leaves an agent, and
the noise it carries, is the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fedvote.agents.agent import Agent, ArrayOutput
from fedvote.aggregation.secure_noise import exact_discrete_gaussian
from fedvote.errors import ConfigError
from fedvote.models.local_training import (
    DpSgdDraws,
    LocalTraining,
    clip_to_norm,
    dp_sgd_draws,
    dp_sgd_steps,
    flat_parameters,
    load_flat_parameters,
    minibatch_rows,
    sgd_steps,
)
from fedvote.models.shifted_input import shift_features
from fedvote.models.zoo import build_model


def local_update(agent: Agent, global_params: np.ndarray, training: LocalTraining) -> np.ndarray:
    """The agent's update Δ = θ' − θ from the global θ (d,) after local training, (d,) float32.

    Plain SGD for ``training.steps`` iterations (FedAvg, Algorithm 4), then — when the
    round asks — Δ clipped to norm S and noised with N(0, noise_std²) from this agent's
    own generator (DP-FedAvg, Algorithm 6). With ``training.dp_sgd`` the local steps are
    DP-SGD through Opacus instead, its Poisson batches and noise also drawn from this
    agent's privacy randomness (DP-FedSGD). With ``training.input_shift`` (a public
    constant) the agent trains on its records minus the shift — before anything is
    clipped, so every bound above is unchanged. Only the update leaves the agent.
    """
    data = agent.private_data
    shape = tuple(data.features.shape[1:])
    features = shift_features(data.features, training.input_shift)  # (n, ...): the agent's own copy
    model = build_model(training.model, shape, agent.num_classes, generator=torch.Generator().manual_seed(0))
    start = np.asarray(global_params, dtype=np.float32)
    load_flat_parameters(model, start)
    generator = local_generator(agent, training)
    if training.dp_sgd is not None:
        dp_sgd_steps(
            model,
            features,
            data.labels,
            steps=training.steps,
            learning_rate=training.learning_rate,
            spec=training.dp_sgd,
            generator=generator,
        )
    else:
        sgd_steps(
            model,
            features,
            data.labels,
            steps=training.steps,
            learning_rate=training.learning_rate,
            batch_size=training.batch_size,
            generator=generator,
        )
    return release_update(agent, flat_parameters(model) - start, training)


def local_generator(agent: Agent, training: LocalTraining) -> torch.Generator:
    """The generator of the agent's local training this round.

    DP-SGD: seeded from the agent's privacy stream (:meth:`Agent.privacy_seed`; one draw
    per call), since its batches and noise are privacy randomness. Plain SGD: the
    mini-batch order, seeded from the agent's training seed and the round.
    """
    if training.dp_sgd is not None:
        return torch.Generator().manual_seed(agent.privacy_seed())
    order_seed = np.random.SeedSequence([agent.seed, 0x56D0, training.round_index])
    return torch.Generator().manual_seed(int(order_seed.generate_state(1)[0]))


@dataclass(frozen=True, eq=False)
class LocalDraws:
    """One agent's randomness for one round, drawn as :func:`local_update` draws it.

    ``batches``: each local step's rows, indices into the agent's own records; ``noise``
    (steps, d): DP-SGD's noise on each step's clipped sum, or None for plain SGD.
    """

    batches: tuple[torch.Tensor, ...]
    noise: torch.Tensor | None


def local_draws(
    agent: Agent, training: LocalTraining, parameter_shapes: Sequence[tuple[int, ...]]
) -> LocalDraws:
    """The agent's batches (and DP-SGD noise) for this round, from :func:`local_generator`.

    For a transport that trains many agents at once: the same generator, drawn in the same
    order as :func:`local_update`'s training draws it, so the batched round is the loop's
    (the DP-SGD draws are Opacus's, :func:`~fedvote.models.local_training.dp_sgd_draws`).
    ``parameter_shapes`` are the model's, in ``parameters()`` order.
    """
    n = agent.num_records
    generator = local_generator(agent, training)
    if training.dp_sgd is not None:
        spec = training.dp_sgd
        draws: DpSgdDraws = dp_sgd_draws(
            n, steps=training.steps, spec=spec, parameter_shapes=parameter_shapes, generator=generator
        )
        return LocalDraws(batches=draws.batches, noise=draws.noise)
    rows = minibatch_rows(n, steps=training.steps, batch_size=training.batch_size, generator=generator)
    return LocalDraws(batches=tuple(rows), noise=None)


@dataclass(frozen=True)
class ClipCountTraining(LocalTraining):
    """A round of DP-FedAvg with adaptive clipping: the update and its clip bit leave together.

    Besides the update clipped to C (``clip_norm``), the agent reports b = 1[‖Δ‖ ≤ C], centred
    and scaled, as one more coordinate: (b − ½)·``count_scale`` (Andrew et al. 2021;
    :func:`fedvote.privacy.adaptive_clipping.count_scale`, σ_Δ·C/σ_b, so that ``noise_std``
    also covers the count). The release is (d + 1,), of norm at most √(C² + (count_scale/2)²).

    Every release of the round — a sampled agent's, an unsampled agent's share — is made with
    ``count_coordinates`` = :attr:`count_coordinates` (1): it noises its d update coordinates
    with exactly the draws of the fixed clip's release (common random numbers: the same standard
    normals, times this round's std) and its count coordinate from the agent's separate count
    stream, N(0, noise_std²) as before.
    """

    count_scale: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clip_norm is None:
            raise ConfigError("clipping", "the adaptive clip's count needs a clip norm")
        if not (self.count_scale > 0 and math.isfinite(self.count_scale)):
            raise ConfigError("clip_count_stddev", f"the count's scale must be > 0, got {self.count_scale}")
        if self.dp_sgd is not None or self.dann_scale is not None:
            raise ConfigError("clipping", "adaptive clipping counts plain local updates (no DP-SGD, no DANN)")

    @property
    def count_coordinates(self) -> int:
        """The release's trailing count coordinates: the clip bit (:meth:`Agent.release`)."""
        return 1


@dataclass(frozen=True)
class DiscreteTraining(LocalTraining):
    """A round of DP-FedAvg with ``--secure-noise``: quantised updates and exact discrete Gaussian shares.

    The update clipped to S (``clip_norm``) is divided by ``granularity`` γ and rounded at random
    to integers, conditionally on an L2 norm ≤ ``norm_bound`` B (Kairouz, Liu & Steinke 2021);
    the agent adds N_Z(0, ``share_variance``) to every coordinate (its own CSPRNG draws,
    :func:`~fedvote.aggregation.secure_noise.exact_discrete_gaussian`) and refuses to send a
    coordinate beyond ``largest_value`` (so the sum cannot wrap: checked by the method).
    """

    granularity: float = 1.0
    norm_bound: float = 1.0
    share_variance: int = 0
    largest_value: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clip_norm is None or self.noise_std != 0:
            raise ConfigError("secure_noise", "discrete shares need a clip norm and no float noise")
        if not (self.granularity > 0 and self.norm_bound > 0 and self.share_variance >= 0):
            raise ConfigError(
                "secure_noise", "granularity and norm bound must be > 0, the share variance >= 0"
            )


# Conditional rounding: tries before the (norm-reducing) rounding toward zero is taken instead.
_ROUNDING_TRIES = 64


def conditional_rounding(values: np.ndarray, bound: float, rng: np.random.Generator) -> np.ndarray:
    """``values`` (d,) rounded at random to integers (up with probability the fraction), ‖·‖₂ ≤ ``bound``.

    KLS21's conditional randomized rounding: a draw above the bound is drawn again; after
    :data:`_ROUNDING_TRIES` the rounding toward zero (norm ≤ ‖values‖) is taken. int64.
    """
    floor = np.floor(values)
    fraction = values - floor
    limit = math.floor(bound * bound)
    for _ in range(_ROUNDING_TRIES):
        rounded = (floor + (rng.random(values.shape) < fraction)).astype(np.int64)
        if int(np.dot(rounded, rounded)) <= limit:
            return rounded
    toward_zero = np.trunc(values).astype(np.int64)
    if int(np.dot(toward_zero, toward_zero)) > limit:
        raise ValueError(f"the values' norm {np.linalg.norm(values):g} exceeds the bound {bound:g}")
    return toward_zero


def discrete_share(agent: Agent, width: int, training: DiscreteTraining) -> np.ndarray:
    """An unsampled agent's release: zeros through its exit plus its N_Z(0, σ_l²) share, int64 (width,)."""
    zeros = agent.release(np.zeros(width), 0.0, ArrayOutput("noise share", (width,)))
    return _with_discrete_share(zeros.astype(np.int64), training)


def _with_discrete_share(values: np.ndarray, training: DiscreteTraining) -> np.ndarray:
    """``values`` plus an exact discrete Gaussian share (os.urandom); refused beyond ``largest_value``."""
    noisy = values.copy()
    if training.share_variance:
        noisy += exact_discrete_gaussian(training.share_variance, values.shape)
    largest = int(np.max(np.abs(noisy))) if noisy.size else 0
    if largest > training.largest_value:  # probability below e^(−2000): refused, never wrapped
        raise ConfigError("secure_sum", f"a share value {largest} beyond ±{training.largest_value}: not sent")
    return noisy


# --- Unsampled agents' noise shares, many agents at once (issue 46, item 4) ------------------------
#
# At N = 10,000 on MNIST a round is N·d ≈ 10⁹ Gaussians. Every agent keeps its own stream: one draw
# of its privacy stream seeds a torch generator of its own (:meth:`Agent.share_generator`), whose
# float32 Gaussians (vectorised Box–Muller) fill that agent's row of a block. Each row equals
# :meth:`Agent.noise_share` for that agent alone, and the server still only ever adds N separate
# shares: nothing is drawn for the sum as a whole. With adaptive clipping (``count_coordinates``
# 1) a row's first d entries are the fixed clip's share (the same generator, the same d
# Gaussians) and its last the agent's count stream's.


def fast_shares_apply(agent: Agent) -> bool:
    """Whether ``agent``'s shares may come from :func:`noise_shares` (not with ``--secure-noise``).

    A secure-noise agent keeps :meth:`Agent.noise_share`'s CSPRNG-seeded Gaussian.
    """
    return not agent.secure_noise


def noise_shares(
    agents: Sequence[Agent],
    width: int,
    noise_std: float,
    out: np.ndarray | None = None,
    *,
    count_coordinates: int = 0,
) -> np.ndarray:
    """The ``agents``' noise shares N(0, noise_std²), (m, width) float32, one row an agent.

    Row i is ``agents[i].write_noise_share``'s: what ``agents[i].noise_share((width,),
    noise_std)`` returns, in float32. ``out``, when given, is a C-contiguous (≥ m, width)
    float32 buffer whose first m rows are filled and returned. Not for secure-noise agents
    (:func:`fast_shares_apply`). With ``count_coordinates`` k (adaptive clipping: 1, width
    d + 1) each row's last k entries come from its agent's count stream and its first d are the
    row ``noise_shares(agents, d, noise_std)`` would give.
    """
    if not (math.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std}")
    block = np.empty((len(agents), width), dtype=np.float32) if out is None else out[: len(agents)]
    rows = torch.from_numpy(block)  # (m, width), shares block's memory
    for row, agent in enumerate(agents):
        if not fast_shares_apply(agent):
            raise ConfigError("secure_noise", "a secure-noise agent draws its share by Agent.noise_share")
        agent.write_noise_share(rows[row], noise_std, count_coordinates=count_coordinates)
    return block


def count_coordinates(training: LocalTraining) -> int:
    """How many trailing coordinates of a round's releases are a count: 1 with adaptive clipping, else 0."""
    return training.count_coordinates if isinstance(training, ClipCountTraining) else 0


def released_width(training: LocalTraining, d: int) -> int:
    """The length of what an agent releases for a model of d floats: d, or d + 1 with its clip bit."""
    return d + count_coordinates(training)


def release_update(agent: Agent, update: np.ndarray, training: LocalTraining) -> np.ndarray:
    """The trained update Δ (d,) as it leaves the agent, (d,) float32 — (d + 1,) with its clip bit.

    Clipped to norm S when the round clips (DP-FedAvg), checked and noised with the agent's
    share N(0, noise_std²) by :meth:`Agent.release` — the one exit. With
    :class:`ClipCountTraining` the centred, scaled bit 1[‖Δ‖ ≤ C] is appended before the
    check, and the share noises both: the update's d coordinates with the draws the fixed clip's
    release would get, the bit from the agent's count stream (:class:`ClipCountTraining`).
    """
    update = np.asarray(update, dtype=np.float32)
    if isinstance(training, DiscreteTraining):
        assert training.clip_norm is not None  # DiscreteTraining refuses None
        scaled = clip_to_norm(update, training.clip_norm).astype(np.float64) / training.granularity
        rng = np.random.default_rng(agent.privacy_seed())  # the rounding's coins: the agent's own
        rounded = conditional_rounding(scaled, training.norm_bound, rng)  # (d,) int64, ‖·‖ ≤ B
        expected_int = ArrayOutput("quantised update", tuple(rounded.shape), norm_bound=training.norm_bound)
        checked = agent.release(rounded.astype(np.float64), 0.0, expected_int).astype(np.int64)
        return _with_discrete_share(checked, training)
    if isinstance(training, ClipCountTraining):
        assert training.clip_norm is not None  # ClipCountTraining refuses None
        below = float(np.linalg.norm(update.astype(np.float64))) <= training.clip_norm
        clipped = clip_to_norm(update, training.clip_norm).astype(np.float64)
        bit = (float(below) - 0.5) * training.count_scale
        stacked = np.concatenate([clipped, [bit]])  # (d + 1,)
        bound = math.hypot(training.clip_norm, training.count_scale / 2.0)
        expected_stacked = ArrayOutput("update and clip count", tuple(stacked.shape), norm_bound=bound)
        released = agent.release(stacked, training.noise_std, expected_stacked, count_coordinates=1)
        return released.astype(np.float32)
    if training.clip_norm is not None:
        update = clip_to_norm(update, training.clip_norm)
    expected = ArrayOutput("update", tuple(update.shape), norm_bound=training.clip_norm)
    return agent.release(update, training.noise_std, expected).astype(np.float32)
