"""Multi-label DP-FedAvg: DP-FedAvg (:mod:`fedvote.methods.dp_fedavg`) on A attributes with BCE.

The baseline of the voting paper's multi-label table (CelebA; appendix "Details of CelebA
Datasets Evaluation": S = 0.08, q = 0.04 there). Everything is DP-FedAvg's — Poisson
sampling, the update clipped to S, the noise placement, the fixed denominator q·N, the
events (:func:`fedvote.privacy.events.dp_fedavg_events`) — except the model and the loss:
θ is a model of A logits (one per attribute) and every agent's local steps minimise the
binary cross-entropy of its (n, A) targets (:class:`~fedvote.models.multilabel.MultiLabelLocalTraining`,
:func:`fedvote.agents.multilabel_votes.multilabel_local_update`). Clipping bounds the update
whatever the loss, so the accounting is unchanged. The released model is wrapped in an
:class:`~fedvote.models.multilabel.AttributeHead` for the runner's measurement. On a
single-label dataset (read one-hot) the agents train with DP-FedAvg's own cross-entropy:
the method is then DP-FedAvg.

With ``--sigma 0 --noise server`` and a clip norm no update reaches it is non-private
multi-label FedAvg (summed over q·N rather than weighted by record counts), the
reference of ``experiments/multilabel.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import MethodOutcome
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.models.local_training import LocalTraining
from fedvote.models.multilabel import AttributeHead, MultiLabelLocalTraining
from fedvote.models.zoo import build_model
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import MultiLabelUpdates


@dataclass(frozen=True)
class MultiLabelDpFedAvg(DpFedAvg):
    """DP-FedAvg whose model has A attribute logits and whose agents train with BCE.

    ``task`` (the federation's attributes) is set from its public metadata by
    :meth:`with_public`, or from the server's data when the run starts.
    """

    name = "dp-fedavg-multilabel"
    audit_secure_noise = False  # DP-FedAvg's audit, not on the secure path

    task: AttributeTask | None = None

    def with_public(self, public: PublicMetadata) -> MultiLabelDpFedAvg:
        """The method knowing the federation's attributes (and DP-FedAvg's model and secure-noise plan)."""
        planned = super().with_public(public)
        assert isinstance(planned, MultiLabelDpFedAvg)
        return dataclasses.replace(planned, task=AttributeTask.of(public.attribute_names, public.num_classes))

    def requirements(self) -> tuple[type, ...]:
        """DP-FedAvg's, plus agents that train BCE updates."""
        return (*super().requirements(), MultiLabelUpdates)

    def _task(self) -> AttributeTask:
        if self.task is None:
            raise RuntimeError("the attribute task is set by with_public or run")
        return self.task

    def initial_model(self, server: ServerData) -> torch.nn.Module:
        """θ⁰: the architecture ``model`` with A outputs, initialised from ``seed``."""
        generator = torch.Generator().manual_seed(self.seed)
        return build_model(self.model, server.example_shape, self._task().num_attributes, generator=generator)

    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """DP-FedAvg's round (E SGD steps, clip S, noise share) on the A attributes with BCE."""
        base = super().round_training(round_index, learning_rate, sampled, num_agents)
        if self._task().encoding == "one-hot":
            # A single-label dataset: one true attribute per record, so DP-FedAvg's own
            # softmax cross-entropy (BCE on one-hot targets lost ~11 points on digits).
            return base
        settings = {field.name: getattr(base, field.name) for field in dataclasses.fields(base)}
        return MultiLabelLocalTraining(**settings, task=self._task())

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """DP-FedAvg's T rounds on the attributes; the released model behind an AttributeHead."""
        task = AttributeTask.of(server.attribute_names, server.num_classes)
        if self.task is not None and self.task != task:
            raise ConfigError("dataset", "the method was planned for another federation's attributes")
        assert isinstance(transport, MultiLabelUpdates)  # check_capabilities refused any other
        method = dataclasses.replace(self, task=task)
        probe = method.round_training(0, self.learning_rate, 0, transport.num_agents)
        if task.encoding == "bitmask" and not transport.trains_multilabel(probe):
            served = type(transport).__name__
            raise ConfigError("method", f"{served} would not train {self.name}'s rounds with BCE")
        outcome = DpFedAvg.run(method, server, transport, ledger, progress)
        return dataclasses.replace(
            outcome,
            student=AttributeHead(outcome.student, task),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            details={
                **outcome.details,
                "attributes": list(task.attribute_names),
                "attribute_encoding": task.encoding,
            },
        )
