"""Per-client test sets: each client is tested on the labels it trained on (a diagnostic).

**Simulation diagnostic, not private.** A client's test set follows its *private* label
frequencies, so any accuracy on it is a noiseless function of private data: PriFedSync
keeps it under ``details["diagnostics"]`` only, and no stop rule or other control flow
reads it (the stop rule reads the released global model on public data).

PriFedSync's MNIST protocol (``federated-f-dp-prifedsync.txt``, Section 4.1): "each
client will sample 200 examples with the same label she/he has seen in training"; its
CIFAR protocol (after Hsu et al. 2019) draws a client's test labels from the same class
proportions q as its training data. One rule covers both: a client's test label counts
are Multinomial(size, q), q its training label frequencies, and the records of each
label are drawn from the shared test set without replacement (with replacement only when
the test set holds fewer records of that label than asked).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedvote.errors import ConfigError


def client_test_indices(
    train_labels: Sequence[np.ndarray], test_labels: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Indices into the test set, (clients, size): client i's test records.

    ``train_labels[i]`` (nᵢ,) are client i's training labels; a client without records, or
    one of whose labels the test set lacks, is refused.
    """
    if size < 1:
        raise ConfigError("client_test_size", f"must be at least 1, got {size}")
    test_labels = np.asarray(test_labels)
    num_classes = int(max([test_labels.max(initial=0), *[t.max(initial=0) for t in train_labels]])) + 1
    by_label = [np.flatnonzero(test_labels == c) for c in range(num_classes)]
    rows = []
    for client, labels in enumerate(train_labels):
        counts = np.bincount(np.asarray(labels), minlength=num_classes)
        if counts.sum() == 0:
            raise ConfigError("agents", f"client {client} has no records to derive its test labels from")
        drawn = rng.multinomial(size, counts / counts.sum())
        picks = []
        for label in np.flatnonzero(drawn):
            pool = by_label[label]
            if pool.shape[0] == 0:
                raise ConfigError("test_fraction", f"the test set has no record of label {label}")
            replace = bool(drawn[label] > pool.shape[0])
            picks.append(rng.choice(pool, size=int(drawn[label]), replace=replace))
        rows.append(rng.permutation(np.concatenate(picks)))
    return np.stack(rows).astype(np.int64)
