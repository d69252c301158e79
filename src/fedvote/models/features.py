"""Public feature extractors φ: fitted on public data only, never on an agent's records.

Private-kNN-FL (Algorithm 2 of ``../shared/papers/voting-based-dpfl.txt``) measures
distances in the space of a *data-independent* feature extractor φ: with respect to
the private data φ must be a constant, otherwise the kNN vote's sensitivity analysis
(Theorem 3) does not hold. :func:`fit_feature_extractor` therefore takes nothing but
the server's public pool (``public_features``); the fitted :class:`FeatureExtractor`
is public and is shipped to the agents, which apply it to their own records and to
the pool.

Kinds
-----
``identity``     flatten each example.
``pca``          principal components of the public pool (scikit-learn ``PCA``).
``random``       a seeded Gaussian random projection (independent of any data).
``autoencoder``  the encoder of a small MLP autoencoder trained on the public pool only.
``contrastive``  the encoder of a small CNN trained by SimCLR (Chen, Kornblith, Norouzi,
                 Hinton 2020) on two augmentations of every public image, without labels
                 (:mod:`fedvote.models.contrastive`); images (C, H, W) of at least 8×8 only.
``patch``        single-layer patch features (Coates, Lee & Ng 2011): a k-means dictionary of
                 whitened 6×6 patches of the pool (200 learned, 200 their mirrors),
                 soft-threshold codes pooled over quadrants, averaged with their mirrors'
                 and square-rooted (:mod:`fedvote.models.patch_features`): the same for an
                 image and its mirror; images only, 1,600 outputs.
``module``       a user-supplied ``torch.nn.Module`` or a TorchScript file (e.g. a
                 pretrained backbone without its classifier layer).

The learned kinds (:data:`CACHED_KINDS`) can be kept on disk, keyed by a hash of the pool
and the settings (:mod:`fedvote.models.extractor_cache`): ``cache=True`` trains once per
public pool. What is cached is a function of the public pool alone, like φ itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.config import FEATURE_KINDS
from fedvote.models.contrastive import (
    ContrastiveConfig,
    build_encoder,
    is_image_shape,
    train_contrastive_encoder,
)
from fedvote.models.extractor_cache import default_cache_dir, extractor_key, load_or_train
from fedvote.models.patch_features import PatchFeatures, PatchSettings, fit_patch_features

# The kinds that are trained (seconds to a minute), so worth a disk cache; pca is fast.
CACHED_KINDS: tuple[str, ...] = ("autoencoder", "contrastive")
# The kinds that need image examples (C, H, W).
IMAGE_KINDS: tuple[str, ...] = ("contrastive", "patch")

_AUTOENCODER_BATCH = 128
_AUTOENCODER_LEARNING_RATE = 1e-3
_CONTRASTIVE = ContrastiveConfig()

_PATCHES_PER_IMAGE = 40  # the patch kind's dictionary draws at most this many windows per pool image

_TRANSFORM_BATCH = 4096  # examples per forward pass of a torch extractor


@dataclass(frozen=True, eq=False)
class FeatureExtractor:
    """A fitted, public feature map φ: examples (n, *shape) → features (n, d) float32.

    Built by :func:`fit_feature_extractor`. ``kind`` names how it was fitted,
    ``input_shape`` the example shape it expects, ``dim`` the output dimension d,
    ``normalize`` whether each output row is scaled to unit L2 norm, ``num_floats`` how
    many numbers the server sends an agent to ship φ (communication accounting).
    """

    kind: str
    input_shape: tuple[int, ...]
    dim: int
    normalize: bool
    num_floats: int
    _map: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)

    def transform(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """φ(x) for a batch of examples ``x`` (n, *input_shape): (n, dim) float32."""
        inputs = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        if inputs.ndim < 1 or math.prod(inputs.shape[1:]) != math.prod(self.input_shape):
            raise ConfigError(
                "x",
                f"examples of shape {tuple(inputs.shape[1:])} do not fit an extractor fitted on "
                f"{self.input_shape}",
            )
        inputs = inputs.reshape(inputs.shape[0], *self.input_shape)
        out = np.empty((inputs.shape[0], self.dim), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, inputs.shape[0], _TRANSFORM_BATCH):
                chunk = self._map(inputs[start : start + _TRANSFORM_BATCH]).reshape(-1, self.dim)  # (b, dim)
                if self.normalize:
                    chunk = chunk / chunk.norm(dim=1, keepdim=True).clamp(min=1e-12)
                out[start : start + chunk.shape[0]] = chunk.numpy()
        return out


def fit_feature_extractor(
    kind: str,
    public_features: np.ndarray,
    *,
    dim: int = 50,
    seed: int = 0,
    normalize: bool = False,
    module: nn.Module | str | Path | None = None,
    epochs: int = 30,
    cache: bool | str | Path = False,
) -> FeatureExtractor:
    """Fit φ of ``kind`` on the public pool ``public_features`` (P, *shape) — and nothing else.

    φ is fitted on public data only, so it is data-independent with respect to every
    agent's records: the privacy analyses of the methods that use it (Private-kNN-FL's
    Theorem 3, FedAUX's head sensitivities) hold with φ a constant.

    Parameters
    ----------
    kind : str
        One of :data:`FEATURE_KINDS`.
    public_features : np.ndarray
        The server's public (unlabelled) pool. The only data φ is fitted on; never pass
        an agent's records here.
    dim : int
        Output dimension for ``pca``, ``random``, ``autoencoder`` and ``contrastive`` (the
        size of SimCLR's representation h, before the projection head; ``pca`` keeps at most
        min(P, D) components, D the flattened input size). Ignored by ``identity``, ``patch``
        and ``module``, whose dimension is what they produce.
    seed : int
        Seeds the random projection, PCA's randomised solver, the autoencoder and the
        contrastive encoder (initialisation, batch order, augmentations).
    normalize : bool
        Scale every feature vector to unit L2 norm (cosine-like distances).
    module : torch.nn.Module or path or None
        For ``kind="module"``: the module itself, or a file to load — TorchScript
        (``torch.jit.save``) or, with suffix ``.pt2``, a ``torch.export`` program (exported
        with a dynamic batch dimension: φ is applied in batches of any size). It is
        applied in eval mode to examples of shape (b, *shape); its output is flattened.
    epochs : int
        Training epochs of the learned kinds (``autoencoder``, ``contrastive``). At the
        default 30, ``contrastive`` on 3,000 MNIST images (1×28×28, d = 50) took 43 s on one
        thread of a busy 2-core AMD EPYC VM (:mod:`fedvote.models.contrastive`).
    cache : bool or path
        For the learned kinds (:data:`CACHED_KINDS`; ignored by the others): False trains
        every time; True keeps the trained encoder in the directory
        :func:`fedvote.models.extractor_cache.default_cache_dir` names (``$FEDVOTE_CACHE``,
        else ``~/.cache/fedvote/extractors``) and loads it on the next call with the same
        pool and settings instead of training; a path uses that directory. An unreadable
        cache file is retrained with a warning.

    """
    if kind not in FEATURE_KINDS:
        raise ConfigError(
            "kind", f"unknown feature extractor {kind!r}; choose from {', '.join(FEATURE_KINDS)}"
        )
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ConfigError("dim", f"must be an integer >= 1, got {dim!r}")
    pool = np.asarray(public_features)
    if pool.ndim < 2 or pool.shape[0] == 0:
        raise ConfigError(
            "public_features", f"need a non-empty pool (P, *shape), got shape {tuple(pool.shape)}"
        )
    if kind != "module" and module is not None:
        raise ConfigError("module", f"a module is only used with kind='module', not {kind!r}")
    input_shape = tuple(int(s) for s in pool.shape[1:])
    check_extractor_input(kind, input_shape)
    if kind in CACHED_KINDS and (
        isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1
    ):
        raise ConfigError("epochs", f"must be an integer >= 1, got {epochs!r}")
    if not isinstance(cache, bool | str | Path):
        raise ConfigError("cache", f"must be True, False or a directory, got {type(cache).__name__}")
    flat_dim = math.prod(input_shape)
    flat = pool.reshape(pool.shape[0], flat_dim).astype(np.float32)  # (P, D)

    if kind == "identity":
        return FeatureExtractor(kind, input_shape, flat_dim, normalize, 0, _flatten)
    if kind == "patch":
        module = fit_patch_features(pool, seed=seed, settings=patch_settings(pool.shape[0]))
        return patch_extractor(module, input_shape, normalize)
    if kind == "pca":
        return _fit_pca(flat, input_shape, min(int(dim), *flat.shape), seed, normalize)
    if kind == "random":
        generator = torch.Generator().manual_seed(int(seed))
        matrix = torch.randn((flat_dim, int(dim)), generator=generator) / math.sqrt(int(dim))  # (D, d)
        # The agents regenerate the matrix from the seed: one number travels.
        return FeatureExtractor(kind, input_shape, int(dim), normalize, 1, _linear_map(matrix))
    if kind in CACHED_KINDS:
        encoder = _learned_encoder(kind, pool, flat, int(dim), int(seed), int(epochs), cache)
        return FeatureExtractor(
            kind, input_shape, int(dim), normalize, _parameter_count(encoder), _module_map(encoder)
        )
    return _wrap_module(module, pool, input_shape, normalize)


def patch_settings(pool_size: int) -> PatchSettings:
    """The patch kind's recipe for a pool of ``pool_size`` images.

    Coates & Ng's 100,000 patches, fewer for a small pool (40 windows of each image at most).
    """
    return PatchSettings(patches=min(PatchSettings.patches, _PATCHES_PER_IMAGE * int(pool_size)))


def patch_extractor(
    module: PatchFeatures, input_shape: tuple[int, ...], normalize: bool = False
) -> FeatureExtractor:
    """φ of examples shaped ``input_shape`` by the fitted patch map ``module``; it ships as its buffers.

    ``module`` is :func:`~fedvote.models.patch_features.fit_patch_features`'s (or rebuilt from its state).
    """
    floats = int(sum(buffer.numel() for buffer in module.buffers()))

    def apply(x: torch.Tensor) -> torch.Tensor:
        return module(x)

    shape = tuple(int(side) for side in input_shape)
    return FeatureExtractor("patch", shape, module.dim, normalize, floats, apply)


def check_extractor_input(kind: str, example_shape: tuple[int, ...], *, argument: str = "kind") -> None:
    """Refuse, naming ``argument``, a ``kind`` that cannot take examples of ``example_shape``.

    A method calls it with its own option's name (``features``, ``extractor``) before it
    fits anything, so the message names the flag the user typed.
    """
    if kind in IMAGE_KINDS and not is_image_shape(tuple(example_shape)):
        raise ConfigError(
            argument,
            f"{kind!r} needs image examples (C, H, W) of at least 8x8, got examples of shape "
            f"{tuple(example_shape)}; use 'autoencoder' or 'pca' for vectors",
        )


def _learned_encoder(
    kind: str,
    pool: np.ndarray,
    flat: np.ndarray,
    dim: int,
    seed: int,
    epochs: int,
    cache: bool | str | Path,
) -> nn.Module:
    """The trained encoder of a learned ``kind``, from the disk cache when asked and there.

    ``pool`` (P, *shape) is the public pool as given (its bytes key the cache), ``flat``
    (P, D) the same examples flattened to float32 (what is trained on).
    """
    input_shape = tuple(int(s) for s in pool.shape[1:])
    if kind == "autoencoder":
        recipe = (
            f"mlp D-h-d-h-D, h = {_autoencoder_hidden(flat.shape[1], dim)}, MSE, "
            f"Adam {_AUTOENCODER_LEARNING_RATE:g}, batch {_AUTOENCODER_BATCH}"
        )

        def build() -> nn.Module:
            return _autoencoder_encoder(flat.shape[1], dim)

        def train() -> nn.Module:
            return _train_autoencoder(flat, dim, seed, epochs)
    else:
        images = flat.reshape(pool.shape[0], *input_shape)  # (P, C, H, W)
        recipe = repr(_CONTRASTIVE)

        def build() -> nn.Module:
            return build_encoder(input_shape, dim, _CONTRASTIVE)

        def train() -> nn.Module:
            return train_contrastive_encoder(images, dim, seed, epochs, _CONTRASTIVE)

    if cache is False:
        return train()
    directory = default_cache_dir() if cache is True else Path(cache)
    key = extractor_key(pool, kind=kind, dim=dim, seed=seed, epochs=epochs, recipe=recipe)
    return load_or_train(key, directory, build=build, train=train)


def _flatten(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1)


def _linear_map(
    matrix: torch.Tensor, mean: torch.Tensor | None = None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The map x ↦ (flatten(x) − mean) @ matrix, with matrix (D, d)."""

    def apply(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1)
        if mean is not None:
            flat = flat - mean
        return flat @ matrix

    return apply


def _module_map(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    def apply(x: torch.Tensor) -> torch.Tensor:
        return module(x).reshape(x.shape[0], -1).to(torch.float32)

    return apply


def _fit_pca(
    flat: np.ndarray, input_shape: tuple[int, ...], dim: int, seed: int, normalize: bool
) -> FeatureExtractor:
    from sklearn.decomposition import PCA

    pca = PCA(n_components=dim, random_state=int(seed)).fit(flat)
    mean = torch.as_tensor(pca.mean_, dtype=torch.float32)  # (D,)
    components = torch.as_tensor(pca.components_.T, dtype=torch.float32).contiguous()  # (D, d)
    return FeatureExtractor(
        "pca",
        input_shape,
        dim,
        normalize,
        int(mean.numel() + components.numel()),
        _linear_map(components, mean),
    )


def _autoencoder_hidden(d_in: int, dim: int) -> int:
    return max(dim, min(256, 2 * d_in))


def _autoencoder_encoder(d_in: int, dim: int) -> nn.Sequential:
    """The untrained encoder D → h → d of :func:`_train_autoencoder` (its architecture)."""
    hidden = _autoencoder_hidden(d_in, dim)
    return nn.Sequential(nn.Flatten(), nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, dim))


def _train_autoencoder(flat: np.ndarray, dim: int, seed: int, epochs: int) -> nn.Module:
    """The encoder of an MLP autoencoder D → h → d → h → D trained (MSE, Adam) on ``flat``."""
    generator = torch.Generator().manual_seed(int(seed))
    d_in = flat.shape[1]
    hidden = _autoencoder_hidden(d_in, dim)
    encoder = _autoencoder_encoder(d_in, dim)
    decoder = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, d_in))
    with torch.no_grad():
        for layer in [*encoder, *decoder]:
            if isinstance(layer, nn.Linear):
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)
    x = torch.as_tensor(flat, dtype=torch.float32)
    params = [*encoder.parameters(), *decoder.parameters()]
    optimiser = torch.optim.Adam(params, lr=_AUTOENCODER_LEARNING_RATE)
    batch = _AUTOENCODER_BATCH
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], batch):
            rows = x[order[start : start + batch]]
            loss = torch.mean((decoder(encoder(rows)) - rows) ** 2)  # rows: (b, D)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return encoder.eval().requires_grad_(False)


def _wrap_module(
    module: nn.Module | str | Path | None, pool: np.ndarray, input_shape: tuple[int, ...], normalize: bool
) -> FeatureExtractor:
    if module is None:
        raise ConfigError("module", "kind='module' needs a torch.nn.Module or a TorchScript file path")
    if isinstance(module, str | Path):
        module = _load_module_file(Path(module))
    if not isinstance(module, nn.Module):
        raise ConfigError("module", f"must be a torch.nn.Module or a path, got {type(module).__name__}")
    try:
        module.eval()
    except NotImplementedError:  # torch.export modules are already in inference form
        pass
    probe = torch.as_tensor(pool[:1], dtype=torch.float32)
    with torch.no_grad():
        try:
            out = module(probe)
        except Exception as error:
            raise ConfigError(
                "module", f"does not accept examples of shape {input_shape}: {error}"
            ) from error
    dim = int(math.prod(out.shape[1:]))
    return FeatureExtractor(
        "module", input_shape, dim, normalize, _parameter_count(module), _module_map(module)
    )


def _parameter_count(module: nn.Module) -> int:
    return int(sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers()))


def _load_module_file(path: Path) -> nn.Module:
    """A TorchScript file (``torch.jit.save``) or a ``torch.export`` program (``.pt2``)."""
    if not path.is_file():
        raise ConfigError("module", f"no TorchScript or torch.export file at {path}")
    try:
        if path.suffix == ".pt2":
            exported: nn.Module = torch.export.load(str(path)).module()
            return exported
        loaded: nn.Module = torch.jit.load(str(path), map_location="cpu")
        return loaded
    except Exception as error:  # torch raises several types for a file it cannot read
        raise ConfigError(
            "module", f"cannot load {path} as a TorchScript/torch.export file: {error}"
        ) from error
