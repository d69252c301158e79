"""The public side of a federation holds none of the agents' records, compared by content.

The server queries its public pool and trains on it in the clear, and scores the test set
(and a labelled validation set) in the open: an agent's record found in any of them is
used without the noise the reported ε accounts for, so the true ε is unbounded. A target
that is a byte copy of the agents' file under another name, a CSV rendering of it, or a
copy already brought to the target's size would pass any check by name or path; this one
compares records by their features alone (:func:`fedvote.data.record_hashes.record_hashes`:
the same features under another label are still that person's record).

It runs on what the server will see — after the channel conversion, resizing and framing
that the agents' records and the public ones both get — so that a copy that those
per-record maps bring to the same values is caught too, and before anything is loaded
into a model, trained or charged. See docs/privacy.md, "The public pool holds none of
the agents' records (by content)".

Separately loaded sources of one federation are compared with each other the same way
(:func:`refuse_records_shared_by_sources`): a byte copy of a source given as a second
source would deal one person's record to two agents, which agent-level accounting does
not cover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedvote.data.record_hashes import record_hashes, shared_record_count, sorted_record_hashes
from fedvote.errors import ConfigError


def blank_records(features: np.ndarray) -> np.ndarray:
    """Which records (n, *shape) hold one value in every feature (a blank image): (n,) bool.

    A blank record is the same for everyone — the empty 2x2 grid of ``multidigit`` occurs in
    its training and its test grids, built from disjoint source images — so it identifies
    no one's record, and the check leaves it aside.
    """
    flat = np.asarray(features).reshape(len(features), -1)  # (n, features)
    if flat.shape[1] == 0:
        return np.ones(len(flat), dtype=bool)
    return np.asarray(flat.min(axis=1) == flat.max(axis=1))


def agents_record_hashes(agent_features: Sequence[np.ndarray]) -> np.ndarray:
    """The sorted distinct hashes of every agent's records but blank ones: (R,) uint64, R ≤ Σ n_i."""
    parts = [np.asarray(features) for features in agent_features if len(features)]
    hashed = [sorted_record_hashes(features[~blank_records(features)]) for features in parts]
    return np.unique(np.concatenate(hashed)) if hashed else np.empty(0, dtype=np.uint64)


def shared_records_by_part(
    agent_features: Sequence[np.ndarray],
    public_parts: Mapping[str, np.ndarray],
    *,
    agent_hashes: np.ndarray | None = None,
) -> dict[str, int]:
    """For each named public part, how many of its records hold an agent's (non-blank) record's features.

    ``agent_hashes``, when given, is :func:`agents_record_hashes` of ``agent_features``
    already computed (:func:`refuse_records_shared_by_sources` returns it), not hashed again.
    """
    private = agents_record_hashes(agent_features) if agent_hashes is None else agent_hashes
    return {name: shared_record_count(private, features) for name, features in public_parts.items()}


def refuse_agents_records_in_public(
    agent_features: Sequence[np.ndarray],
    public_parts: Mapping[str, np.ndarray],
    *,
    argument: str = "target",
    agent_hashes: np.ndarray | None = None,
) -> None:
    """Refuse (:class:`ConfigError` naming ``argument``) public parts that hold any agent's record.

    Parameters
    ----------
    agent_features : sequence of np.ndarray
        Each agent's features (n_i, *shape), as the federation deals them.
    public_parts : mapping of str to np.ndarray
        The public sets by name (``"public pool"``, ``"test set"``, ``"validation set"``),
        features (m, *shape) as the server will see them.
    argument : str
        The parameter (flag) that chose the public data: ``target``, or ``validation_file``.
    agent_hashes : np.ndarray, optional
        :func:`agents_record_hashes` of ``agent_features``, when already computed.

    Raises
    ------
    ConfigError
        One line: the parts, how many of their records are agents' records, and the count
        per part when there are several.

    """
    counts = shared_records_by_part(agent_features, public_parts, agent_hashes=agent_hashes)
    total = sum(counts.values())
    if total == 0:
        return
    names = list(public_parts)
    which = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    verb = "holds" if len(names) == 1 else "hold"
    split = "" if len(names) == 1 else ": " + ", ".join(f"{counts[n]:,} in the {n}" for n in names)
    raise ConfigError(
        argument,
        f"the {which} {verb} {total:,} of the agents' records (by content{split}); the server "
        "would query, train on and score them in the clear, which no ε bounds: give public "
        "data that holds none of the agents' records (not a copy of their file)",
    )


def refuse_records_shared_by_sources(sources: Sequence[tuple[str, Sequence[np.ndarray]]]) -> np.ndarray:
    """Refuse (:class:`ConfigError` naming ``dataset``) separately loaded sources that share a record.

    Each source is compared by content with the sources before it: a record (non-blank
    features, as :func:`agents_record_hashes` reads them) dealt from two sources is one
    person's record held by two agents — a byte copy of a source given as a second source
    hands all its records over twice — and agent-level accounting bounds one agent's data,
    not one person's records spread over two. Records repeated within one source are not
    compared: they are distinct rows of one load (people with equal features), whichever
    agents they are dealt to.

    Parameters
    ----------
    sources : sequence of (str, sequence of np.ndarray)
        Each source's name and the features (n_i, *shape) dealt from it to agents, after the
        per-record maps (channels, resizing, framing) the federation applies.

    Returns
    -------
    np.ndarray
        :func:`agents_record_hashes` of every dealt record, for the public-pool check
        (``refuse_agents_records_in_public(..., agent_hashes=...)``).

    Raises
    ------
    ConfigError
        One line: the sources that share records, how many records of the later sources are
        an earlier source's, and the count per pair when more than one pair shares.

    """
    hashes = []  # each source's non-blank records' hashes, one per record (repeats kept)
    for _, parts in sources:
        arrays = [np.asarray(features) for features in parts if len(features)]
        rows = [record_hashes(features[~blank_records(features)]) for features in arrays]
        hashes.append(np.concatenate(rows) if rows else np.empty(0, dtype=np.uint64))
    distinct = [np.unique(h) for h in hashes]
    shared = 0
    pairs: list[tuple[str, str, int]] = []
    earlier = np.empty(0, dtype=np.uint64)
    for index, (name, _) in enumerate(sources):
        shared += int(np.count_nonzero(np.isin(hashes[index], earlier)))
        for before in range(index):
            count = int(np.count_nonzero(np.isin(hashes[index], distinct[before])))
            if count:
                pairs.append((sources[before][0], name, count))
        earlier = np.union1d(earlier, distinct[index])
    if shared == 0:
        return earlier
    involved = list(dict.fromkeys(name for first, second, _ in pairs for name in (first, second)))
    which = f"{', '.join(involved[:-1])} and {involved[-1]}"
    split = "" if len(pairs) == 1 else ": " + ", ".join(f"{n:,} between {a} and {b}" for a, b, n in pairs)
    raise ConfigError(
        "dataset",
        f"the sources {which} share {shared:,} records (by content{split}); one person's record would "
        "be dealt to two agents, which agent-level accounting does not cover: give sources that hold "
        "none of each other's records (not a copy of one file)",
    )
