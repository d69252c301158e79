"""L2-regularised logistic heads on a frozen public feature map (FedAUXfdp, ``fedaux-fdp.txt``).

Pure pieces shared by the agents (which fit and perturb their heads) and the server
(which evaluates the released heads):

* :class:`HeadFeatures` — h̃(x) = [b, r·clip₁((h₀(x) − m)/B)] with ‖h̃(x)‖ ≤ 1 for *every*
  x, by public constants only (the paper's eq. 4 divides by the max-norm over the
  private D, which makes the normalisation itself depend on private data; we clip to a
  constant fixed from public data instead);
* :func:`fit_multinomial_head` / :func:`fit_binary_head` — the exact minimiser of the
  paper's objective (2), J(β) = (1/n) Σ loss + λ/2·‖β‖², by L-BFGS (as the paper, which
  uses scikit-learn's L-BFGS), with λ passed as the objective defines it;
* :func:`class_head_sensitivity` / :func:`score_head_sensitivity` — the replace-one L2
  sensitivities of the two heads' optima: the class head's tight 2√2/(λ·n) (default) or
  the paper's 2√C/(λ·n) (Theorem 1), the scoring head's 2/(λ·(n + |D⁻|));
* :class:`HeadRequest` / :class:`ReleasedHeads` — what the server asks of an agent and
  the (perturbed) heads the agent sends back; the request fixes each head's noise std,
  which both the agent (adding it) and the method (charging it) read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from fedvote.errors import ConfigError
from fedvote.models.config import CLASS_HEAD_BOUNDS
from fedvote.models.features import FeatureExtractor
from fedvote.models.threads import single_threaded_blas
from fedvote.privacy.calibrate import binary_logistic_sensitivity, multinomial_logistic_sensitivity

# Projected-gradient tolerance of L-BFGS: the sensitivity bound (Theorem 1) is about the
# exact optimum, so the solver is run far below anything that matters for accuracy.
SOLVER_GTOL = 1e-10
SOLVER_MAX_ITER = 5000


@dataclass(frozen=True, eq=False)
class HeadFeatures:
    """The public map x ↦ h̃(x) ∈ R^{d+1}, ‖h̃(x)‖₂ ≤ 1 for every x (the paper's assumption (3)).

    h̃(x) = [bias, r·clip₁((h₀(x) − center)/scale)] with r = √(1 − bias²), where
    clip₁(v) = v / max(1, ‖v‖). ``extractor`` (h₀), ``center`` (d,) and ``scale`` are
    fixed from public data only, so h̃ is a constant with respect to the private data and
    the norm bound holds for any record, including a replaced one.
    """

    extractor: FeatureExtractor
    center: np.ndarray
    scale: float
    bias: float = 0.5

    def __post_init__(self) -> None:
        if not self.scale > 0 or not math.isfinite(self.scale):
            raise ConfigError("feature_clip", f"must be a finite number > 0, got {self.scale}")
        if not 0.0 < self.bias < 1.0:
            raise ConfigError("bias", f"the bias coordinate must lie in (0, 1), got {self.bias}")

    @property
    def dim(self) -> int:
        """The dimension d + 1: the extractor's outputs and the constant bias coordinate."""
        return self.extractor.dim + 1

    @property
    def num_floats(self) -> int:
        """Numbers shipped to an agent: h₀, the centre, the scale and the bias."""
        return self.extractor.num_floats + self.center.shape[0] + 2

    def transform(self, x: np.ndarray) -> np.ndarray:
        """h̃(x) for examples ``x`` (n, *shape): (n, d + 1) float64, every row of norm ≤ 1."""
        return self.from_embedding(self.extractor.transform(x))

    def from_embedding(self, embedded: np.ndarray) -> np.ndarray:
        """h̃ from h₀(x) already computed, (n, d) → (n, d + 1)."""
        v = (np.asarray(embedded, dtype=np.float64) - self.center) / self.scale  # (n, d)
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        v /= np.maximum(1.0, norms)
        radius = math.sqrt(1.0 - self.bias**2)
        return np.hstack([np.full((v.shape[0], 1), self.bias), radius * v])


def public_head_features(
    extractor: FeatureExtractor,
    public_sample: np.ndarray,
    *,
    clip: float | None,
    bias: float = 0.5,
    quantile: float = 0.5,
) -> HeadFeatures:
    """:class:`HeadFeatures` whose centre and (when ``clip`` is None) scale come from public data.

    ``public_sample`` (P, *shape) is public (the pre-training split); the centre is its
    mean embedding and the default scale the ``quantile`` of the norms of its centred
    embeddings (0.5: the median, about half the records clipped, direction kept; 0: the
    smallest positive norm, every public embedding on the unit sphere). ``clip`` fixes the
    scale instead.
    """
    embedded = extractor.transform(public_sample).astype(np.float64)  # (P, d)
    center = embedded.mean(axis=0)
    if clip is None:
        norms = np.linalg.norm(embedded - center, axis=1)
        scale = float(np.quantile(norms, quantile))
        if not scale > 0 and np.any(norms > 0):  # embeddings at the centre have no direction
            scale = float(norms[norms > 0].min())
    else:
        scale = float(clip)
    return HeadFeatures(extractor=extractor, center=center, scale=scale, bias=bias)


def multinomial_objective(
    beta: np.ndarray, features: np.ndarray, labels: np.ndarray, regularization: float
) -> tuple[float, np.ndarray]:
    """J(β) of the paper's eq. (2) and its gradient; β (C, d), features (n, d), labels (n,).

    J(β) = (1/n) Σᵢ −log softmax(β h̃(xᵢ))_{yᵢ} + λ/2·‖β‖²,
    ∇J = (1/n) (P − Y)ᵀ X + λβ with P the softmax probabilities and Y one-hot.
    """
    n = features.shape[0]
    logits = features @ beta.T  # (n, C)
    log_norm = special.logsumexp(logits, axis=1)  # (n,)
    loss = float(np.mean(log_norm - logits[np.arange(n), labels]))
    probs = np.exp(logits - log_norm[:, None])  # (n, C)
    probs[np.arange(n), labels] -= 1.0
    gradient = probs.T @ features / n + regularization * beta  # (C, d)
    return loss + 0.5 * regularization * float(np.sum(beta * beta)), gradient


def binary_objective(
    beta: np.ndarray, features: np.ndarray, labels: np.ndarray, regularization: float
) -> tuple[float, np.ndarray]:
    """J(β) for one binary head, labels in {0, 1}: mean log-loss of σ(βᵀx) + λ/2·‖β‖², and ∇J."""
    signs = 2.0 * labels - 1.0  # (n,) in {−1, +1}
    margins = signs * (features @ beta)  # (n,)
    loss = float(np.mean(np.logaddexp(0.0, -margins)))
    weights = -signs * special.expit(-margins)  # d loss / d (βᵀx), (n,)
    gradient = features.T @ weights / features.shape[0] + regularization * beta  # (d,)
    return loss + 0.5 * regularization * float(beta @ beta), gradient


def _minimise(objective, start: np.ndarray, args: tuple) -> np.ndarray:  # type: ignore[no-untyped-def]
    shape = start.shape

    def flat(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, gradient = objective(x.reshape(shape), *args)
        return value, gradient.ravel()

    # Small dense products: BLAS threads only contend (60x slower on a busy 2-core machine).
    with single_threaded_blas():
        result = optimize.minimize(
            flat,
            start.ravel(),
            jac=True,
            method="L-BFGS-B",
            options={"gtol": SOLVER_GTOL, "ftol": 0.0, "maxiter": SOLVER_MAX_ITER, "maxcor": 30},
        )
    return np.asarray(result.x, dtype=np.float64).reshape(shape)


def _check_regularization(regularization: float) -> None:
    if not regularization > 0 or not math.isfinite(regularization):
        raise ConfigError("lambda_", f"λ must be a finite number > 0, got {regularization}")


def fit_multinomial_head(
    features: np.ndarray, labels: np.ndarray, *, num_classes: int, regularization: float
) -> np.ndarray:
    """argmin_β J(β) of eq. (2) over all ``num_classes`` classes, (C, d).

    Every class gets a row, present in ``labels`` or not: the head's shape must not depend
    on which classes an agent holds (that set is private). Unlike scikit-learn, which fits
    only the classes present, this keeps Theorem 1's C fixed at the number of classes.
    λ is the paper's λ (scikit-learn's ``C`` would be 1/(λ·n)).
    """
    _check_regularization(regularization)
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    start = np.zeros((num_classes, x.shape[1]))
    return _minimise(multinomial_objective, start, (x, y, regularization))


def fit_binary_head(features: np.ndarray, labels: np.ndarray, *, regularization: float) -> np.ndarray:
    """argmin_β of the binary logistic objective (mean log-loss + λ/2·‖β‖²), (d,); labels in {0, 1}."""
    _check_regularization(regularization)
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    return _minimise(binary_objective, np.zeros(x.shape[1]), (x, y, regularization))


def head_norm_bound(num_outputs: int, regularization: float) -> float:
    """‖β*‖₂ ≤ √(2·log K / λ) for the optimum of a K-way logistic objective (K = 2: binary).

    J(β*) ≤ J(0) = log K and the mean loss is ≥ 0, so λ/2·‖β*‖² ≤ log K. The bound depends
    on no data; it is the agent-level (zero-out) sensitivity of a released head.
    """
    _check_regularization(regularization)
    return math.sqrt(2.0 * math.log(num_outputs) / regularization)


# ‖∇_β ℓ(β; h̃, y)‖_F = ‖p − e_y‖₂·‖h̃‖₂ ≤ √2 for the multinomial log-loss (docs/privacy.md).
MULTINOMIAL_GRADIENT_BOUND = math.sqrt(2.0)


def tight_multinomial_sensitivity(regularization: float, num_records: int) -> float:
    """L2 sensitivity 2√2/(λ·n) of the C-class head, any C (replace-one, ‖h̃‖ ≤ 1).

    Chaudhuri et al. (2011)'s argument for J(β) = (1/n) Σ ℓ + λ/2·‖β‖², which is
    λ-strongly convex: two replace-one neighbours' optima satisfy
    ‖β* − β'*‖_F ≤ 2·G/(λ·n), G the largest per-record gradient norm. For the multinomial
    log-loss ∇_β ℓ = (p − e_y)·h̃ᵀ, ‖p − e_y‖² = (1 − p_y)² + Σ_{j≠y} p_j² ≤ 2(1 − p_y)² ≤ 2
    and ‖h̃‖ ≤ 1, so G = √2 — where Theorem 1 of ``fedaux-fdp.txt`` bounds each of the C
    rows by 1 separately (G = √C). Proof and brute-force test: ``docs/privacy.md``,
    ``tests/models/test_logistic_heads_sensitivity.py``.
    """
    _check_regularization(regularization)
    if not num_records > 0:
        raise ConfigError("num_records", f"must be > 0, got {num_records}")
    return 2.0 * MULTINOMIAL_GRADIENT_BOUND / (regularization * num_records)


def class_head_sensitivity(num_classes: int, regularization: float, num_records: int, bound: str) -> float:
    """Replace-one L2 sensitivity of the C-class head's optimum over ``num_records`` records.

    ``bound`` "tight": 2√2/(λ·n) (:func:`tight_multinomial_sensitivity`); "paper":
    2√C/(λ·n) (Theorem 1 of ``fedaux-fdp.txt``). Equal at C = 2; tight is √(C/2)× smaller.
    """
    if bound == "tight":
        return tight_multinomial_sensitivity(regularization, num_records)
    if bound == "paper":
        return multinomial_logistic_sensitivity(num_classes, regularization, num_records)
    raise ConfigError("head_sensitivity", f"must be one of {', '.join(CLASS_HEAD_BOUNDS)}, got {bound!r}")


def score_head_sensitivity(regularization: float, num_records: int) -> float:
    """Replace-one L2 sensitivity 2/(λ·(nᵢ + |D⁻|)) of the binary scoring head, ``num_records`` = nᵢ + |D⁻|.

    Chaudhuri et al. (2011), the remark after Theorem 1 of ``fedaux-fdp.txt``: the binary
    log-loss has ∇_β ℓ = (σ(βᵀh̃) − y)·h̃, of norm ≤ 1.
    """
    return binary_logistic_sensitivity(regularization, num_records)


def project_to_ball(beta: np.ndarray, radius: float) -> np.ndarray:
    """β scaled into the L2 ball of ``radius`` (a no-op at an exact optimum; 1-Lipschitz)."""
    norm = float(np.linalg.norm(beta))
    return beta if norm <= radius else beta * (radius / norm)


def fit_sgd_head(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int,
    epochs: int,
    seed: int,
    learning_rate: float = 1e-2,
    batch_size: int = 128,
) -> np.ndarray:
    """A linear softmax head (C, d) trained by Adam on cross-entropy, no regulariser (FedAUX+F).

    FedAUX's clients train their classification heads by local epochs (the paper: 40)
    rather than solving a regularised problem; the result has no sensitivity bound and is
    released without noise.
    """
    import torch

    generator = torch.Generator().manual_seed(int(seed))
    x = torch.as_tensor(np.asarray(features), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    weight = torch.zeros((num_classes, x.shape[1]), requires_grad=True)
    optimiser = torch.optim.Adam([weight], lr=learning_rate)
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], batch_size):
            rows = order[start : start + batch_size]
            loss = torch.nn.functional.cross_entropy(x[rows] @ weight.T, y[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return weight.detach().numpy().astype(np.float64)


CLASS_HEAD_KINDS: tuple[str, ...] = ("logistic", "sgd")


@dataclass(frozen=True)
class HeadRequest:
    """What the server asks each agent to fit and release (FedAUXfdp steps 2 and 3).

    Parameters
    ----------
    regularization : float
        λ of the paper's objective (2), for both heads.
    num_classes : int
        C: every class head has C rows, whatever classes the agent holds.
    negative_indices : np.ndarray or None
        Indices into the public pool of the negative data D⁻ of the scoring head; None:
        no scoring head is fitted (FedD+P, FedAVG+P).
    score_noise_multiplier : float or None
        σ/Δ of the scoring head's Gaussian noise; each agent computes its own Δ =
        2/(λ·(nᵢ + |D⁻|)) (:meth:`score_noise_std`). None: released without noise.
    class_head : {"logistic", "sgd"}
        ``logistic``: the exact regularised optimum (FedAUXfdp); ``sgd``: FedAUX+F's
        unregularised linear head trained for ``sgd_epochs`` (never noised).
    class_noise_multiplier : float or None
        σ/Δ of the class head's noise, Δ from ``class_bound`` (:meth:`class_noise_std`).
        None: no noise.
    sgd_epochs : int
        Epochs of the ``sgd`` class head.
    seed : int
        Seeds the ``sgd`` head's batch order (not privacy noise).
    class_bound : {"tight", "paper"}
        The class head's Δ: 2√2/(λ·nᵢ) (default) or Theorem 1's 2√C/(λ·nᵢ)
        (:func:`class_head_sensitivity`).

    """

    regularization: float
    num_classes: int
    negative_indices: np.ndarray | None
    score_noise_multiplier: float | None
    class_head: str = "logistic"
    class_noise_multiplier: float | None = None
    sgd_epochs: int = 40
    seed: int = 0
    class_bound: str = "tight"

    def __post_init__(self) -> None:
        _check_regularization(self.regularization)
        if self.class_head not in CLASS_HEAD_KINDS:
            choices = ", ".join(CLASS_HEAD_KINDS)
            raise ConfigError("class_head", f"must be one of {choices}, got {self.class_head!r}")
        if self.class_bound not in CLASS_HEAD_BOUNDS:
            choices = ", ".join(CLASS_HEAD_BOUNDS)
            raise ConfigError("head_sensitivity", f"must be one of {choices}, got {self.class_bound!r}")
        if self.class_head == "sgd" and self.class_noise_multiplier is not None:
            raise ConfigError("class_noise_multiplier", "an SGD-trained head has no sensitivity bound")
        for name in ("score_noise_multiplier", "class_noise_multiplier"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(name, f"must be > 0 (or None for no noise), got {value}")

    @property
    def num_negatives(self) -> int:
        """|D⁻|, the scoring head's public negatives (0: no scoring head)."""
        return 0 if self.negative_indices is None else int(self.negative_indices.shape[0])

    def class_sensitivity(self, num_records: int) -> float:
        """Δ of an agent's class head over its ``num_records`` = nᵢ records (``class_bound``)."""
        return class_head_sensitivity(self.num_classes, self.regularization, num_records, self.class_bound)

    def class_noise_std(self, num_records: int) -> float | None:
        """σᵢ = multiplier·Δᵢ of the class head's noise (None: released without noise).

        The one place both the agent (which adds it) and the method (which charges
        Gaussian(σᵢ/Δᵢ) to the ledger) read it from, so noise and event cannot disagree.
        """
        if self.class_noise_multiplier is None:
            return None
        return self.class_noise_multiplier * self.class_sensitivity(num_records)

    def score_sensitivity(self, num_records: int) -> float:
        """Δ of an agent's scoring head: 2/(λ·(nᵢ + |D⁻|)), ``num_records`` = nᵢ."""
        return score_head_sensitivity(self.regularization, num_records + self.num_negatives)

    def score_noise_std(self, num_records: int) -> float | None:
        """σᵢ = multiplier·Δᵢ of the scoring head's noise, ``num_records`` = nᵢ (None: no noise)."""
        if self.score_noise_multiplier is None:
            return None
        return self.score_noise_multiplier * self.score_sensitivity(num_records)


@dataclass(frozen=True, eq=False)
class ReleasedHeads:
    """One agent's release: its class head (C, d + 1), scoring head (d + 1,) or None, and nᵢ.

    ``num_records`` is public metadata (the papers treat |Dᵢ| as public): the server needs
    it to weight FedAVG+P's average and to state each head's sensitivity.
    """

    class_head: np.ndarray
    score_head: np.ndarray | None
    num_records: int
