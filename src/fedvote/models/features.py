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
``module``       a user-supplied ``torch.nn.Module`` or a TorchScript file (e.g. a
                 pretrained backbone without its classifier layer).
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

FEATURE_KINDS: tuple[str, ...] = ("identity", "pca", "random", "autoencoder", "module")

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
) -> FeatureExtractor:
    """Fit φ of ``kind`` on the public pool ``public_features`` (P, *shape) — and nothing else.

    Parameters
    ----------
    kind : str
        One of :data:`FEATURE_KINDS`.
    public_features : np.ndarray
        The server's public (unlabelled) pool. The only data φ is fitted on; never pass
        an agent's records here.
    dim : int
        Output dimension for ``pca``, ``random`` and ``autoencoder`` (``pca`` keeps at most
        min(P, D) components, D the flattened input size). Ignored by ``identity`` and
        ``module``, whose dimension is what they produce.
    seed : int
        Seeds the random projection, PCA's randomised solver and the autoencoder.
    normalize : bool
        Scale every feature vector to unit L2 norm (cosine-like distances).
    module : torch.nn.Module or path or None
        For ``kind="module"``: the module itself, or a file to load — TorchScript
        (``torch.jit.save``) or, with suffix ``.pt2``, a ``torch.export`` program (exported
        with a dynamic batch dimension: φ is applied in batches of any size). It is
        applied in eval mode to examples of shape (b, *shape); its output is flattened.
    epochs : int
        Training epochs of the autoencoder.

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
    flat_dim = math.prod(input_shape)
    flat = pool.reshape(pool.shape[0], flat_dim).astype(np.float32)  # (P, D)

    if kind == "identity":
        return FeatureExtractor(kind, input_shape, flat_dim, normalize, 0, _flatten)
    if kind == "pca":
        return _fit_pca(flat, input_shape, min(int(dim), *flat.shape), seed, normalize)
    if kind == "random":
        generator = torch.Generator().manual_seed(int(seed))
        matrix = torch.randn((flat_dim, int(dim)), generator=generator) / math.sqrt(int(dim))  # (D, d)
        # The agents regenerate the matrix from the seed: one number travels.
        return FeatureExtractor(kind, input_shape, int(dim), normalize, 1, _linear_map(matrix))
    if kind == "autoencoder":
        if epochs < 1:
            raise ConfigError("epochs", f"must be at least 1, got {epochs}")
        encoder = _train_autoencoder(flat, int(dim), seed, epochs)
        return FeatureExtractor(
            kind, input_shape, int(dim), normalize, _parameter_count(encoder), _module_map(encoder)
        )
    return _wrap_module(module, pool, input_shape, normalize)


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


def _train_autoencoder(flat: np.ndarray, dim: int, seed: int, epochs: int) -> nn.Module:
    """The encoder of an MLP autoencoder D → h → d → h → D trained (MSE, Adam) on ``flat``."""
    generator = torch.Generator().manual_seed(int(seed))
    d_in = flat.shape[1]
    hidden = max(dim, min(256, 2 * d_in))
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, dim))
    decoder = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, d_in))
    with torch.no_grad():
        for layer in [*encoder, *decoder]:
            if isinstance(layer, nn.Linear):
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)
    x = torch.as_tensor(flat, dtype=torch.float32)
    params = [*encoder.parameters(), *decoder.parameters()]
    optimiser = torch.optim.Adam(params, lr=1e-3)
    batch = 128
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
