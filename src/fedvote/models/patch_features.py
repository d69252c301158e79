"""Single-layer patch features learned on the public pool (Coates, Lee & Ng 2011; Coates & Ng 2012).

One job: fit a fixed feature map φ for images (C, H, W) from the server's public, unlabelled
pool, and nothing else, so that φ is a constant with respect to every agent's records (what
Private-kNN-FL's Theorem 3 and the other "public features then private heads" analyses need).

The recipe is the one of A. Coates, H. Lee and A. Y. Ng, "An analysis of single-layer
networks in unsupervised feature learning" (AISTATS 2011), with the spherical k-means and
soft-threshold encoder of A. Coates and A. Y. Ng, "Learning feature representations with
k-means" (Neural Networks: Tricks of the Trade, 2012):

1. draw ``patches`` random p×p patches (all channels) from the pool images;
2. normalise each patch (subtract its mean, divide by √(var + ``norm_eps``)) and ZCA-whiten
   them (eigenvalues regularised by ``whitening_eps``);
3. learn a dictionary of ``filters`` unit-norm centroids by spherical k-means (a patch joins
   the centroid of largest |dot product|, each centroid is the normalised dot-weighted sum of
   its patches), ``kmeans_iterations`` passes;
4. encode every p×p window of an image (stride 1) by f = [max(0, d − α), max(0, −d − α)], d
   the window's whitened, normalised patch's dot products with the centroids (the polarity
   split doubles the maps);
5. average each map over a ``grid``×``grid`` partition of the image (quadrants by default):
   2·filters·grid² features.

Two public refinements, on by default (``mirror_symmetric``, ``square_root``):

6. **mirror symmetry**: half the dictionary is learned (on the patches and their left-right
   mirrors) and the other half is those centroids mirrored, so φ(mirror x) is φ(x) with each
   filter swapped for its mirror and the grid's columns reversed; averaging each pooled code with its
   mirror's gives a map with φ(mirror x) = φ(x) exactly, at no extra convolution:
   2·(filters/2)·grid² features. A photo and its mirror show the same class (the standard
   CIFAR-10 flip), so every model on φ gets the flip "augmentation" without a second record
   (the privacy unit stays one record);
7. **square root** of every pooled code (the power normalisation of pooled codes, F. Perronnin,
   J. Sánchez and T. Mensink, ECCV 2010), which tames the few codes that fire everywhere.

Measured on issue 43's CIFAR-10 federation (``experiments/cifar10_feature_map.py``): PATE-FL's
release read by its ridge student, 0.493 as published, 0.536 with both (seed 0, agent ε 4).

Steps 2–4 fold into one convolution: d = (conv(x, F) − m·ΣF) / s + b with F the centroids
mapped back through the whitening, m and s each window's mean and deviation, b = −μ·F for the
whitened patches' mean μ. :class:`PatchFeatures` is that map as a frozen ``torch.nn.Module``
holding only buffers, so it travels as its buffers (``FeatureExtractor.num_floats``).

Coates et al. report 77.9 % test accuracy on CIFAR-10 for a linear SVM on these features with
1,600 triangle-coded filters and all 50,000 labels. Deterministic given the pool and ``seed``
(every random draw comes from one seeded ``torch.Generator``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.allocator import retain_freed_memory

_ENCODE_BATCH = 256  # images per convolution when the pool's patches are drawn
# Bytes of window codes (b, K, H', W') float32 one encoding pass may hold (14 CIFAR-10 images,
# 19 of Fashion-MNIST at 400 filters). Small passes are both lean and fast: their buffers stay
# under glibc's mmap threshold, so with fedvote.models.allocator's setting every pass reuses the
# heap's pages instead of faulting in fresh ones. Measured on 4,000 random CIFAR-sized images,
# 2 cores: 16 MiB passes 2.6 s (0.04 s in the kernel), 512 MiB passes 7.8 s (6.7 s in the
# kernel), 2,000 images in one pass 7.4 s and 4.9 GB.
CODES_BYTES_PER_PASS = 16 * 2**20


@dataclass(frozen=True)
class PatchSettings:
    """How the dictionary is learned and images encoded (defaults: Coates & Ng's recipe, 400 filters)."""

    patch: int = 6
    filters: int = 400
    patches: int = 100_000
    kmeans_iterations: int = 10
    whitening_eps: float = 0.1
    norm_eps: float = 0.01
    alpha: float = 0.25
    grid: int = 2
    mirror_symmetric: bool = True
    square_root: bool = True

    def __post_init__(self) -> None:
        for name in ("patch", "filters", "patches", "kmeans_iterations", "grid"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
        for name in ("mirror_symmetric", "square_root"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be True or False, got {getattr(self, name)!r}")
        if self.mirror_symmetric and self.filters % 2:
            raise ConfigError(
                "filters", f"must be even with mirror_symmetric (half are mirrors), got {self.filters}"
            )
        for name in ("whitening_eps", "norm_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be > 0, got {getattr(self, name)!r}")
        if not self.alpha >= 0:
            raise ConfigError("alpha", f"must be >= 0, got {self.alpha!r}")

    def dim(self) -> int:
        """The number of features: two polarities × distinct filters × grid² (mirror pairs count once)."""
        distinct = self.filters // 2 if self.mirror_symmetric else self.filters
        return 2 * distinct * self.grid * self.grid


class PatchFeatures(nn.Module):
    """The fitted map φ: images (b, C, H, W) → features (b, dim); buffers only, frozen.

    ``kernels`` (K, C, p, p) are the centroids mapped back to pixel space through the
    whitening, ``kernel_sums`` (K,) their sums, ``offsets`` (K,) −μ·F; ``norm_eps``, ``alpha``,
    ``grid``, ``mirror_symmetric`` and ``square_root`` as in :class:`PatchSettings`. With
    ``mirror_symmetric`` the kernels' second half must be their first half mirrored (same
    offsets), as :func:`fit_patch_features` builds them.
    """

    kernels: torch.Tensor  # buffers, declared for type checkers
    kernel_sums: torch.Tensor
    offsets: torch.Tensor
    window: torch.Tensor

    def __init__(
        self,
        kernels: torch.Tensor,
        offsets: torch.Tensor,
        *,
        norm_eps: float,
        alpha: float,
        grid: int,
        mirror_symmetric: bool = False,
        square_root: bool = False,
    ) -> None:
        super().__init__()
        self.register_buffer("kernels", kernels.to(torch.float32).contiguous())  # (K, C, p, p)
        self.register_buffer("kernel_sums", self.kernels.sum(dim=(1, 2, 3)))  # (K,)
        self.register_buffer("offsets", offsets.to(torch.float32).contiguous())  # (K,)
        channels, patch = int(kernels.shape[1]), int(kernels.shape[2])
        self.register_buffer("window", torch.ones(1, channels, patch, patch))  # (1, C, p, p)
        self.norm_eps = float(norm_eps)
        self.alpha = float(alpha)
        self.grid = int(grid)
        self.mirror_symmetric = bool(mirror_symmetric)
        self.square_root = bool(square_root)
        self.requires_grad_(False)

    @property
    def dim(self) -> int:
        """Output features per image."""
        filters = int(self.kernels.shape[0])
        distinct = filters // 2 if self.mirror_symmetric else filters
        return 2 * distinct * self.grid * self.grid

    def images_per_pass(self, height: int, width: int) -> int:
        """Images of H×W one encoding pass takes: their codes fit :data:`CODES_BYTES_PER_PASS`."""
        patch = int(self.kernels.shape[2])
        codes_per_image = int(self.kernels.shape[0]) * (height - patch + 1) * (width - patch + 1)
        return max(1, CODES_BYTES_PER_PASS // (4 * codes_per_image))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """φ(x) for images ``x`` (b, C, H, W) float32: (b, dim), in passes of :meth:`images_per_pass`."""
        step = self.images_per_pass(int(x.shape[2]), int(x.shape[3]))
        if x.shape[0] <= step:
            return self._encode(x)
        retain_freed_memory()  # each pass's buffers come back from the heap, not fresh pages
        return torch.cat([self._encode(x[start : start + step]) for start in range(0, x.shape[0], step)])

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        """φ(x) for one pass of images ``x`` (b, C, H, W) float32: (b, dim).

        Written to pass over the (b, K, H', W') window codes as few times as it can (the
        encoding is bound by memory traffic on a CPU, not by the convolution): the
        normalisation in place, and each half of the polarity split pooled by one product
        with the (H'·W', grid²) averaging matrix, equal to ``adaptive_avg_pool2d``.
        """
        size = float(self.window.numel())  # values per patch, C·p²
        mean = F.conv2d(x, self.window) / size  # (b, 1, H', W')
        square = F.conv2d(x * x, self.window) / size
        variance = (square - mean * mean).clamp_(min=0.0) * (size / (size - 1.0))  # unbiased, as torch.var
        inverse_scale = torch.rsqrt(variance + self.norm_eps)  # (b, 1, H', W')
        dots = F.conv2d(x, self.kernels)  # (b, K, H', W')
        dots.sub_(mean * self.kernel_sums[None, :, None, None]).mul_(inverse_scale)
        dots.add_(self.offsets[None, :, None, None])
        batch, filters, rows, cols = dots.shape
        pooling = _pooling_matrix(rows, cols, self.grid).to(dots.dtype)  # (H'·W', grid²)
        dots = dots.reshape(batch, filters, rows * cols)
        positive = (dots - self.alpha).clamp_(min=0.0) @ pooling  # (b, K, grid²)
        negative = dots.neg_().sub_(self.alpha).clamp_(min=0.0) @ pooling
        codes = torch.stack([positive, negative], dim=1)  # (b, 2, K, grid²), cell = row·grid + column
        if self.mirror_symmetric:
            # Filter K/2 + k is filter k mirrored: on x its codes are filter k's on mirror(x) with
            # the grid's columns reversed. Averaging the two makes φ(mirror x) = φ(x).
            half = filters // 2
            cells = codes.reshape(batch, 2, filters, self.grid, self.grid)
            codes = 0.5 * (cells[:, :, :half] + cells[:, :, half:].flip(-1))  # (b, 2, K/2, grid, grid)
        if self.square_root:
            codes = codes.sqrt()  # pooled codes are >= 0
        return codes.reshape(batch, -1)  # (b, dim)


_STATE_SCALARS = {
    "norm_eps": float,
    "alpha": float,
    "grid": int,
    "mirror_symmetric": bool,
    "square_root": bool,
}


def patch_features_state(module: PatchFeatures) -> dict[str, np.ndarray]:
    """φ as plain arrays: its ``kernels`` (K, C, p, p), ``offsets`` (K,) and encoder settings (0-d).

    What a deployment ships to the agents (``fedvote deploy split``): numbers, no pickled code.
    """
    state = {"kernels": module.kernels.numpy().copy(), "offsets": module.offsets.numpy().copy()}
    for name, kind in _STATE_SCALARS.items():
        state[name] = np.asarray(kind(getattr(module, name)))
    return state


def patch_features_from_state(state: dict[str, np.ndarray]) -> PatchFeatures:
    """The :class:`PatchFeatures` :func:`patch_features_state` wrote; a malformed state is refused by name."""
    missing = sorted({"kernels", "offsets", *_STATE_SCALARS} - set(state))
    if missing:
        raise ConfigError("input_map", f"the patch features lack {', '.join(missing)}")
    kernels, offsets = np.asarray(state["kernels"]), np.asarray(state["offsets"])
    if kernels.ndim != 4 or kernels.shape[2] != kernels.shape[3] or offsets.shape != kernels.shape[:1]:
        raise ConfigError(
            "input_map", f"kernels {kernels.shape} and offsets {offsets.shape} are no (K, C, p, p) and (K,)"
        )
    scalars = {name: kind(np.asarray(state[name]).item()) for name, kind in _STATE_SCALARS.items()}
    if scalars["mirror_symmetric"] and kernels.shape[0] % 2:
        raise ConfigError(
            "input_map", f"mirror-symmetric patch features need an even filter count, got {kernels.shape[0]}"
        )
    kernel_tensor = torch.from_numpy(kernels.astype(np.float32))
    return PatchFeatures(kernel_tensor, torch.from_numpy(offsets.astype(np.float32)), **scalars)


def _pooling_matrix(rows: int, cols: int, grid: int) -> torch.Tensor:
    """(rows·cols, grid²) weights averaging each cell of ``adaptive_avg_pool2d``'s grid×grid partition."""

    def axis(size: int) -> torch.Tensor:
        weights = torch.zeros(size, grid)
        for cell in range(grid):
            start, stop = (cell * size) // grid, -((-(cell + 1) * size) // grid)
            weights[start:stop, cell] = 1.0 / (stop - start)
        return weights  # (size, grid)

    return torch.einsum("ai,bj->abij", axis(rows), axis(cols)).reshape(rows * cols, grid * grid)


def check_images(pool: np.ndarray, settings: PatchSettings) -> tuple[int, int, int]:
    """The pool's example shape (C, H, W), refused unless images at least one patch a side."""
    if pool.ndim != 4 or pool.shape[0] == 0:
        raise ConfigError(
            "public_features",
            f"patch features need a non-empty pool of images (P, C, H, W), got {pool.shape}",
        )
    channels, height, width = (int(s) for s in pool.shape[1:])
    if min(height, width) < settings.patch:
        raise ConfigError(
            "public_features",
            f"images of {height}x{width} are smaller than a {settings.patch}x{settings.patch} patch",
        )
    return channels, height, width


def fit_patch_features(
    public_features: np.ndarray, *, seed: int = 0, settings: PatchSettings = PatchSettings()
) -> PatchFeatures:
    """Learn φ on the public pool ``public_features`` (P, C, H, W) — the only data it sees.

    Never pass an agent's records: φ must be a constant with respect to them. Deterministic
    given the pool and ``seed``.
    """
    pool = torch.as_tensor(np.asarray(public_features), dtype=torch.float32)
    channels, height, width = check_images(pool.numpy(), settings)
    generator = torch.Generator().manual_seed(int(seed))
    patches = _sample_patches(pool, settings, generator)  # (n, C·p²)
    shape = (channels, settings.patch, settings.patch)
    if settings.mirror_symmetric:  # learn on both orientations: (2n, C·p²)
        patches = torch.cat([patches, _mirrored(patches, shape)])
    normalised = _normalise(patches, settings.norm_eps)
    mean = normalised.mean(dim=0)  # (C·p²,)
    centred = normalised - mean
    covariance = centred.T @ centred / max(centred.shape[0] - 1, 1)  # (C·p², C·p²)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance.double())
    whitening = (
        eigenvectors @ torch.diag(1.0 / torch.sqrt(eigenvalues + settings.whitening_eps)) @ eigenvectors.T
    )
    whitening = whitening.to(torch.float32)  # (C·p², C·p²), symmetric (ZCA)
    learned = settings  # the centroids k-means learns: half of them when the other half are mirrors
    if settings.mirror_symmetric:
        learned = dataclasses.replace(settings, filters=settings.filters // 2, mirror_symmetric=False)
    centroids = _spherical_kmeans(centred @ whitening, learned, generator)  # (K or K/2, C·p²)
    kernels = centroids @ whitening  # (·, C·p²): d = (x̂ − μ)·W·c = x̂·(W c) − μ·(W c)
    offsets = -(mean @ kernels.T)
    if settings.mirror_symmetric:  # the mirrored half, built exactly: (K, C·p²), (K,)
        kernels, offsets = torch.cat([kernels, _mirrored(kernels, shape)]), torch.cat([offsets, offsets])
    return PatchFeatures(
        kernels.reshape(settings.filters, *shape),
        offsets,
        norm_eps=settings.norm_eps,
        alpha=settings.alpha,
        grid=settings.grid,
        mirror_symmetric=settings.mirror_symmetric,
        square_root=settings.square_root,
    )


def _mirrored(flat: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """Rows (n, C·p²) of patches of ``shape`` (C, p, p), each mirrored left to right."""
    return flat.reshape(-1, *shape).flip(-1).reshape(flat.shape)


def _sample_patches(pool: torch.Tensor, settings: PatchSettings, generator: torch.Generator) -> torch.Tensor:
    """``settings.patches`` random p×p windows of the pool's images, flattened: (n, C·p²)."""
    count, _, height, width = pool.shape
    p = settings.patch
    rows, cols = height - p + 1, width - p + 1
    images = torch.randint(0, count, (settings.patches,), generator=generator)
    positions = torch.randint(0, rows * cols, (settings.patches,), generator=generator)
    out = torch.empty(settings.patches, pool.shape[1] * p * p)
    order = torch.argsort(images, stable=True)
    for start in range(0, count, _ENCODE_BATCH):
        chosen = order[(images[order] >= start) & (images[order] < start + _ENCODE_BATCH)]
        if chosen.numel() == 0:
            continue
        windows = F.unfold(pool[start : start + _ENCODE_BATCH], p)  # (b, C·p², rows·cols)
        out[chosen] = windows[images[chosen] - start, :, positions[chosen]]
    return out


def _normalise(patches: torch.Tensor, eps: float) -> torch.Tensor:
    """Each patch minus its mean, over √(its unbiased variance + eps) (brightness and contrast)."""
    centred = patches - patches.mean(dim=1, keepdim=True)
    return centred / torch.sqrt(patches.var(dim=1, keepdim=True) + eps)


def _spherical_kmeans(
    data: torch.Tensor, settings: PatchSettings, generator: torch.Generator
) -> torch.Tensor:
    """Unit-norm centroids (K, D) of ``data`` (n, D) by spherical k-means (Coates & Ng 2012, eq. 2-3)."""
    centroids = torch.randn(settings.filters, data.shape[1], generator=generator)
    centroids = centroids / centroids.norm(dim=1, keepdim=True)
    for _ in range(settings.kmeans_iterations):
        dots = data @ centroids.T  # (n, K)
        assigned = dots.abs().argmax(dim=1)  # (n,)
        weights = dots.gather(1, assigned[:, None])  # (n, 1)
        sums = torch.zeros_like(centroids).index_add_(0, assigned, data * weights)
        norms = sums.norm(dim=1, keepdim=True)
        centroids = torch.where(norms > 1e-8, sums / norms.clamp(min=1e-8), centroids)  # empty: kept
    return centroids
