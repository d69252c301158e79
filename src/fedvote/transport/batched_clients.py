"""In-process PriFedSync clients: every client's records on one device, trained as a batch.

:class:`~fedvote.transport.local.LocalTransport` holds every agent anyway; for PriFedSync
(``federated-f-dp-prifedsync.txt``) it keeps their records as one tensor and runs the
sampled clients' Algorithm 2 together (:func:`fedvote.models.batched_dp_sgd.noisy_local_training`).
What crosses the client boundary is the same as one client at a time: the helper model
goes down, the noisy private model comes back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedvote.data.client_holdout import client_test_indices
from fedvote.data.federation import LabeledData
from fedvote.models.batched_dp_sgd import NoisyTraining, noisy_local_training, stacked_accuracy

# The stream tag of the clients' batch draws and noise. PriFedSync's server-side generator
# (client sampling) uses tag 0x9F5 of the same noise seed; a distinct tag keeps the two
# streams apart (issue 15, defect 9: no two consumers of one seed may share a stream).
BATCHED_CLIENTS_TAG = 0xBC5


def default_device(fallback: torch.device) -> torch.device:
    """CUDA when available (the batched clients are a few large tensor products), else ``fallback``."""
    return torch.device("cuda") if torch.cuda.is_available() else fallback


class BatchedClients:
    """Every client's records stacked on ``device``; the privacy generator for their training.

    Parameters
    ----------
    data : sequence of LabeledData
        Client i's private records (flattened to vectors here).
    noise_entropy : int
        Seeds the privacy randomness (batch draws and noise): the transport's noise seed,
        or OS entropy when the user gave none.
    test_seeds : sequence of int
        Each client's seed for drawing its test set (not privacy randomness).
    device : torch.device
        Where the records and the training live.

    """

    def __init__(
        self,
        data: Sequence[LabeledData],
        *,
        noise_entropy: int,
        test_seeds: Sequence[int],
        device: torch.device,
    ) -> None:
        counts = np.array([len(d) for d in data], dtype=np.int64)
        self._train_labels = [d.labels for d in data]
        features = np.concatenate([d.features.reshape(len(d), -1) for d in data]).astype(np.float32)
        self.device = device
        self.features = torch.as_tensor(features, device=device)  # (Σnᵢ, in)
        self.labels = torch.as_tensor(np.concatenate(self._train_labels), dtype=torch.int64, device=device)
        self.counts = torch.as_tensor(counts, device=device)  # (N,)
        self.offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]), device=device)
        stream = np.random.SeedSequence([noise_entropy, BATCHED_CLIENTS_TAG])
        seed = int(stream.generate_state(1, np.uint64)[0] >> 1)
        self._generator = torch.Generator(device=device).manual_seed(seed)
        self._test_seeds = list(test_seeds)
        self._tests: dict[tuple[int, int, tuple[float, ...] | None], tuple[torch.Tensor, torch.Tensor]] = {}
        self._shift_key: tuple[float, ...] | None = None
        self._shifted_features = self.features

    def train(self, helpers: np.ndarray, agent_ids: np.ndarray, training: NoisyTraining) -> np.ndarray:
        """Private models (m, d) of clients ``agent_ids``, each trained from its row of ``helpers``."""
        ids = torch.as_tensor(np.asarray(agent_ids, dtype=np.int64), device=self.device)
        start = torch.as_tensor(np.asarray(helpers, dtype=np.float32), device=self.device)  # (m, d)
        trained = noisy_local_training(
            start,
            self._shifted(training.input_shift),
            self.labels,
            self.offsets[ids],
            self.counts[ids],
            training,
            self._generator,
        )
        return trained.cpu().numpy()

    def _shifted(self, shift: tuple[float, ...] | None) -> torch.Tensor:
        """Every record minus the public constant ``shift`` (in,), kept for the next round."""
        if shift is None:
            return self.features
        if self._shift_key != shift:
            self._shift_key = shift
            self._shifted_features = self.features - torch.as_tensor(shift, device=self.device)
        return self._shifted_features

    def accuracies(
        self,
        models: np.ndarray,
        agent_ids: np.ndarray,
        test: LabeledData,
        *,
        per_client: int,
        layer_sizes: tuple[int, ...],
        input_shift: tuple[float, ...] | None = None,
    ) -> np.ndarray:
        """Accuracy of ``models[j]`` (m, d) on client ``agent_ids[j]``'s own test set, (m,)."""
        x, y = self._test_sets(test, per_client, input_shift)
        ids = torch.as_tensor(np.asarray(agent_ids, dtype=np.int64), device=self.device)
        params = torch.as_tensor(np.ascontiguousarray(models, dtype=np.float32), device=self.device)
        return stacked_accuracy(params, layer_sizes, x[ids], y[ids]).cpu().numpy()

    def _test_sets(
        self, test: LabeledData, per_client: int, shift: tuple[float, ...] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every client's test records minus ``shift``: (N, per_client, in), (N, per_client); built once."""
        key = (id(test), per_client, shift)
        if key not in self._tests:
            rows = [
                client_test_indices(
                    [labels], test.labels, per_client, np.random.default_rng([seed, 0x7E57])
                )[0]
                for labels, seed in zip(self._train_labels, self._test_seeds, strict=True)
            ]
            index = np.stack(rows)  # (N, per_client)
            flat = test.features.reshape(len(test), -1).astype(np.float32)
            if shift is not None:
                flat = flat - np.asarray(shift, dtype=np.float32)
            self._tests[key] = (
                torch.as_tensor(flat[index], device=self.device),
                torch.as_tensor(test.labels[index], dtype=torch.int64, device=self.device),
            )
        return self._tests[key]
