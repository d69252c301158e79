"""PriFedSync's personalised models in process (federated-f-dp-prifedsync.txt).

:class:`PersonalisedModelSkills` serves
:class:`~fedvote.transport.capabilities.PersonalisedModels` (and the per-client accuracies
of :class:`~fedvote.transport.capabilities.SimulationDiagnostics`) for
:class:`~fedvote.transport.local.LocalTransport`: the sampled clients' DP-SGD models, all
trained together by :class:`~fedvote.transport.batched_clients.BatchedClients`.
"""

from __future__ import annotations

import numpy as np

from fedvote.data.federation import LabeledData
from fedvote.models.batched_dp_sgd import NoisyTraining
from fedvote.transport.batched_clients import BatchedClients
from fedvote.transport.capabilities import PersonalisedModels
from fedvote.transport.local.shared import LocalAgents


class PersonalisedModelSkills(LocalAgents, PersonalisedModels):
    """Each sampled client's private model, trained together with the others'."""

    _batched_clients: BatchedClients | None = None  # built on first use

    def private_local_models(
        self, helpers: np.ndarray, agent_ids: np.ndarray, training: NoisyTraining
    ) -> np.ndarray:
        """The listed clients' private models (m, d), trained together (:class:`BatchedClients`).

        On CUDA when available. The batch draws and the noise come from one privacy
        generator seeded from the transport's noise entropy (a batched simulation; each
        client's draws are still independent of every other client's data).
        """
        ids = np.asarray(agent_ids, dtype=np.int64).reshape(-1)
        d = int(np.asarray(helpers).shape[1]) if np.asarray(helpers).ndim == 2 else 0
        shift = 0 if training.input_shift is None else len(training.input_shift)  # sent with the helper
        self.communication.count(down=(d + shift) * ids.shape[0], up=d * ids.shape[0])
        return self._prifedsync_clients().train(helpers, ids, training)

    def client_accuracies(
        self,
        models: np.ndarray,
        agent_ids: np.ndarray,
        test: LabeledData,
        *,
        per_client: int,
        layer_sizes: tuple[int, ...],
        input_shift: tuple[float, ...] | None = None,
    ) -> np.ndarray:
        """Each model's accuracy on its client's own test set (simulation-only), (m,)."""
        return self._prifedsync_clients().accuracies(
            models, agent_ids, test, per_client=per_client, layer_sizes=layer_sizes, input_shift=input_shift
        )

    def _prifedsync_clients(self) -> BatchedClients:
        clients = self._batched_clients
        if clients is None:
            records = self._stacked_records()
            clients = BatchedClients(
                self._private,
                noise_entropy=self._noise_entropy,
                test_seeds=self._training_seeds,
                device=records.device,
                records=records,
            )
            self._batched_clients = clients
        return clients

