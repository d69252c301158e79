"""What every record of a run is seen through: a public feature map φ fitted on the public pool only.

One job: turn a :class:`~fedvote.data.federation.Federation` of raw records into the same
federation seen through φ, where φ is fitted on the server's public, unlabelled pool and on
nothing else. In a deployment the server fits φ and sends it down; every agent applies it
to its own records before it trains or votes, and the released model is φ followed by the
student. Since φ is a function of public data alone it is a constant with respect to every
agent's records, so no privacy analysis changes (the same argument as for Private-kNN-FL's
φ, ``docs/privacy.md``): every method then trains on φ(x) at the ε it states.

Why: on CIFAR-10 a teacher trained on one agent's ~500 photos from pixels is little better
than chance, while a linear model on patch features fitted without a single label reaches
about 0.6 with 3,000 labels (``docs/defaults.md``, CIFAR-10). The kinds are
:data:`fedvote.models.config.INPUT_FEATURES`; ``"auto"`` is chosen from the dataset's name
(:data:`~fedvote.models.config.PHOTO_DATASETS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models.config import INPUT_FEATURES, PHOTO_DATASETS
from fedvote.models.features import FeatureExtractor, patch_extractor, patch_settings
from fedvote.models.patch_features import (
    PatchFeatures,
    check_images,
    fit_patch_features,
    patch_features_from_state,
    patch_features_state,
)
from fedvote.progress import NO_PROGRESS, Progress

_TRANSFORM_CHUNK = 2_000  # records mapped per step (a step is a progress tick)
_SCALE_FLOOR = 1e-3  # of the mean deviation, added to every feature's deviation


def resolve_input_features(name: str, dataset: str, photo_datasets: tuple[str, ...] = PHOTO_DATASETS) -> str:
    """The input features ``name`` means for the dataset(s) ``dataset`` (public: its name).

    ``"auto"``: ``"patch"`` when every dataset named (comma-separated sources, target) is one
    of ``photo_datasets`` (the runner passes the method's
    :attr:`~fedvote.methods.base.Method.auto_patch_datasets`), else ``"none"``.
    """
    if name not in INPUT_FEATURES:
        raise ConfigError("input_features", f"must be one of {', '.join(INPUT_FEATURES)}; got {name!r}")
    if name != "auto":
        return name
    names = [part.strip().lower() for part in dataset.split(",") if part.strip()]
    return "patch" if names and all(part in photo_datasets for part in names) else "none"


def pool_standardisation(pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(centre, scale) of φ's outputs on the pool (P, d): every record is mapped to (φ(x) − centre)/scale.

    Standardised by the pool's own mean and deviation (part of φ: public), as linear models on
    these codes want (Coates et al. standardise too); a floor keeps a feature the pool never
    fires from blowing up.
    """
    centre = pool.mean(axis=0)
    scale = pool.std(axis=0)
    scale += _SCALE_FLOOR * float(scale.mean()) + np.finfo(np.float32).tiny
    return centre, scale


INPUT_MAP_PREFIX = "input_map_"  # the keys of an input map's arrays in a deployment file


@dataclass(frozen=True, eq=False)
class InputMap:
    """φ fitted on the public pool and the pool's standardisation: x ↦ (φ(x) − centre) / scale.

    Public (fitted on the pool alone), so a deployment ships it with the pool's copy and every
    agent applies it to its own records (:mod:`fedvote.flower.files`). ``module`` is the fitted
    patch map, ``input_shape`` the example shape it takes, ``centre`` and ``scale`` (d,) the
    pool's :func:`pool_standardisation`.
    """

    kind: str
    module: PatchFeatures
    input_shape: tuple[int, ...]
    centre: np.ndarray
    scale: np.ndarray

    @cached_property
    def extractor(self) -> FeatureExtractor:
        """φ itself (unstandardised) as a :class:`~fedvote.models.features.FeatureExtractor`."""
        return patch_extractor(self.module, self.input_shape)

    def standardise(self, raw: np.ndarray) -> np.ndarray:
        """``raw`` φ outputs (n, d) standardised by the pool, in place."""
        raw -= self.centre
        raw /= self.scale
        return raw

    def apply(self, features: np.ndarray, advance: Callable[[int], None] | None = None) -> np.ndarray:
        """(φ(x) − centre) / scale (n, d) for examples ``features`` (n, *input_shape)."""
        return self.standardise(_unstandardised(self.extractor, features, advance))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The map as plain arrays, keys prefixed :data:`INPUT_MAP_PREFIX` (no pickled code)."""
        arrays = {
            "kind": np.asarray(self.kind),
            "input_shape": np.asarray(self.input_shape, dtype=np.int64),
            "centre": self.centre,
            "scale": self.scale,
            **{f"patch_{name}": value for name, value in patch_features_state(self.module).items()},
        }
        return {INPUT_MAP_PREFIX + name: value for name, value in arrays.items()}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> InputMap | None:
        """The map :meth:`to_arrays` wrote among ``arrays`` (e.g. an open npz); None if it holds none."""
        if INPUT_MAP_PREFIX + "kind" not in arrays:
            return None
        keys = [key for key in arrays if key.startswith(INPUT_MAP_PREFIX)]
        mine = {key.removeprefix(INPUT_MAP_PREFIX): arrays[key] for key in keys}
        kind = str(mine["kind"])
        if kind != "patch" or not {"input_shape", "centre", "scale"} <= set(mine):
            raise ConfigError("input_map", f"holds no patch features fedvote can read (kind {kind!r})")
        module = patch_features_from_state(
            {name.removeprefix("patch_"): value for name, value in mine.items() if name.startswith("patch_")}
        )
        centre = np.asarray(mine["centre"], dtype=np.float32)
        scale = np.asarray(mine["scale"], dtype=np.float32)
        if centre.shape != (module.dim,) or scale.shape != (module.dim,):
            raise ConfigError(
                "input_map", f"its standardisation {centre.shape} does not fit {module.dim} features"
            )
        shape = tuple(int(side) for side in np.asarray(mine["input_shape"]))
        return cls(kind, module, shape, centre, scale)


def fit_input_map(
    kind: str, pool: np.ndarray, *, seed: int, advance: Callable[[int], None] | None = None
) -> tuple[InputMap, np.ndarray]:
    """φ of ``kind`` (``"patch"``) fitted on the public ``pool`` (P, C, H, W) alone; the pool seen through it.

    The pool's features (P, d) are standardised by their own mean and deviation, as every record's are.
    """
    if kind != "patch":
        raise ConfigError("input_features", f"no input map of kind {kind!r}")
    settings = patch_settings(len(pool))
    try:  # the flag that asked for them is --input-features (patch_features names its own argument)
        check_images(np.asarray(pool), settings)
    except ConfigError as error:
        raise ConfigError("input_features", f"patch: {error.detail}") from None
    module = fit_patch_features(pool, seed=seed, settings=settings)
    shape = tuple(int(side) for side in pool.shape[1:])
    extractor = patch_extractor(module, shape)
    raw_pool = _unstandardised(extractor, pool, advance)  # (P, d)
    fitted = InputMap(kind, module, shape, *pool_standardisation(raw_pool))
    return fitted, fitted.standardise(raw_pool)


def _unstandardised(
    extractor: FeatureExtractor, features: np.ndarray, advance: Callable[[int], None] | None
) -> np.ndarray:
    """φ(x) (n, d) float32 for examples ``features`` (n, *shape), in steps of a few thousand."""
    out = np.empty((len(features), extractor.dim), dtype=np.float32)  # (n, d)
    for start in range(0, len(features), _TRANSFORM_CHUNK):
        stop = min(start + _TRANSFORM_CHUNK, len(features))
        out[start:stop] = extractor.transform(features[start:stop])
        if advance is not None:
            advance(stop - start)
    return out


def with_input_features(
    federation: Federation, kind: str, *, seed: int, progress: Progress = NO_PROGRESS
) -> Federation:
    """``federation`` with every record mapped through φ of ``kind`` fitted on its public pool.

    ``kind`` is resolved (``"none"``, or a federation already seen through ``kind``: it comes
    back unchanged). The agents' records, the pool, the test set and any labelled validation
    set are all mapped by the same :class:`InputMap` (φ, then the pool's standardisation);
    labels, domains and sizes are kept. φ's fit reads ``federation.public.features`` only.
    The last mapping is kept, so that the runs of one compare or sweep, which share one
    federation object, fit and map it once.
    """
    if kind == "none" or federation.input_features == kind:
        return federation
    global _LAST
    if _LAST is not None and _LAST[0] is federation and _LAST[1] == (kind, seed):
        return _LAST[2]
    _LAST = None  # free the previous pair before the next is built
    total = sum(map(len, _parts(federation)))
    with progress.step(f"input features ({kind}, fitted on the public pool)", total=total) as bar:
        input_map, pool = fit_input_map(kind, federation.public.features, seed=seed, advance=bar.advance)

        def mapped(part: LabeledData) -> LabeledData:
            return dataclasses.replace(part, features=input_map.apply(part.features, bar.advance))

        seen = dataclasses.replace(
            federation,
            public=dataclasses.replace(federation.public, features=pool),
            agents=tuple(mapped(agent) for agent in federation.agents),
            test=mapped(federation.test),
            validation=None if federation.validation is None else mapped(federation.validation),
            example_shape=(input_map.extractor.dim,),
            input_features=kind,
        )
    _LAST = (federation, (kind, seed), seen)
    return seen


# The last (federation, (kind, seed), mapped federation): held strongly, so ``is`` cannot match
# a new object at a recycled address.
_LAST: tuple[Federation, tuple[str, int], Federation] | None = None


def _parts(federation: Federation) -> list[LabeledData]:
    """Every labelled part of ``federation`` that φ maps."""
    parts = [*federation.agents, federation.public, federation.test]
    return parts if federation.validation is None else [*parts, federation.validation]
