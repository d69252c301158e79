"""The federation: agents' private labelled splits, the server's public pool, the test set.

The public pool's true labels are kept only to *measure* pseudo-label accuracy; no
method ever receives them (methods see a :class:`ServerData`, see ``server_data``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedvote.data.channels import light_ink, luminance
from fedvote.data.datasets import Dataset, check_dataset_name, dataset_key, load_splits
from fedvote.data.framing import frame_digits, resolve_framing
from fedvote.data.partition import PartitionSpec, partition_indices
from fedvote.data.public_pool_check import refuse_agents_records_in_public, refuse_records_shared_by_sources
from fedvote.errors import ConfigError


@dataclass(frozen=True, eq=False)
class LabeledData:
    """Examples ``features`` (n, *shape) float32 with ``labels`` (n,) int64."""

    features: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True, eq=False)
class ServerData:
    """What the server (and so a method) may see: the public pool and the test set.

    ``public_features`` (P, *shape) are unlabelled; agents hold a copy too, so only
    query indices into the pool need to travel. ``validation`` is a *labelled public*
    set apart from the pool (reputation-weighted voting scores teachers on it), or None.
    ``attribute_names``: a multi-label task's attributes (labels are bitmasks,
    :mod:`fedvote.data.attributes`); empty for a single-label one. ``pool_class_prior``: the
    pool's class shares as its dataset documents them (C,), known before any data is seen
    (:func:`fedvote.data.datasets.documents_balanced_classes`); None when not documented.
    """

    public_features: np.ndarray
    test: LabeledData
    num_classes: int
    example_shape: tuple[int, ...]
    validation: LabeledData | None = None
    attribute_names: tuple[str, ...] = ()
    pool_class_prior: tuple[float, ...] | None = None


@dataclass(frozen=True)
class PublicMetadata:
    """What a server knows of a federation without its private records: what a method is planned from.

    The public pool's size, the number of agents N, the classes and the example shape;
    ``agent_records`` are the agents' record counts n_i where they are known (public
    metadata in the papers; a Flower server learns them from the deployment files), else None.
    """

    pool_size: int
    num_agents: int
    num_classes: int
    example_shape: tuple[int, ...]
    agent_records: tuple[int, ...] | None = None
    attribute_names: tuple[str, ...] = ()  # a multi-label task's attributes (labels are bitmasks)


@dataclass(frozen=True, eq=False)
class Federation:
    """Private splits of ``num_agents`` agents plus the server's public pool and test set.

    ``agent_domains[i]`` names the dataset(s) agent i's records come from (``"mnist"``,
    or ``"digits+mnist"`` for a mixed agent); empty when not recorded.
    ``agent_public_access`` says whether agents may read the unlabeled public pool
    beyond the queries they are asked about (the voting paper assumes they may).
    ``validation`` is a labelled public set kept apart from the pool (None: none), e.g.
    a slice of the pool the server had labelled (:func:`fedvote.data.validation.with_validation`).
    ``attribute_names`` are a multi-label dataset's A attributes: every label is then the
    bitmask Σ_a y_a·2^a (:mod:`fedvote.data.attributes`); empty for single-label data.
    ``input_features`` names the public map every record has been seen through
    (:mod:`fedvote.models.input_features`; ``"none"``: the records as loaded).
    ``pool_class_prior`` is the pool's class shares as its dataset documents them (None: not
    documented), passed to the server's view.
    """

    dataset_name: str
    agents: tuple[LabeledData, ...]
    public: LabeledData
    test: LabeledData
    num_classes: int
    example_shape: tuple[int, ...]
    agent_domains: tuple[str, ...] = ()
    agent_public_access: bool = True
    validation: LabeledData | None = None
    attribute_names: tuple[str, ...] = ()
    input_features: str = "none"
    pool_class_prior: tuple[float, ...] | None = None

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self.agents)

    def server_data(self) -> ServerData:
        """The server's view: public pool features (no labels) and the test set."""
        return ServerData(
            public_features=self.public.features,
            test=self.test,
            num_classes=self.num_classes,
            example_shape=self.example_shape,
            validation=self.validation,
            attribute_names=self.attribute_names,
            pool_class_prior=self.pool_class_prior,
        )

    def public_metadata(self) -> PublicMetadata:
        """What a server may know of this federation: no private record, only sizes and shapes."""
        return PublicMetadata(
            pool_size=len(self.public),
            num_agents=self.num_agents,
            num_classes=self.num_classes,
            example_shape=tuple(self.example_shape),
            agent_records=tuple(int(n) for n in self.agent_sizes()),
            attribute_names=self.attribute_names,
        )

    def agent_sizes(self) -> np.ndarray:
        """Records per agent, (N,)."""
        return np.array([len(a) for a in self.agents], dtype=np.int64)

    def class_counts(self) -> np.ndarray:
        """Records per agent and class, (N, C)."""
        return np.stack([np.bincount(a.labels, minlength=self.num_classes) for a in self.agents])


def check_distinct_datasets(
    sources: Sequence[str], target: str | None, data_dir: str | Path | None = None
) -> None:
    """Refuse a target that is one of the sources, and a source named twice, by name.

    The agents split the sources' training parts and the public pool is the target's
    training part, so a target that is also a source would hand the agents' private
    records to the server as "public" ones. Names are compared as datasets
    (:func:`~fedvote.data.datasets.dataset_key`: case, spaces and path spellings
    aside), never as loaded objects, and before anything is loaded.
    """
    keys = [dataset_key(name, data_dir) for name in sources]
    if target is not None and dataset_key(target, data_dir) in keys:
        raise ConfigError(
            "target",
            f"{target.strip()!r} is also a source dataset ({', '.join(sources)}): the public pool "
            "would hold the agents' own records; name another target, or none to split one dataset",
        )
    for index, key in enumerate(keys):
        if key in keys[:index]:
            raise ConfigError("dataset", f"{sources[index]!r} is named twice; name each source once")


def dataset_names(
    dataset: str, target: str | None, data_dir: str | Path | None = None
) -> tuple[list[str], str | None]:
    """The source datasets ``dataset`` names (comma-separated) and the ``target``, checked.

    Refused by name before anything is loaded (the command line asks this before it
    imports the runner, so a misspelt name answers at once): a source named twice or a
    target among the sources (:func:`check_distinct_datasets`), several sources without
    a target, then an unknown name (:func:`~fedvote.data.datasets.check_dataset_name`),
    sources first.
    """
    names = [name.strip() for name in dataset.split(",") if name.strip()]
    target_name = target.strip() if target is not None else None
    check_distinct_datasets(names, target_name, data_dir)
    if target_name is None and len(names) > 1:
        raise ConfigError("target", "several source datasets need a --target domain")
    for name in names:
        check_dataset_name(name)
    if target_name is not None:
        check_dataset_name(target_name, "target")
    return names, target_name


def build_federation(
    dataset: Dataset,
    *,
    num_agents: int,
    partition: PartitionSpec,
    public_fraction: float = 0.2,
    test_fraction: float = 0.2,
    agent_fraction: float | None = None,
    seed: int = 0,
) -> Federation:
    """Split ``dataset`` into agents' private data, a public pool and a test set.

    The public pool and the test set are drawn uniformly at random (the target
    distribution); the rest — or ``agent_fraction`` of the data — is partitioned among
    agents by ``partition``. Deterministic under ``seed``.
    """
    for name, value in (("public_fraction", public_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise ConfigError(name, f"must lie in (0, 1), got {value}")
    if agent_fraction is None:
        agent_fraction = 1.0 - public_fraction - test_fraction
    if not 0.0 < agent_fraction < 1.0:
        raise ConfigError("agent_fraction", f"must lie in (0, 1), got {agent_fraction}")
    total = public_fraction + test_fraction + agent_fraction
    if total > 1.0 + 1e-9:
        raise ConfigError(
            "public_fraction",
            f"public ({public_fraction}) + test ({test_fraction}) + agent ({agent_fraction}) "
            f"fractions sum to {total:g} > 1",
        )
    n = len(dataset)
    num_public = int(round(public_fraction * n))
    num_test = int(round(test_fraction * n))
    num_private = min(int(round(agent_fraction * n)), n - num_public - num_test)
    if min(num_public, num_test, num_private) < 1:
        raise ConfigError(
            "public_fraction",
            f"{n} records give {num_private} private, {num_public} public and {num_test} test "
            f"records; each part needs at least one",
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFED]))
    order = rng.permutation(n)
    test_idx = order[:num_test]
    public_idx = order[num_test : num_test + num_public]
    private_idx = order[num_test + num_public : num_test + num_public + num_private]
    parts = partition_indices(dataset.labels[private_idx], num_agents, partition, rng)

    def take(indices: np.ndarray) -> LabeledData:
        return LabeledData(dataset.features[indices], dataset.labels[indices])

    return Federation(
        dataset_name=dataset.name,
        agents=tuple(take(private_idx[p]) for p in parts),
        public=take(public_idx),
        test=take(test_idx),
        num_classes=dataset.num_classes,
        example_shape=dataset.example_shape,
        attribute_names=dataset.attribute_names,
    )


MIXING_MODES: tuple[str, ...] = ("by_source", "mixed")


def _common_shape(
    datasets: Sequence[Dataset], image_size: tuple[int, int] | None, framing: str = "none"
) -> tuple[int, ...]:
    """The example shape every part is brought to: (C, *image_size) for images.

    Without ``image_size``: the target's (first) size, or with MNIST framing the largest
    side among the domains (framing downsamples nothing then).
    """
    shapes = {d.example_shape for d in datasets}
    if not all(d.is_image for d in datasets):
        if image_size is not None:
            raise ConfigError("image_size", "only images can be resized; some datasets hold vectors")
        if len(shapes) > 1:
            raise ConfigError(
                "target", f"examples of different shapes cannot mix: {', '.join(map(str, sorted(shapes)))}"
            )
        return shapes.pop()
    channels = {s[0] for s in shapes}
    if len(channels) > 1:
        raise ConfigError(
            "target",
            f"images with different channel counts cannot mix: {', '.join(map(str, sorted(shapes)))}",
        )
    if image_size is not None:
        size = tuple(image_size)
        if len(size) != 2 or not all(isinstance(v, int | np.integer) and v >= 1 for v in size):
            raise ConfigError(
                "image_size", f"must be two positive integers (height, width), got {image_size!r}"
            )
    elif framing == "mnist":
        side = max(max(d.example_shape[1:]) for d in datasets)
        size = (side, side)
    else:
        size = datasets[0].example_shape[1:]  # the target comes first
    return (channels.pop(), int(size[0]), int(size[1]))


def _common_channels(
    sources: Sequence[Dataset], target: Dataset, target_test: Dataset | None
) -> tuple[list[Dataset], Dataset, Dataset | None, frozenset[str]]:
    """Colour domains brought to one luminance channel when the domains disagree on channels.

    Digit classes do not depend on colour, and grey domains (MNIST, USPS) cannot be
    coloured, so when some image domains are RGB and others grey every RGB one becomes
    grey by ITU-R BT.601 luminance (:func:`fedvote.data.channels.luminance`), then light
    ink on a dark ground stretched to [0, 1] (:func:`fedvote.data.channels.light_ink`), as
    the grey digit domains are: public per-record maps. All-colour or all-grey federations
    are left as they are. Returns the
    datasets and the names of those converted: they are never MNIST-framed (framing finds
    light ink on a blank ground; a converted colour image has a textured one of either
    polarity) but resized, as their digits already fill their frame.
    """
    everything = [*sources, target, *([target_test] if target_test is not None else [])]
    channels = {d.example_shape[0] for d in everything if d.is_image}
    if not all(d.is_image for d in everything) or channels != {1, 3}:
        return list(sources), target, target_test, frozenset()

    def grey(dataset: Dataset) -> Dataset:
        if dataset.example_shape[0] == 1:
            return dataset
        return Dataset(
            name=dataset.name,
            features=light_ink(luminance(dataset.features)),
            labels=dataset.labels,
            class_names=dataset.class_names,
            description=f"{dataset.description} (luminance, light ink)",
            split=dataset.split,
        )

    converted = frozenset(d.name for d in everything if d.example_shape[0] == 3)
    test = grey(target_test) if target_test is not None else None
    return [grey(s) for s in sources], grey(target), test, converted


def _take(
    dataset: Dataset, indices: np.ndarray, shape: tuple[int, ...], framing: str = "none"
) -> LabeledData:
    """The records at ``indices``: framed as MNIST is, or resampled to ``shape`` when their images differ."""
    part = dataset.subset(indices)
    if framing == "mnist":
        return LabeledData(frame_digits(part.features, (shape[1], shape[2])), part.labels)
    if part.example_shape != shape:
        part = part.resized((shape[1], shape[2]))
    return LabeledData(part.features, part.labels)


def _agents_per_source(
    sizes: Sequence[int], num_agents: int, agents_per_source: Sequence[int] | None
) -> list[int]:
    """How many agents each source gets: as given, or in proportion to its size (each >= 1)."""
    if num_agents > sum(sizes):  # every agent holds a record; refused before any float arithmetic
        raise ConfigError("agents", f"{num_agents} agents but only {sum(sizes)} records")
    if agents_per_source is not None:
        counts = [int(c) for c in agents_per_source]
        if len(counts) != len(sizes):
            raise ConfigError(
                "agents_per_source",
                f"{len(counts)} counts for {len(sizes)} source datasets; give one per source",
            )
        if min(counts) < 1 or sum(counts) != num_agents:
            raise ConfigError(
                "agents_per_source",
                f"counts {counts} must each be >= 1 and sum to the {num_agents} agents",
            )
        return counts
    if num_agents < len(sizes):
        raise ConfigError(
            "num_agents",
            f"{num_agents} agents cannot cover {len(sizes)} source domains, one agent each at least",
        )
    # Largest remainder on the agents beyond the one each source gets.
    weights = np.asarray(sizes, dtype=np.float64)
    quota = 1.0 + (num_agents - len(sizes)) * weights / weights.sum()
    counts_arr = np.floor(quota).astype(np.int64)
    for index in np.argsort(-(quota - counts_arr), kind="stable")[: num_agents - int(counts_arr.sum())]:
        counts_arr[index] += 1
    return [int(c) for c in counts_arr]


def _refuse_shared_records(sources: Sequence[Dataset], target: Dataset, target_test: Dataset | None) -> None:
    """Refuse sources that may hold the target's records, or each other's.

    The public pool and the test set are public: a source that is the target (same name
    and split, :meth:`Dataset.overlaps` — not the same object, two loads of one file are
    two objects) would put the agents' private records in them, and the server would
    query and train on those records while the run reports a finite ε. A source named
    twice would give one record to two agents, which agent-level accounting does not
    cover. This compares identities, before any record is processed; a copy under another
    name is caught by content once the federation is dealt
    (:func:`~fedvote.data.public_pool_check.refuse_agents_records_in_public`,
    :func:`~fedvote.data.public_pool_check.refuse_records_shared_by_sources`).
    """
    for index, source in enumerate(sources):
        for public in (target, target_test):
            if public is not None and source.overlaps(public):
                raise ConfigError(
                    "target",
                    f"{public.name} ({public.split}) is also a source dataset: the public pool and the "
                    "test set would hold the agents' own records; split one dataset with "
                    "build_federation instead",
                )
        for other in sources[index + 1 :]:
            if source.overlaps(other):
                raise ConfigError(
                    "dataset", f"{source.name} ({source.split}) is named twice as a source; name each once"
                )


def build_domain_federation(
    sources: Sequence[Dataset],
    target: Dataset,
    *,
    num_agents: int,
    partition: PartitionSpec | None = None,
    mixing: str = "by_source",
    agents_per_source: Sequence[int] | None = None,
    target_test: Dataset | None = None,
    public_fraction: float = 1.0,
    test_fraction: float | None = None,
    records_per_agent: int | None = None,
    image_size: tuple[int, int] | None = None,
    framing: str = "none",
    agent_public_access: bool = True,
    seed: int = 0,
) -> Federation:
    """A federation under domain shift: agents hold source data, the server's pool is the target's.

    Parameters
    ----------
    sources : sequence of Dataset
        The agents' domains (e.g. ``[mnist_train]``, or ``[mnist_train, digits]``). Their
        records are split among the agents; none goes to the pool or the test set.
    target : Dataset
        The target domain (e.g. USPS train). The public unlabeled pool is drawn from it;
        so is the test set unless ``target_test`` is given.
    num_agents : int
        Number of agents N.
    partition : PartitionSpec, optional
        How each source's records (``by_source``), or all of them (``mixed``), are split
        among agents; default iid.
    mixing : {"by_source", "mixed"}
        ``by_source``: each agent holds one domain; agents are spread over the sources in
        proportion to their sizes, or as ``agents_per_source`` says. ``mixed``: the
        sources are pooled and partitioned, so an agent may hold several domains.
    agents_per_source : sequence of int, optional
        Agents per source for ``by_source``; must sum to ``num_agents``.
    target_test : Dataset, optional
        The target's official test split; when given it is the test set, whole, and the
        pool is drawn from ``target``.
    public_fraction : float
        Fraction in (0, 1] of the target's records (those not in the test set) that form
        the public pool; default all of them.
    test_fraction : float, optional
        Without ``target_test``: fraction in (0, 1) of ``target`` held out as the test
        set, default 0.3. Must not be given with ``target_test``.
    records_per_agent : int, optional
        Use only ``agents x records_per_agent`` records of each source (of the pooled
        sources for ``mixed``), drawn at random; default all.
    image_size : (int, int), optional
        The common image (height, width) everything is resampled to; default the
        target's (the largest domain's with MNIST framing). Records are resized only when
        their shape differs.
    framing : {"none", "mnist", "auto"}
        ``mnist``: every record (pool, test set, agents') is framed as MNIST's digits
        are (:func:`fedvote.data.framing.frame_digits`, a per-record public map);
        ``auto``: so when the domains are grey images of different sizes. When colour and
        grey domains mix (syndigits with MNIST, USPS), the colour ones are first brought to
        grey luminance and resized, never framed (:func:`_common_channels`).
    agent_public_access : bool
        Recorded on the federation: whether agents may read the unlabeled public pool.
    seed : int
        Every random choice is deterministic under it.

    Returns
    -------
    Federation
        ``dataset_name`` is ``"source+...->target"`` (just the name when all are one
        dataset), ``agent_domains`` names each agent's domain(s).

    """
    sources = list(sources)
    if not sources:
        raise ConfigError("dataset", "at least one source dataset is needed for the agents")
    _refuse_shared_records(sources, target, target_test)
    if mixing not in MIXING_MODES:
        raise ConfigError("mixing", f"unknown mixing {mixing!r}; choose from {', '.join(MIXING_MODES)}")
    if mixing == "mixed" and agents_per_source is not None:
        raise ConfigError("agents_per_source", "only meaningful with mixing='by_source'")
    for dataset in [*sources, *([target_test] if target_test is not None else [])]:
        if dataset.class_names != target.class_names:
            raise ConfigError(
                "target",
                f"{dataset.name} has classes {', '.join(dataset.class_names)} but the target "
                f"{target.name} has {', '.join(target.class_names)}",
            )
    if target_test is not None and target_test.example_shape != target.example_shape:
        raise ConfigError(
            "target", f"target test shape {target_test.example_shape} differs from {target.example_shape}"
        )
    if not 0.0 < public_fraction <= 1.0:
        raise ConfigError("public_fraction", f"must lie in (0, 1], got {public_fraction}")
    if target_test is not None and test_fraction is not None:
        raise ConfigError(
            "test_fraction",
            "the target's official test split is the test set; do not give a test fraction too",
        )
    if target_test is None:
        test_fraction = 0.3 if test_fraction is None else test_fraction
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie in (0, 1), got {test_fraction}")
    if records_per_agent is not None and records_per_agent < 1:
        raise ConfigError("records_per_agent", f"must be at least 1, got {records_per_agent}")
    if num_agents < 1:
        raise ConfigError("num_agents", f"must be at least 1, got {num_agents}")
    partition = partition if partition is not None else PartitionSpec()
    sources, target, target_test, coloured = _common_channels(sources, target, target_test)
    framing = resolve_framing(framing, [d.example_shape for d in [target, *sources]])
    shape = _common_shape([target, *sources], image_size, framing)

    def frame_of(dataset: Dataset) -> str:
        return "none" if dataset.name in coloured else framing
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xD0A]))

    # The target: test set (official, or held out) and the public pool.
    order = rng.permutation(len(target))
    if target_test is None:
        assert test_fraction is not None
        num_test = int(round(test_fraction * len(target)))
        test_idx, rest = order[:num_test], order[num_test:]
    else:
        num_test, test_idx, rest = len(target_test), np.arange(len(target_test)), order
    num_public = int(round(public_fraction * rest.shape[0]))
    if min(num_test, num_public) < 1:
        raise ConfigError(
            "public_fraction",
            f"the target {target.name} ({len(target)} records) gives {num_public} public and {num_test} "
            f"test records; each needs at least one",
        )
    public = _take(target, np.sort(rest[:num_public]), shape, frame_of(target))
    test_source = target_test if target_test is not None else target
    test = _take(test_source, np.sort(test_idx), shape, frame_of(test_source))

    # The sources: each agent's private records.
    def chosen(size: int, agents: int, what: str) -> np.ndarray:
        if records_per_agent is None:
            return np.arange(size)
        wanted = agents * records_per_agent
        if wanted > size:
            raise ConfigError(
                "records_per_agent",
                f"{agents} agents x {records_per_agent} records = {wanted} "
                f"exceeds the {size} records of {what}",
            )
        return np.sort(rng.permutation(size)[:wanted])

    agents: list[LabeledData] = []
    domains: list[str] = []
    dealt: list[list[np.ndarray]] = [[] for _ in sources]  # each source's records, as dealt
    if mixing == "by_source":
        counts = _agents_per_source([len(s) for s in sources], num_agents, agents_per_source)
        for index, (source, count) in enumerate(zip(sources, counts, strict=True)):
            pool = chosen(len(source), count, source.name)
            for part in partition_indices(source.labels[pool], count, partition, rng):
                agents.append(_take(source, pool[part], shape, frame_of(source)))
                domains.append(source.name)
                dealt[index].append(agents[-1].features)
    else:
        offsets = np.cumsum([0] + [len(s) for s in sources])
        all_labels = np.concatenate([s.labels for s in sources])
        pool = chosen(int(offsets[-1]), num_agents, "the pooled sources")
        for part in partition_indices(all_labels[pool], num_agents, partition, rng):
            members = pool[part]
            which = np.searchsorted(offsets, members, side="right") - 1
            pieces = []
            for i, source in enumerate(sources):
                if np.any(which == i):
                    pieces.append(_take(source, members[which == i] - offsets[i], shape, frame_of(source)))
                    dealt[i].append(pieces[-1].features)
            agents.append(
                LabeledData(
                    np.concatenate([p.features for p in pieces]), np.concatenate([p.labels for p in pieces])
                )
            )
            domains.append("+".join(sorted({sources[i].name for i in np.unique(which)})))

    # By content, on what the server will see (after the per-record maps both sides get):
    # the sources with each other (one record dealt from two sources is one person's record
    # held by two agents), then the agents' records with the public pool and the test set.
    labels = [s.name for s in sources]
    labels = [f"{n} ({s.split})" if labels.count(n) > 1 else n for n, s in zip(labels, sources, strict=True)]
    agent_hashes = refuse_records_shared_by_sources(list(zip(labels, dealt, strict=True)))
    refuse_agents_records_in_public(
        [agent.features for agent in agents],
        {"public pool": public.features, "test set": test.features},
        agent_hashes=agent_hashes,
    )
    names = sorted({s.name for s in sources})
    name = target.name if names == [target.name] else f"{'+'.join(names)}->{target.name}"
    return Federation(
        dataset_name=name,
        agents=tuple(agents),
        public=public,
        test=test,
        num_classes=target.num_classes,
        example_shape=shape,
        agent_domains=tuple(domains),
        agent_public_access=agent_public_access,
        attribute_names=target.attribute_names,
    )


def build_noniid_federation(
    train: Dataset,
    test: Dataset,
    *,
    num_agents: int = 100,
    classes_per_agent: int = 6,
    public_fraction_of_test: float = 0.3,
    seed: int = 0,
) -> Federation:
    """The voting paper's non-iid setting: agents split ``train``, each seeing few classes.

    ``train`` is split among ``num_agents`` agents by ``PartitionSpec("classes",
    classes_per_agent)``; ``public_fraction_of_test`` of ``test`` (drawn at random) is the
    public pool and the rest is the test set. On MNIST with the defaults this is the
    paper's Table 1 last row: 100 agents of 600 records on average from 6 digits each,
    3000 public and 7000 test images.
    """
    if not 0.0 < public_fraction_of_test < 1.0:
        raise ConfigError("public_fraction_of_test", f"must lie in (0, 1), got {public_fraction_of_test}")
    return build_domain_federation(
        [train],
        test,
        num_agents=num_agents,
        partition=PartitionSpec("classes", classes_per_agent=classes_per_agent),
        test_fraction=1.0 - public_fraction_of_test,
        public_fraction=1.0,
        seed=seed,
    )


def mnist_noniid_federation(data_dir: str | Path | None = None, *, seed: int = 0) -> Federation:
    """:func:`build_noniid_federation` on MNIST's official train and test files in ``data_dir``."""
    splits = load_splits("mnist", data_dir)
    assert splits.test is not None
    return build_noniid_federation(splits.train, splits.test, seed=seed)
