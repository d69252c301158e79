"""In-process clients trained as a batch: every client's records on one device, stacked.

:class:`~fedvote.transport.local.LocalTransport` holds every agent anyway; it keeps their
records as one tensor (:class:`StackedRecords`) and runs the sampled clients' local
training together:

* PriFedSync (``federated-f-dp-prifedsync.txt``, :class:`BatchedClients`): Algorithm 2 with
  Poisson batches (:func:`fedvote.models.batched_dp_sgd.noisy_local_training`); the helper
  model goes down, the noisy private model comes back.
* FedAvg, DP-FedAvg, DP-FedSGD (:class:`BatchedUpdates`): each agent's E local (DP-)SGD steps
  from θ (:mod:`fedvote.models.batched_sgd`) on the batches — and DP-SGD noise — that the
  agent draws itself (:func:`fedvote.agents.local_updates.local_draws`), each update then
  leaving its agent through :func:`fedvote.agents.local_updates.release_update`, clipped and
  noised there as one agent at a time would.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedvote.agents.agent import Agent
from fedvote.agents.local_updates import LocalDraws, local_draws, release_update
from fedvote.data.client_holdout import client_test_indices
from fedvote.data.federation import LabeledData
from fedvote.models import batched_dp_sgd as poisson_dp_sgd
from fedvote.models import batched_sgd as stacked_sgd
from fedvote.models.batched_dp_sgd import (
    NoisyTraining,
    PaddedBatches,
    PaddedSteps,
    perceptron_layer_sizes,
    stacked_accuracy,
)
from fedvote.models.batched_sgd import batched_sgd
from fedvote.models.local_training import LocalTraining
from fedvote.models.shifted_input import shift_features
from fedvote.models.threads import threads_for_products
from fedvote.models.zoo import build_model, resolve_model_name

# The stream tag of the clients' batch draws and noise. PriFedSync's server-side generator
# (client sampling) uses tag 0x9F5 of the same noise seed; a distinct tag keeps the two
# streams apart (issue 15, defect 9: no two consumers of one seed may share a stream).
BATCHED_CLIENTS_TAG = 0xBC5

# Agents whose expected batch sizes lie within this factor train in one padded computation
# (benchmarks/bench_batched_clients.py measures the Dirichlet split with and without).
GROUP_RATIO = 2.0


class StackedRecords:
    """Every client's records as one tensor on ``device``: client j's are its counts[j] rows from offsets[j].

    ``features`` (Σnᵢ, in) float32 (flattened), ``labels`` (Σnᵢ,), ``counts`` and ``offsets`` (N,).
    """

    def __init__(self, data: Sequence[LabeledData], device: torch.device) -> None:
        counts = np.array([len(d) for d in data], dtype=np.int64)
        self.train_labels = [d.labels for d in data]
        width = int(np.prod(data[0].features.shape[1:]))  # flattened input size (agents may hold no records)
        flat = [d.features.reshape(len(d), width) for d in data]
        features = np.concatenate(flat).astype(np.float32, copy=False)
        self.device = device
        self.features = torch.as_tensor(features, device=device)  # (Σnᵢ, in)
        self.labels = torch.as_tensor(np.concatenate(self.train_labels), dtype=torch.int64, device=device)
        self.counts = torch.as_tensor(counts, device=device)  # (N,)
        self.offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]), device=device)
        self._shift_key: tuple[float, ...] | None = None
        self._shifted_features = self.features

    def shifted(self, shift: tuple[float, ...] | None) -> torch.Tensor:
        """Every record minus the public constant ``shift`` (in,), (Σnᵢ, in); kept for the next round.

        Exactly what each agent computes for itself
        (:func:`~fedvote.models.shifted_input.shift_features`: in float64, then float32).
        """
        if shift is None:
            return self.features
        if self._shift_key != shift:
            self._shift_key = shift
            shifted = shift_features(self.features.cpu().numpy(), shift)
            self._shifted_features = torch.as_tensor(shifted, device=self.device)
        return self._shifted_features


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
    records : StackedRecords, optional
        The clients' records already stacked on ``device`` (shared with :class:`BatchedUpdates`);
        stacked from ``data`` when not given.

    """

    def __init__(
        self,
        data: Sequence[LabeledData],
        *,
        noise_entropy: int,
        test_seeds: Sequence[int],
        device: torch.device,
        records: StackedRecords | None = None,
    ) -> None:
        self.records = records if records is not None else StackedRecords(data, device)
        self.device = device
        stream = np.random.SeedSequence([noise_entropy, BATCHED_CLIENTS_TAG])
        seed = int(stream.generate_state(1, np.uint64)[0] >> 1)
        self._generator = torch.Generator(device=device).manual_seed(seed)
        self._test_seeds = list(test_seeds)
        self._tests: dict[tuple[int, int, tuple[float, ...] | None], tuple[torch.Tensor, torch.Tensor]] = {}

    def train(self, helpers: np.ndarray, agent_ids: np.ndarray, training: NoisyTraining) -> np.ndarray:
        """Private models (m, d) of clients ``agent_ids``, each trained from its row of ``helpers``."""
        records = self.records
        ids = torch.as_tensor(np.asarray(agent_ids, dtype=np.int64), device=self.device)
        start = torch.as_tensor(np.asarray(helpers, dtype=np.float32), device=self.device)  # (m, d)
        # Looked up in its module at each call, so that a test's patch of the trainer is the one run.
        trained = poisson_dp_sgd.noisy_local_training(
            start,
            records.shifted(training.input_shift),
            records.labels,
            records.offsets[ids],
            records.counts[ids],
            training,
            self._generator,
        )
        return trained.cpu().numpy()

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
                for labels, seed in zip(self.records.train_labels, self._test_seeds, strict=True)
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


def expected_batch(records: int, training: LocalTraining) -> float:
    """An agent's expected batch size: min(B, n) rows of plain SGD, q_b·n of DP-SGD's Poisson batches."""
    if training.dp_sgd is not None:
        return training.dp_sgd.sampling_rate * records
    return float(min(training.batch_size, records))


def size_groups(expected: Sequence[float], ratio: float = GROUP_RATIO) -> list[list[int]]:
    """The agents (indices into ``expected``) in groups whose expected batch sizes differ by ≤ ``ratio``×.

    Sorted by size, a new group starts where a size exceeds ``ratio`` times its group's
    smallest: a batch padded to its group's largest is then at most about ``ratio`` times its
    own size, not the whole round's largest over its own (on MNIST's Dirichlet(0.5) split,
    76 to 1,406 records: 18×). Each group is one batched computation.
    """
    order = sorted(range(len(expected)), key=lambda j: expected[j])
    groups: list[list[int]] = []
    for j in order:
        if groups and expected[j] <= ratio * expected[groups[-1][0]]:
            groups[-1].append(j)
        else:
            groups.append([j])
    return groups


class BatchedUpdates:
    """The gradient baselines' sampled agents trained as one vectorised computation.

    For FedAvg, DP-FedAvg and DP-FedSGD on a perceptron (``logistic``, ``mlp``): the m
    agents of a round start from θ as m stacked models and take their E local steps
    together (:func:`~fedvote.models.batched_sgd.batched_sgd`,
    :func:`~fedvote.models.batched_sgd.batched_dp_sgd`) on batches padded to the largest.
    Every agent still draws its own batches and DP-SGD noise from its own generator
    (:func:`~fedvote.agents.local_updates.local_draws`) and releases its update through
    :func:`~fedvote.agents.local_updates.release_update` (clip to S, its noise share, the
    one exit), so a round equals the per-agent loop up to floating-point rounding.

    Parameters
    ----------
    records : StackedRecords
        Every agent's records, stacked (agent i's are its rows).
    example_shape : tuple of int
        One record's shape (the model's input).
    num_classes : int
        C, the model's outputs.
    group_ratio : float
        Agents whose expected batch sizes lie within this factor train as one padded
        computation (:func:`size_groups`); ``math.inf``: all in one. Default :data:`GROUP_RATIO`.

    """

    def __init__(
        self,
        records: StackedRecords,
        example_shape: tuple[int, ...],
        num_classes: int,
        *,
        group_ratio: float = GROUP_RATIO,
    ) -> None:
        self.records = records
        self._shape = example_shape
        self._classes = num_classes
        self.group_ratio = group_ratio
        self._layouts: dict[str, tuple[tuple[int, ...], list[tuple[int, ...]]]] = {}

    def supports(self, training: LocalTraining) -> bool:
        """Whether the round's model is a perceptron (batched); a CNN stays in the loop."""
        return resolve_model_name(training.model, self._shape) in ("logistic", "mlp")

    def updates(
        self, agents: Sequence[Agent], theta: np.ndarray, training: LocalTraining
    ) -> list[np.ndarray]:
        """Each agent's released update (d,) float32 from θ (d,), in the order of ``agents``."""
        sizes, shapes = self._layout(training.model)
        start = np.asarray(theta, dtype=np.float32)  # (d,)
        draws = [local_draws(agent, training, shapes) for agent in agents]  # each from its own generator
        trained = np.repeat(start[None, :], len(agents), axis=0)  # (m, d); agents without records stay at θ
        active = [j for j, agent in enumerate(agents) if agent.num_records > 0]
        expected = [expected_batch(agents[j].num_records, training) for j in active]
        for group in size_groups(expected, self.group_ratio):  # agents of similar batch sizes: little padding
            chosen = [active[g] for g in group]
            trained[chosen] = self._train(start, [agents[j] for j in chosen], [draws[j] for j in chosen],
                                          sizes, training)
        return [
            release_update(agent, trained[j] - start, training) for j, agent in enumerate(agents)
        ]  # through each agent's exit, in order

    def _layout(self, model_name: str) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
        """The perceptron's layer widths and its parameters' shapes (``parameters()`` order)."""
        if model_name not in self._layouts:
            model = build_model(model_name, self._shape, self._classes)
            shapes = [tuple(p.shape) for p in model.parameters()]
            self._layouts[model_name] = (perceptron_layer_sizes(model), shapes)
        return self._layouts[model_name]

    def _train(
        self,
        start: np.ndarray,
        agents: list[Agent],
        draws: list[LocalDraws],
        sizes: tuple[int, ...],
        training: LocalTraining,
    ) -> np.ndarray:
        """The agents' trained parameters (m, d) after their E local steps, all at once (padded batches)."""
        records = self.records
        device = records.device
        ids = torch.as_tensor([agent.agent_id for agent in agents], dtype=torch.int64, device=device)
        params = torch.as_tensor(start, device=device).unsqueeze(0).repeat(len(agents), 1)  # (m, d)
        features = records.shifted(training.input_shift)
        products = sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))  # multiply-adds a record
        work = products * sum(expected_batch(agent.num_records, training) for agent in agents)  # one step's
        if training.dp_sgd is None:
            batches = PaddedSteps.pad(
                [[draw.batches[k] for draw in draws] for k in range(training.steps)], device
            )  # (E, m, L)
            offsets, rate = records.offsets[ids], training.learning_rate
            with threads_for_products(work):
                trained = batched_sgd(params, sizes, features, records.labels, offsets, batches, rate)
        else:
            steps = [
                PaddedBatches.pad([draw.batches[k] for draw in draws], device) for k in range(training.steps)
            ]  # E × (m, L_k): Poisson batches, their sizes vary step to step
            spec = training.dp_sgd
            noise = torch.stack([draw.noise for draw in draws if draw.noise is not None], dim=1).to(device)
            expected = [spec.sampling_rate * agent.num_records for agent in agents]  # q_b·n_j, public
            step_sizes = torch.tensor([training.learning_rate / e for e in expected], device=device)  # (m,)
            with threads_for_products(work):
                trained = stacked_sgd.batched_dp_sgd(  # looked up at each call, as the trainer above
                    params,
                    sizes,
                    features,
                    records.labels,
                    records.offsets[ids],
                    steps,
                    noise,  # (E, m, d)
                    step_sizes,
                    spec.max_grad_norm,
                )
        return trained.cpu().numpy()
