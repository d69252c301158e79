"""Agent-side local training for the gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD).

A global model travels as one flat float32 vector θ (d,) — the order of
``model.parameters()`` — so that communication is counted in floats and the server never
handles anything but vectors. An agent loads θ into a model of the agreed architecture,
trains it on its own records and sends back its update Δ = θ' − θ, possibly

* clipped to L2 norm S and noised with N(0, noise_std²) (DP-FedAvg, Algorithm 6 of the
  voting paper's appendix: :func:`clip_to_norm`), or
* produced by DP-SGD (Abadi et al. 2016) through Opacus: Poisson batches, per-sample
  clipping to C, Gaussian noise z·C on every step (DP-FedSGD, :func:`dp_sgd_steps`).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.zoo import MODEL_NAMES


@dataclass(frozen=True)
class DpSgdSpec:
    """DP-SGD settings an agent applies to its own records (one Opacus run per round).

    Parameters
    ----------
    sampling_rate : float
        q_b: each record joins each step's batch independently with this probability
        (Poisson sampling); the same for every agent, so that every agent's accounting is
        the same (an agent of n_i records has batches of q_b·n_i records on average).
    noise_multiplier : float
        z: every step's sum of clipped per-sample gradients gets N(0, z²C²) per coordinate.
    max_grad_norm : float
        C: each per-sample gradient is clipped to this L2 norm.

    """

    sampling_rate: float
    noise_multiplier: float
    max_grad_norm: float

    def __post_init__(self) -> None:
        if not 0.0 < self.sampling_rate <= 1.0:
            raise ConfigError("batch_sampling_rate", f"must lie in (0, 1], got {self.sampling_rate}")
        if not self.noise_multiplier >= 0:
            raise ConfigError("sigma", f"the noise multiplier must be >= 0, got {self.noise_multiplier}")
        if not self.max_grad_norm > 0:
            raise ConfigError("per_sample_clip", f"must be > 0, got {self.max_grad_norm}")


@dataclass(frozen=True)
class LocalTraining:
    """What the server asks of each sampled agent in one round of a gradient-based method.

    Parameters
    ----------
    model : str
        Architecture name (:data:`fedvote.models.zoo.MODEL_NAMES`); θ is its flat parameters.
    steps : int
        E: local SGD iterations (one mini-batch each).
    learning_rate : float
        Local step size for this round (the server applies the decay across rounds).
    batch_size : int
        Mini-batch size of plain local SGD (ignored when ``dp_sgd`` is set).
    round_index : int
        The round t; seeds the agent's mini-batch order together with its training seed.
    clip_norm : float or None
        S: the whole update Δ is scaled to norm ≤ S before it leaves the agent (DP-FedAvg).
    noise_std : float
        Std of the Gaussian the agent adds to every coordinate of its clipped update
        (Algorithm 6: σS/√m_t); 0 for none.
    dp_sgd : DpSgdSpec or None
        Train by DP-SGD (Opacus) instead of plain SGD (DP-FedSGD).
    input_shift : tuple of float or None
        A public constant (in,) — the public pool's mean input — that the agent subtracts
        from its flattened records before training (before any clipping); it travels with
        θ and the released model applies it too
        (:class:`~fedvote.models.shifted_input.ShiftedInput`). None: raw records.
    dann_scale : float or None
        FedAvg+DA (``--local-da dann``): θ is a :class:`~fedvote.models.dann.DannNet` (the
        classifier and its domain classifier) and the local steps minimise the DANN loss
        against the public pool with this round's gradient-reversal scale λ. None: plain.
    min_responders : int or None
        t of DP-FedAvg's distributed noise (``--min-responders``): the secure sum of the
        round's releases then unmasks only with at least max(t, ⌊N/2⌋ + 1) agents. None: ⌊N/2⌋ + 1.

    """

    model: str
    steps: int
    learning_rate: float
    batch_size: int = 32
    round_index: int = 0
    clip_norm: float | None = None
    noise_std: float = 0.0
    dp_sgd: DpSgdSpec | None = None
    input_shift: tuple[float, ...] | None = None
    dann_scale: float | None = None
    min_responders: int | None = None

    def __post_init__(self) -> None:
        if self.dann_scale is not None and not (self.dann_scale >= 0 and math.isfinite(self.dann_scale)):
            raise ConfigError("local_da", f"the reversal scale must be finite, >= 0, got {self.dann_scale}")
        if self.dann_scale is not None and self.dp_sgd is not None:
            raise ConfigError("local_da", "DANN local updates are plain SGD; DP-SGD local training has none")
        if self.model not in MODEL_NAMES:
            raise ConfigError("model", f"unknown model {self.model!r}; choose from {', '.join(MODEL_NAMES)}")
        if self.steps < 1:
            raise ConfigError("local_steps", f"must be at least 1, got {self.steps}")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", f"must be > 0, got {self.learning_rate}")
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be at least 1, got {self.batch_size}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError("clip_norm", f"must be > 0, got {self.clip_norm}")
        if not self.noise_std >= 0:
            raise ConfigError("noise_std", f"must be >= 0, got {self.noise_std}")
        if self.noise_std > 0 and self.clip_norm is None:
            raise ConfigError("noise_std", "noise on an update needs a clip norm to calibrate against")
        if self.input_shift is not None and not all(math.isfinite(v) for v in self.input_shift):
            raise ConfigError("input_shift", "must be finite")

    @property
    def shift_floats(self) -> int:
        """Floats the input shift adds to what goes down to an agent (0 without one)."""
        return 0 if self.input_shift is None else len(self.input_shift)


@dataclass(frozen=True, eq=False)
class LocalUpdates:
    """What the sampled agents of one round sent: ``updates`` (m, d) and ``records`` (m,).

    Row j of ``updates`` is agent ``agent_ids[j]``'s update (already clipped and noised
    when the round asked for it); ``records`` are their record counts n_i (public metadata,
    used for FedAvg's data-size weighting).
    """

    agent_ids: np.ndarray
    updates: np.ndarray
    records: np.ndarray

def flat_parameters(model: nn.Module) -> np.ndarray:
    """θ: the model's parameters concatenated in ``parameters()`` order, (d,) float32."""
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu().numpy().copy()


def load_flat_parameters(model: nn.Module, flat: np.ndarray) -> nn.Module:
    """Overwrite ``model``'s parameters with θ (d,); returns the model."""
    vector = torch.tensor(np.asarray(flat, dtype=np.float32))  # a copy: never alias the caller's array
    total = sum(p.numel() for p in model.parameters())
    if vector.shape != (total,):
        raise ValueError(f"expected a flat parameter vector of {total} floats, got {tuple(vector.shape)}")
    torch.nn.utils.vector_to_parameters(vector, model.parameters())
    return model


def clip_to_norm(update: np.ndarray, clip_norm: float) -> np.ndarray:
    """Δ / max(1, ‖Δ‖₂ / S): the update scaled into the L2 ball of radius S (a new array)."""
    update = np.asarray(update)
    norm = float(np.linalg.norm(update.astype(np.float64)))
    if norm <= clip_norm:
        return update.copy()
    # Scale in float64 and shrink by one ulp-ish factor so the float32 result stays ≤ S.
    scaled = update.astype(np.float64) * (clip_norm / norm) * (1.0 - 1e-6)
    return scaled.astype(update.dtype)


def minibatch_rows(n: int, *, steps: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """The rows of each of ``steps`` mini-batches of min(``batch_size``, n) of n records.

    Shuffled passes over the data (``torch.randperm`` from ``generator``), reshuffled when a
    pass has fewer rows left than a batch. :func:`sgd_steps` trains on these; a transport that
    trains many agents at once draws each agent's rows here from that agent's generator, so
    both see the same batches. ``n`` = 0: no batches, nothing drawn.
    """
    if n == 0:
        return []
    batch = min(batch_size, n)
    order = torch.randperm(n, generator=generator)
    position = 0
    rows = []
    for _ in range(steps):
        if position + batch > n:
            order = torch.randperm(n, generator=generator)
            position = 0
        rows.append(order[position : position + batch])
        position += batch
    return rows


def sgd_steps(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    *,
    steps: int,
    learning_rate: float,
    batch_size: int,
    generator: torch.Generator,
    loss_fn: nn.Module | None = None,
) -> nn.Module:
    """``steps`` iterations of plain mini-batch SGD, in place; cross-entropy unless ``loss_fn``.

    Mini-batches of ``batch_size`` (at most n) walk through shuffled passes over the data,
    reshuffled after each pass (:func:`minibatch_rows`). With no records the model is left
    as it is. ``labels`` are class indices for cross-entropy, else ``loss_fn``'s float targets.
    """
    n = int(labels.shape[0])
    if n == 0:
        return model.eval()
    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.int64 if loss_fn is None else torch.float32)
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    loss_fn = nn.CrossEntropyLoss() if loss_fn is None else loss_fn
    model.train()
    for rows in minibatch_rows(n, steps=steps, batch_size=batch_size, generator=generator):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x[rows]), y[rows]).backward()
        optimizer.step()
    return model.eval()


@dataclass(frozen=True, eq=False)
class DpSgdDraws:
    """The randomness of one agent's :func:`dp_sgd_steps`, drawn without its records.

    ``batches``: each step's Poisson batch, local row indices (ascending); ``noise`` (steps, d):
    each step's N(0, z²C²) on the clipped sum, flat in ``parameters()`` order (zeros when z = 0:
    nothing drawn).
    """

    batches: tuple[torch.Tensor, ...]
    noise: torch.Tensor


def dp_sgd_draws(
    n: int,
    *,
    steps: int,
    spec: DpSgdSpec,
    parameter_shapes: Sequence[tuple[int, ...]],
    generator: torch.Generator,
) -> DpSgdDraws:
    """What :func:`dp_sgd_steps` draws from ``generator`` for n records, in the order it draws it.

    Opacus's own code draws it: a ``DPDataLoader`` over the n row indices (each step's batch
    keys, and the seed torch's ``DataLoader`` draws whenever an iteration over it begins),
    then after every batch ``DPOptimizer``'s noise, one ``_generate_noise`` per parameter of
    ``parameter_shapes``. The draws depend on n, the steps and q, z, C only — never on the
    records — so a transport that trains many agents at once (DP-FedSGD's batched clients)
    takes them here from each agent's generator and gets the loop's batches and noise.
    ``n`` = 0: nothing drawn (:func:`dp_sgd_steps` returns at once).
    """
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers.optimizer import _generate_noise

    d = sum(math.prod(shape) for shape in parameter_shapes)
    if n == 0:
        return DpSgdDraws(batches=(), noise=torch.zeros(0, d))
    std = spec.noise_multiplier * spec.max_grad_norm
    references = [torch.zeros(shape) for shape in parameter_shapes]
    loader = DPDataLoader(
        torch.utils.data.TensorDataset(torch.arange(n)), sample_rate=spec.sampling_rate, generator=generator
    )
    batches: list[torch.Tensor] = []
    noise = torch.zeros(steps, d)  # (steps, d)
    opacus_log = logging.getLogger("opacus.data_loader")
    level = opacus_log.level
    opacus_log.setLevel(logging.ERROR)  # empty Poisson batches are part of the mechanism
    try:
        while len(batches) < steps:  # dp_sgd_steps's loop, one batch and one noise draw a step
            for (rows,) in loader:
                if std > 0:
                    noise[len(batches)] = torch.cat(
                        [_generate_noise(std, ref, generator).reshape(-1) for ref in references]
                    )
                batches.append(rows.reshape(-1).to(torch.int64))
                if len(batches) == steps:
                    break
    finally:
        opacus_log.setLevel(level)
    return DpSgdDraws(batches=tuple(batches), noise=noise)


def dp_sgd_steps(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    *,
    steps: int,
    learning_rate: float,
    spec: DpSgdSpec,
    generator: torch.Generator,
) -> nn.Module:
    """``steps`` iterations of DP-SGD through Opacus, in place; returns the plain model.

    Each step: a Poisson batch (every record independently with probability
    q = ``spec.sampling_rate``, Opacus's ``DPDataLoader``), per-sample gradients (Opacus's
    ``GradSampleModule``), each clipped to norm C, summed, plus N(0, z²C²) per coordinate
    (Opacus's ``DPOptimizer``), and the step θ ← θ − η·(that sum)/(q·n). The loss is
    summed (not averaged) so that an empty Poisson batch is a well-defined step that
    adds noise only. ``generator`` drives both the batch sampling and the noise.
    """
    from opacus import GradSampleModule
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers import DPOptimizer

    n = int(labels.shape[0])
    if n == 0:
        return model.eval()
    rate = spec.sampling_rate
    dataset = torch.utils.data.TensorDataset(
        torch.as_tensor(features, dtype=torch.float32), torch.as_tensor(labels, dtype=torch.int64)
    )
    loader = DPDataLoader(dataset, sample_rate=rate, generator=generator)
    wrapped = GradSampleModule(model, loss_reduction="sum")
    expected = rate * n  # the expected batch size q·n; a public constant, not the drawn size
    optimizer = DPOptimizer(
        torch.optim.SGD(wrapped.parameters(), lr=learning_rate / expected),
        noise_multiplier=spec.noise_multiplier,
        max_grad_norm=spec.max_grad_norm,
        expected_batch_size=None,
        loss_reduction="sum",
        generator=generator,
    )
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    wrapped.train()
    done = 0
    # Empty Poisson batches are part of the mechanism (a step of noise only): silence
    # Opacus's note about them, and torch's about inputs that need no gradient.
    opacus_log = logging.getLogger("opacus.data_loader")
    level = opacus_log.level
    opacus_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            while done < steps:
                for x, y in loader:
                    optimizer.zero_grad(set_to_none=True)
                    loss_fn(wrapped(x), y).backward()
                    optimizer.step()
                    done += 1
                    if done == steps:
                        break
    finally:
        opacus_log.setLevel(level)
    wrapped.zero_grad(set_to_none=True)
    return wrapped.to_standard_module().eval()
