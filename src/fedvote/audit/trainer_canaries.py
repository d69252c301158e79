"""One-run audits of the DP-SGD methods through their own trainer (DP-FedSGD, PriFedSync).

Steinke, Nasr & Jagielski (2023), "Privacy auditing with one (1) training run": m canaries,
each in one of two states by a fair coin, one training run, each canary scored from what
the server received, the bound of their Theorem 5.2 from the guesses
(:func:`fedvote.audit.one_run.audit_guesses`). Here the canaries are **records** and the
run is the method's own :meth:`~fedvote.methods.base.Method.run` on a
:class:`~fedvote.transport.local.LocalTransport` — its client sampling, the agents' own
batch draws and DP-SGD noise, the batched trainer
(:func:`fedvote.models.batched_dp_sgd.noisy_local_training` for PriFedSync,
:func:`fedvote.models.batched_sgd.batched_dp_sgd` for DP-FedSGD) and its per-sample
clipping — so a trainer that adds too little noise is caught (issue 42, defect 5).

**The canaries: records whose clipped gradient is (nearly) a fixed direction.** The model
is the logistic one (one linear layer, ``W`` (C, in), ``b`` (C,)); the claim does not depend
on the model (the events read q, σ and the number of steps only). Canary j sits on a
canary client at its own input coordinate k_j: its record is x_j = μ + s·e_{k_j} (μ the
public input shift the method subtracts, so the model sees s·e_{k_j}), and its label is
y⁺_j when its coin says "in", y⁻_j otherwise — the two records are replace-one neighbours,
fedvote's instance adjacency. Its per-sample gradient is (p − e_y)(s·e_k)ᵀ on W and p − e_y
on b: it touches column k_j of W and the biases only, and no other record of its client
touches column k_j (the client's other records are other canaries, on other coordinates,
or fillers x = μ, which touch the biases only). Clipped to C, its column moves by at most
C per step, along p − e_y: up for row y, down for the others, whatever p is. The score of
canary j is the total change of W[y⁺_j, k_j] − W[y⁻_j, k_j] over the rounds in which the
server received its client's update (DP-FedSGD: the update; PriFedSync: the private model
less the helper the server sent) — positive for "in" without noise, so a noiseless trainer
gives every guess right.

Each canary client holds n_min records (the real federation's smallest client): PriFedSync
then samples them at B/n_min, the accounting's worst client; DP-FedSGD at its q_b.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.models.threads import single_threaded
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.local import LocalTransport

# The model the canaries are crafted for; the audited claim does not depend on it.
AUDIT_MODEL = "logistic"

# What this audit executes (result ``details.code_under_audit``, the audit table's column).
TRAINER = "the method's own run: its trainer, on record canaries"

# s, the canary input's size: the canary's gradient on its column is s/√(s²+1) of its
# clipped norm (the rest is on the biases), and it is clipped whenever ‖p − e_y‖ ≥ C/√(s²+1).
CANARY_SCALE = 4.0


@dataclass(frozen=True)
class RecordCanaries:
    """m canary records on canary clients: where each lives, its two labels, its coin.

    ``client`` (m,) the canary client holding it; ``coordinate`` (m,) its input coordinate
    k_j; ``label_in``/``label_out`` (m,) its label when the coin says in / out;
    ``included`` (m,) the coins. ``records_per_client`` n, ``clients`` their number.
    """

    client: np.ndarray
    coordinate: np.ndarray
    label_in: np.ndarray
    label_out: np.ndarray
    included: np.ndarray
    records_per_client: int
    clients: int

    @property
    def count(self) -> int:
        """m, the number of canaries."""
        return int(self.client.shape[0])

    def labels(self) -> np.ndarray:
        """Each canary's label in this run: ``label_in`` where its coin is heads, (m,)."""
        return np.where(self.included, self.label_in, self.label_out)

    def description(self, scale: float) -> str:
        """What a canary is, for the audit table."""
        return (
            f"{self.count} canary records x = μ + {scale:g}·e_k (one input coordinate each, on "
            f"{self.clients} clients of {self.records_per_client} records), label y⁺ or y⁻ by a fair coin "
            "(replace-one), trained by the method's own run"
        )


def draw_record_canaries(
    count: int, records_per_client: int, inputs: int, num_classes: int, rng: np.random.Generator
) -> RecordCanaries:
    """``count`` canaries, at most min(n, inputs) a client, each with two labels and a fair coin."""
    if num_classes < 2:
        raise ConfigError("dataset", "a record canary needs two labels: at least 2 classes")
    per_client = min(records_per_client, inputs)
    index = np.arange(count)
    first = rng.integers(num_classes, size=count)
    other = (first + rng.integers(1, num_classes, size=count)) % num_classes  # another class
    return RecordCanaries(
        client=index // per_client,
        coordinate=index % per_client,
        label_in=first,
        label_out=other,
        included=rng.random(count) < 0.5,
        records_per_client=records_per_client,
        clients=-(-count // per_client),
    )


def canary_federation(
    federation: Federation, canaries: RecordCanaries, shift: tuple[float, ...] | None, scale: float
) -> Federation:
    """``federation`` with its agents replaced by the canary clients (public pool and test set kept)."""
    shape = tuple(federation.example_shape)
    inputs = int(np.prod(shape))
    mu = np.zeros(inputs) if shift is None else np.asarray(shift, dtype=np.float64)
    labels = canaries.labels()
    agents = []
    for c in range(canaries.clients):
        features = np.tile(mu, (canaries.records_per_client, 1))  # (n, in): fillers x = μ
        ys = np.zeros(canaries.records_per_client, dtype=np.int64)
        mine = np.flatnonzero(canaries.client == c)
        rows = np.arange(mine.size)
        features[rows, canaries.coordinate[mine]] += scale  # x_j = μ + s·e_{k_j}
        ys[rows] = labels[mine]
        agents.append(LabeledData(features.astype(np.float32).reshape((-1, *shape)), ys))
    return dataclasses.replace(federation, agents=tuple(agents), agent_domains=())


class RecordingTransport(LocalTransport):
    """A :class:`LocalTransport` that keeps what the server received each round, per client.

    DP-FedSGD: every sampled agent's update; PriFedSync: every sampled client's private
    model less the helper the server sent down. ``observed`` holds (agent ids (k,),
    changes (k, d)) per round. Nothing the agents compute changes.
    """

    def __init__(self, federation: Federation, **settings: Any) -> None:
        super().__init__(federation, **settings)
        self.observed: list[tuple[np.ndarray, np.ndarray]] = []

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> LocalUpdates:
        """The agents' updates, as :class:`LocalTransport` trains them; recorded."""
        received = super().local_updates(global_params, agent_ids, training)
        self.observed.append((np.asarray(received.agent_ids), np.asarray(received.updates, dtype=np.float64)))
        return received

    def private_local_models(self, helpers: np.ndarray, agent_ids: np.ndarray, training: Any) -> np.ndarray:
        """The clients' private models, as :class:`LocalTransport` trains them; their change recorded."""
        private = super().private_local_models(helpers, agent_ids, training)
        change = np.asarray(private, dtype=np.float64) - np.asarray(helpers, dtype=np.float64)
        self.observed.append((np.asarray(agent_ids), change))
        return private

    def client_accuracies(
        self, models: np.ndarray, agent_ids: np.ndarray, test: Any, **settings: Any
    ) -> np.ndarray:
        """Not computed (NaN, (m,)): a simulation diagnostic the server never receives; most of the time."""
        return np.full(np.asarray(agent_ids).shape[0], np.nan)


def canary_scores(
    observed: list[tuple[np.ndarray, np.ndarray]], canaries: RecordCanaries, inputs: int
) -> np.ndarray:
    """Each canary's Σ over observed rounds of Δ W[y⁺, k] − Δ W[y⁻, k] (its client's change), (m,).

    The logistic model's flat parameters are W (C, in) row-major, then b: W[y, k] is y·in + k.
    """
    scores = np.zeros(canaries.count)
    up = canaries.label_in * inputs + canaries.coordinate  # (m,) flat index of W[y⁺, k]
    down = canaries.label_out * inputs + canaries.coordinate
    for ids, changes in observed:
        row_of = {int(agent): row for row, agent in enumerate(ids)}
        for j in range(canaries.count):
            row = row_of.get(int(canaries.client[j]))
            if row is not None:
                scores[j] += changes[row, up[j]] - changes[row, down[j]]
    return scores


def check_logistic_layout(shape: tuple[int, ...], num_classes: int) -> int:
    """The input size ``in`` of :data:`AUDIT_MODEL` on ``shape``; refuses one not W (C, in), b (C,)."""
    from fedvote.models.zoo import build_model

    inputs = int(np.prod(shape))
    layers = [tuple(p.shape) for p in build_model(AUDIT_MODEL, shape, num_classes).parameters()]
    if layers != [(num_classes, inputs), (num_classes,)]:
        raise ConfigError("model", f"the {AUDIT_MODEL} model is not one linear layer W, b: {layers}")
    return inputs


@dataclass(frozen=True)
class TrainerAudit:
    """One run of a DP-SGD method on record canaries: each canary's score, the canaries, what ran."""

    scores: np.ndarray
    canaries: RecordCanaries
    description: str
    details: dict[str, Any]


def trainer_audit_scores(
    method: Any,
    federation: Federation,
    count: int,
    *,
    seed: int,
    noise_seed: int | None,
    progress: Progress = NO_PROGRESS,
) -> TrainerAudit:
    """Run ``method`` (DP-FedSGD or PriFedSync) once on ``count`` record canaries and score them.

    The method runs as planned (its σ, rates, steps, rounds, optimizer, input shift) with
    the logistic model, on canary clients of the real federation's smallest size n_min,
    through its own :meth:`run` on a :class:`RecordingTransport`.
    """
    from fedvote.methods.gradient import privacy_generator
    from fedvote.privacy.ledger import PrivacyLedger

    if getattr(method, "local_da", "none") != "none":
        raise ConfigError("local_da", "the trainer audit crafts canaries for the logistic model: use none")
    audited = dataclasses.replace(method, model=AUDIT_MODEL)
    shape = tuple(federation.example_shape)
    inputs = check_logistic_layout(shape, federation.num_classes)
    server = federation.server_data()
    shift = audited.input_shift(server)  # public: the canaries are crafted around it
    n_min = int(min(len(data) for data in federation.agents))
    coins = privacy_generator(noise_seed, 0xCA7B)
    canaries = draw_record_canaries(count, n_min, inputs, federation.num_classes, coins)
    transport = RecordingTransport(
        canary_federation(federation, canaries, shift, CANARY_SCALE), seed=seed, noise_seed=noise_seed
    )
    with single_threaded():  # small products: one thread is far faster on shared cores
        audited.run(server, transport, PrivacyLedger(), progress)  # charges a ledger of its own
    return TrainerAudit(
        scores=canary_scores(transport.observed, canaries, inputs),
        canaries=canaries,
        description=canaries.description(CANARY_SCALE),
        details={
            "code_under_audit": TRAINER,
            "model": AUDIT_MODEL,
            "planned_model": method.model,
            "canary_clients": canaries.clients,
            "records_per_client": n_min,
            "canary_scale": CANARY_SCALE,
            "rounds_observed": len(transport.observed),
            "sigma": float(method.sigma),
            "rounds": int(method.rounds),
        },
    )
