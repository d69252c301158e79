"""Semi-supervised training of the student: FixMatch and VAT on the public pool.

The student sees the released pseudo-labels of the answered queries and the rest of the
public pool without labels. Both are public, so whatever the student does with them is
post-processing and costs no privacy. Two consistency methods:

* **FixMatch** (Sohn et al. 2020, Algorithm 1): an unlabelled image's weakly augmented
  view, when predicted with softmax ≥ τ, labels its strongly augmented view
  (``ℓ_u = 1[max q ≥ τ] · H(argmax q, p(y | strong(u)))``). Images only.
* **VAT** (Miyato et al. 2018, eq. 12-13): the prediction must not move under the
  adversarial perturbation of norm ε found by one power iteration
  (``KL(p(y | x) ‖ p(y | x + r_adv))``). Works on any input. Their "VAT+EntMin" variant
  is not used: on digits' 170-point pool entropy minimisation collapsed the student to
  one class (0.10 against 0.88 without it).

Both optimise ``ℓ_s + λ_u ℓ_u`` with Adam (FixMatch at its own step size,
:attr:`ConsistencySettings.fixmatch_learning_rate`) on mini-batches of B labelled and μ·B
unlabelled points, a cosine-decayed step size, and return an exponential moving average
of the weights (the usual evaluation model of both papers).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from fedvote.models.augment import is_image_batch, mirror_closed_pool, strong_augment, weak_augment
from fedvote.models.config import SEMI_SUPERVISED_METHODS
from fedvote.models.precision import resolve_precision, training_arithmetic
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress


@dataclass(frozen=True)
class ConsistencySettings:
    """The knobs both papers fix; their defaults are theirs unless said.

    Parameters
    ----------
    unlabeled_ratio : int
        μ: unlabelled points per labelled point in a step (FixMatch: 7).
    unlabeled_weight : float
        λ_u (both papers: 1).
    threshold : float
        FixMatch's τ (0.95).
    vat_radius : float
        VAT's ε as a fraction of the pool's root-mean-square input norm (scale-free, so
        the same value suits pixels in [0, 1] and standardised features).
    ema_decay : float
        Decay of the weights' moving average that is returned.
    fixmatch_learning_rate : float
        Adam's step size for FixMatch, in place of the student config's (their paper's SGD
        step 0.03 has no Adam counterpart). Measured on the MNIST non-IID federation's
        released labels (seed 0, same labels, 3,760 steps): 0.001, 0.003, 0.01 gave test
        accuracy 0.940, 0.956, 0.944. VAT keeps the config's.
    max_steps : int
        At most this many steps in all, whatever the epochs: an epoch grows with the pool,
        and 40 epochs over USPS's 7,291-point pool (9,760 steps) took 16 minutes on 2
        cores. 4,000 leaves MNIST's 3,000-point pool at its 40 epochs (3,760 steps).
    relabel_rounds : int
        FixMatch only: rounds of self-training after the first student (:func:`relabel_pool`):
        the pool points it predicts with softmax ≥ ``relabel_confidence`` join the labelled
        set and a fresh student is trained by FixMatch again (docs/defaults.md: the voting
        paper's MNIST command went from 0.962 to 0.975 with one round).
    relabel_confidence : float
        Softmax a pool point's prediction needs to become a label.
    relabel_cnn_widths : tuple of int
        Channels per block of a self-training round's fresh student when it is a CNN: wider
        than the first (Xie et al. 2020: the noisy student is equal to or larger than its
        teacher). Measured on label sets drawn from the MNIST federation's clean votes as the
        mechanism draws them (``experiments/student_width.py``; docs/defaults.md).
    relabeller_step_fraction : float
        The first student, when a self-training round follows, only picks the pool points
        that round labels: it trains for this fraction of the steps the round's student
        trains for. On the MNIST federation's drawn label sets, half the steps gave the
        final student 0.9793 mean accuracy against 0.9748 with all of them, in 144 s against 186 s
        (``experiments/relabeller_steps.py``; docs/defaults.md).
    flip : bool or None
        Images only: whether every weak and strong view (and the labelled points' weak views)
        is also mirrored left-right with probability 1/2. None: decided from the public pool
        by :func:`~fedvote.models.augment.mirror_closed_pool` (flips for clothing, none for
        digits). False (default): on the voting paper's Fashion-MNIST command the pool's rule
        (flips) scored 0.700, 0.723, 0.738 on seeds 0-2 against 0.705, 0.733, 0.751 without
        (docs/defaults.md, Fashion-MNIST), so no student flips unless asked.

    """

    unlabeled_ratio: int = 7
    unlabeled_weight: float = 1.0
    threshold: float = 0.95
    vat_radius: float = 0.25
    ema_decay: float = 0.99
    fixmatch_learning_rate: float = 0.003
    max_steps: int = 4000
    relabel_rounds: int = 1
    relabel_confidence: float = 0.99
    relabel_cnn_widths: tuple[int, int] = (24, 48)
    relabeller_step_fraction: float = 0.5
    flip: bool | None = False

    def resolved(self, unlabeled: np.ndarray) -> ConsistencySettings:
        """These settings with ``flip`` decided from the pool ``unlabeled`` when it is None."""
        if self.flip is not None:
            return self
        return dataclasses.replace(self, flip=mirror_closed_pool(unlabeled))

    def __post_init__(self) -> None:
        if not 0.0 < self.relabeller_step_fraction <= 1.0:
            fraction = self.relabeller_step_fraction
            raise ValueError(f"relabeller_step_fraction must be in (0, 1], got {fraction}")


class _EndlessBatches:
    """Batches of ``size`` indices from an endless stream of shuffled passes over range(n)."""

    def __init__(self, n: int, size: int, generator: torch.Generator) -> None:
        self.n, self.size, self.generator = n, size, generator
        self.order = torch.randperm(n, generator=generator)
        self.at = 0

    def next(self) -> torch.Tensor:
        """The next ``size`` indices (a pass ending mid-batch continues into a fresh shuffle)."""
        pieces: list[torch.Tensor] = []
        needed = self.size
        while needed:
            piece = self.order[self.at : self.at + needed]
            pieces.append(piece)
            needed -= piece.shape[0]
            self.at += piece.shape[0]
            if self.at >= self.n:
                self.order, self.at = torch.randperm(self.n, generator=self.generator), 0
        return torch.cat(pieces)


def _vat_perturbation(
    model: nn.Module, x: torch.Tensor, logits: torch.Tensor, radius: float, generator: torch.Generator
) -> torch.Tensor:
    """r_adv (eq. 13): one power iteration from a random direction, scaled to ``radius`` per example."""

    def unit(v: torch.Tensor) -> torch.Tensor:
        flat = v.reshape(v.shape[0], -1)
        return (flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)).reshape(v.shape)

    probe = (1e-6 * unit(torch.randn(x.shape, generator=generator).to(x.device))).requires_grad_(True)
    target = functional.softmax(logits.detach(), dim=1)
    divergence = functional.kl_div(
        functional.log_softmax(model(x + probe).float(), dim=1), target, reduction="batchmean"
    )
    (gradient,) = torch.autograd.grad(divergence, probe)
    return radius * unit(gradient.detach())


@dataclass(frozen=True)
class RelabelledPool:
    """The labelled and unlabelled sets of a self-training round, and how many points moved."""

    features: np.ndarray  # (L + k, *shape)
    labels: np.ndarray  # (L + k,)
    unlabeled: np.ndarray  # (U - k, *shape), or all U points when too few would remain
    added: int


def relabel_pool(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    unlabeled: np.ndarray,
    *,
    confidence: float,
    min_unlabeled: int,
) -> RelabelledPool:
    """Self-training (Xie et al. 2020): the pool points ``model`` is sure of become labelled.

    A point joins the labelled set with the model's class when its softmax is at least
    ``confidence``; the released labels of the queries are kept as they are. The others
    stay unlabelled, unless fewer than ``min_unlabeled`` would (one unlabelled batch): then
    the whole pool stays the unlabelled set. Public points and released labels only.
    """
    model.eval()
    device = next((parameter.device for parameter in model.parameters()), torch.device("cpu"))
    pool = torch.as_tensor(unlabeled, dtype=torch.float32, device=device)  # (U, *shape)
    with torch.no_grad():
        probs = torch.cat([functional.softmax(model(part), dim=1) for part in pool.split(1024)])  # (U, C)
    best, guessed = probs.cpu().max(dim=1)
    keep = (best >= confidence).numpy()
    rest = unlabeled[~keep] if int((~keep).sum()) >= min_unlabeled else unlabeled
    return RelabelledPool(
        features=np.concatenate([features, unlabeled[keep]]),
        labels=np.concatenate([labels, guessed.numpy()[keep].astype(labels.dtype)]),
        unlabeled=rest,
        added=int(keep.sum()),
    )


def fixmatch_losses(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    pool: torch.Tensor,
    *,
    threshold: float,
    weak: Callable[[torch.Tensor], torch.Tensor],
    strong: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch's ℓ_s on the labelled ``inputs`` (B, ...) and ℓ_u on the ``pool`` batch (μB, ...).

    ℓ_u = (1/μB) Σ 1[max q ≥ τ] H(argmax q, p(y | strong(u))), q = p(y | weak(u)) (Sohn et
    al. 2020, eq. 4). The weak view only picks targets (no gradient flows through it) and a
    point below τ adds zero: so the weak views run without autograd and only the confident
    points' strong views are drawn and trained on, the same loss for a third less work.
    (The students have no batch norm, whose statistics would see the batches apart.)
    Logits are taken to float32 before the losses, whatever the arithmetic of the model.
    """
    with torch.no_grad():
        weak_logits = model(weak(pool)).float()  # (μB, C)
    confidence, guessed = functional.softmax(weak_logits, dim=1).max(dim=1)  # (μB,)
    confident = confidence >= threshold  # (μB,)
    logits = model(torch.cat([inputs, strong(pool[confident])])).float()  # (B + k, C), k ≤ μB
    supervised = functional.cross_entropy(logits[: inputs.shape[0]], targets)
    unsupervised = functional.cross_entropy(
        logits[inputs.shape[0] :], guessed[confident], reduction="sum"
    ) / pool.shape[0]
    return supervised, unsupervised


def train_consistency(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    unlabeled: np.ndarray,
    config: TrainingConfig,
    generator: torch.Generator,
    *,
    method: str,
    settings: ConsistencySettings = ConsistencySettings(),
    step_fraction: float = 1.0,
    device: torch.device | str = "cpu",
    progress: Progress = NO_PROGRESS,
    description: str = "training the student",
) -> nn.Module:
    """Train ``model`` by FixMatch or VAT on labelled (L, *shape) and unlabelled (U, *shape) points.

    ``config.epochs`` counts passes of B-sized steps over the pool (⌈(L + U) / B⌉ steps each),
    up to ``settings.max_steps`` steps in all, of which ``step_fraction`` are run (at least one;
    the step size decays over those); returns the weights' moving average, in eval mode, on
    ``device``; ``progress`` shows ``description`` with one tick a step (an ETA on slow students).
    Each step's forward runs at ``config.precision`` (:mod:`fedvote.models.precision`);
    the weights, the optimiser and the average stay float32. On a GPU (``device``) only the
    arithmetic moves: every random draw (batches, augmentations, VAT's probe) is made on the CPU
    from ``generator``, as on the CPU.
    """
    if method not in SEMI_SUPERVISED_METHODS:
        raise ValueError(f"unknown semi-supervised method {method!r}")
    device = torch.device(device)
    model.to(device)
    x_labeled = torch.as_tensor(features, dtype=torch.float32, device=device)  # (L, *shape)
    y_labeled = torch.as_tensor(labels, dtype=torch.int64, device=device)  # (L,)
    x_unlabeled = torch.as_tensor(unlabeled, dtype=torch.float32, device=device)  # (U, *shape)
    images = is_image_batch(x_labeled)
    if method == "fixmatch" and not images:
        raise ValueError("fixmatch needs image inputs (B, C, H, W) of at least 8x8")
    flip = bool(images and settings.resolved(unlabeled).flip)
    batch = min(config.batch_size, x_labeled.shape[0])
    unlabeled_batch = settings.unlabeled_ratio * batch
    # An epoch: as many steps as B-sized batches cover the whole pool (L + U points).
    steps_per_epoch = math.ceil((x_labeled.shape[0] + x_unlabeled.shape[0]) / config.batch_size)
    full_steps = min(config.planned_epochs * steps_per_epoch, settings.max_steps)
    total_steps = max(1, round(step_fraction * full_steps))
    pool_norm = float(x_unlabeled.reshape(x_unlabeled.shape[0], -1).pow(2).sum(1).mean().sqrt())
    radius = settings.vat_radius * pool_norm

    arithmetic = resolve_precision(config.precision, tuple(x_labeled.shape[1:]))
    learning_rate = settings.fixmatch_learning_rate if method == "fixmatch" else config.learning_rate
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total_steps) / total_steps))
    )
    average = copy.deepcopy(model)
    for parameter in average.parameters():
        parameter.requires_grad_(False)
    kept: list[torch.Tensor] = list(average.parameters())
    live: list[torch.Tensor] = list(model.parameters())
    kept_statistics, live_statistics = list(average.buffers()), list(model.buffers())
    labeled_batches = _EndlessBatches(x_labeled.shape[0], batch, generator)
    unlabeled_batches = _EndlessBatches(x_unlabeled.shape[0], unlabeled_batch, generator)
    model.train()
    with progress.step(description, total=total_steps) as bar:
        for step in range(total_steps):
            rows = labeled_batches.next().to(device)
            inputs = weak_augment(x_labeled[rows], generator, flip=flip) if images else x_labeled[rows]
            pool = x_unlabeled[unlabeled_batches.next().to(device)]  # (μB, *shape)
            with training_arithmetic(arithmetic, device.type):
                if method == "fixmatch":
                    supervised, unsupervised = fixmatch_losses(
                        model,
                        inputs,
                        y_labeled[rows],
                        pool,
                        threshold=settings.threshold,
                        weak=lambda x: weak_augment(x, generator, flip=flip),
                        strong=lambda x: strong_augment(x, generator, flip=flip),
                    )
                else:
                    if images:
                        pool = weak_augment(pool, generator, flip=flip)
                    logits = model(torch.cat([inputs, pool])).float()  # (B + μB, C)
                    supervised = functional.cross_entropy(logits[: rows.shape[0]], y_labeled[rows])
                    pool_logits = logits[rows.shape[0] :]
                    r_adv = _vat_perturbation(model, pool, pool_logits, radius, generator)
                    target = functional.softmax(pool_logits.detach(), dim=1)
                    perturbed = functional.log_softmax(model(pool + r_adv).float(), dim=1)
                    unsupervised = functional.kl_div(perturbed, target, reduction="batchmean")
            optimizer.zero_grad(set_to_none=True)
            (supervised + settings.unlabeled_weight * unsupervised).backward()
            optimizer.step()
            schedule.step()
            with torch.no_grad():
                # Warm-up (as TensorFlow's ExponentialMovingAverage with num_updates): early
                # steps do not drag the average back towards the random initial weights.
                decay = min(settings.ema_decay, (1 + step) / (10 + step))
                torch._foreach_lerp_(kept, live, 1.0 - decay)
                for statistic, live_statistic in zip(kept_statistics, live_statistics, strict=True):
                    statistic.copy_(live_statistic)  # batch-norm statistics: the live ones
            bar.advance()
    average.eval()
    return average
