"""retain_freed_memory: glibc takes its settings, and training is unchanged by them."""

from __future__ import annotations

import platform
import sys

import numpy as np
import torch

from fedvote.models.allocator import retain_freed_memory
from fedvote.models.ensemble import fit_ensemble
from fedvote.models.training import TrainingConfig

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def test_glibc_takes_both_thresholds_and_elsewhere_nothing_is_done():
    assert retain_freed_memory() is GLIBC
    assert retain_freed_memory() is GLIBC  # idempotent


def test_an_ensemble_trains_to_the_same_weights_whether_freed_memory_is_kept(monkeypatch):
    # fit_ensemble calls retain_freed_memory on a CPU; with it replaced by a no-op the
    # weights come out bit for bit the same: the allocator changes where memory comes from only.
    rng = np.random.default_rng(0)
    features = [rng.random((40, 1, 8, 8), dtype=np.float32) for _ in range(3)]
    labels = [rng.integers(0, 4, 40) for _ in range(3)]
    config = TrainingConfig(model="cnn", epochs=2, batch_size=8, learning_rate=0.01)
    kept = fit_ensemble(features, labels, config, [0, 1, 2], num_classes=4).flat_params
    monkeypatch.setattr("fedvote.models.ensemble.retain_freed_memory", lambda: False)
    plain = fit_ensemble(features, labels, config, [0, 1, 2], num_classes=4).flat_params
    assert torch.equal(kept, plain)
