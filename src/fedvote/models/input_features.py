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

import numpy as np

from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models.config import INPUT_FEATURES, PHOTO_DATASETS
from fedvote.models.features import fit_feature_extractor
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


def with_input_features(
    federation: Federation, kind: str, *, seed: int, progress: Progress = NO_PROGRESS
) -> Federation:
    """``federation`` with every record mapped through φ of ``kind`` fitted on its public pool.

    ``kind`` is resolved (``"none"``, or a federation already seen through ``kind``: it comes
    back unchanged). The agents' records, the pool, the test set and any labelled validation
    set are all mapped by the same φ, then standardised by the pool's mean and deviation;
    labels, domains and sizes are kept. φ's fit reads
    ``federation.public.features`` only. The last mapping is kept, so that the runs of one
    compare or sweep, which share one federation object, fit and map it once.
    """
    if kind == "none" or federation.input_features == kind:
        return federation
    global _LAST
    if _LAST is not None and _LAST[0] is federation and _LAST[1] == (kind, seed):
        return _LAST[2]
    _LAST = None  # free the previous pair before the next is built
    extractor = fit_feature_extractor(kind, federation.public.features, seed=seed)
    parts = _parts(federation)
    total = sum(map(len, parts))
    with progress.step(f"input features ({kind}, fitted on the public pool)", total=total) as bar:

        def raw(part: LabeledData) -> np.ndarray:
            out = np.empty((len(part), extractor.dim), dtype=np.float32)  # (n, d)
            for start in range(0, len(part), _TRANSFORM_CHUNK):
                stop = min(start + _TRANSFORM_CHUNK, len(part))
                out[start:stop] = extractor.transform(part.features[start:stop])
                bar.advance(stop - start)
            return out

        pool = raw(federation.public)  # (P, d)
        centre, scale = pool_standardisation(pool)

        def mapped(part: LabeledData, features: np.ndarray | None = None) -> LabeledData:
            out = raw(part) if features is None else features
            out -= centre
            out /= scale
            return dataclasses.replace(part, features=out)

        seen = dataclasses.replace(
            federation,
            public=mapped(federation.public, pool),
            agents=tuple(mapped(agent) for agent in federation.agents),
            test=mapped(federation.test),
            validation=None if federation.validation is None else mapped(federation.validation),
            example_shape=(extractor.dim,),
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
