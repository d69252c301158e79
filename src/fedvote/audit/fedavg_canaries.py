"""The one-run audit of DP-FedAvg through its own run: client sampling, local training, noise, sum.

Steinke, Nasr & Jagielski (2023), "Privacy auditing with one (1) training run": m canaries,
each in one of two states by a fair coin, one run, each canary scored from what the
adversary of the claim sees, the bound of their Theorem 5.2
(:func:`fedvote.audit.one_run.audit_guesses`). As for DP-FedSGD and PriFedSync
(:mod:`fedvote.audit.trainer_canaries`) the canaries are **records** and the run is the
method's own :meth:`~fedvote.methods.base.Method.run` on a
:class:`~fedvote.transport.local.LocalTransport`: its Poisson client sampling, each
sampled client's E local SGD steps in the batched clients
(:class:`~fedvote.transport.batched_clients.BatchedUpdates`), the clip to S and the noise
share at the agents' one exit (:func:`fedvote.agents.local_updates.release_update`), the
non-sampled agents' shares (:meth:`Agent.noise_share`), the transport's secure update sum
(with ``--secure-sum`` its pairwise masks) or the server's noise
(:meth:`DpFedAvg.aggregate`). A DP-FedAvg whose clients or shares add no noise is caught
(issue 42, defect 5).

**The canaries.** One canary per client (DP-FedAvg's clip S bounds a whole client's update:
canaries sharing a client would share it). Canary j's client holds one record
x_j = μ + s·e_{k_j} (μ the public input shift the method subtracts) with label y⁺_j
(instance level: y⁻_j when its coin says "out", replace-one; agent level: the client holds
no record when "out", zero-out — its update is then 0 and it sends its noise share alone).
With the logistic model the record's gradient touches column k_j of W and the biases only,
along e_y − p: its clipped update raises W[y, k_j] and lowers the other rows of column
k_j. The server sees the **sum** (distributed noise), so canaries must not cancel in it:
canary j takes coordinate k_j = j mod in and the label pair (2p, 2p+1), p = ⌊j/in⌋, in a
random order — canaries on one column move disjoint pairs of rows, and a canary of another
pair moves both rows of this one by about the same −p_c (uniform predictions: equally).
So m ≤ in·⌊C/2⌋ (320 on digits).

**The score** of canary j in round t is y_tj = (v[y⁺, k] − v[y⁻, k])/√2 of what the
adversary of the claim sees: ``distributed`` the secure sum's total (the server's view),
``server`` q·N·(θ_{t+1} − θ_t) (an observer of the models), ``distributed-unmasked`` canary
j's own received update in the rounds it was sampled (the server sees who was). Summed
over the rounds as the log-likelihood ratio of a Poisson-subsampled Gaussian
(:func:`~fedvote.audit.distinguishers.subsampled_gaussian_scores`) or, unmasked, of the
Gaussian of its own updates (:func:`~fedvote.audit.distinguishers.visible_gaussian_scores`),
with the mean shift :data:`SHIFT_FRACTION`·S. Any score gives a valid bound; these are
the most powerful ones for the shift assumed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from fedvote.audit.distinguishers import subsampled_gaussian_scores, visible_gaussian_scores
from fedvote.audit.trainer_canaries import (
    AUDIT_MODEL,
    CANARY_SCALE,
    RecordCanaries,
    RecordingTransport,
    TrainerAudit,
    check_logistic_layout,
)
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models.local_training import LocalTraining
from fedvote.models.threads import single_threaded
from fedvote.progress import NO_PROGRESS, Progress

# What each noise mode's audit executes (result ``details.code_under_audit``, the audit table's column).
CODE_UNDER_AUDIT: dict[str, str] = {
    "distributed": "the method's own run: client sampling, local training, the agents' noise shares "
    "and the secure update sum, on record canaries",
    "server": "the method's own run: client sampling, local training, the clip and the server's "
    "noise (aggregate), on record canaries",
    "distributed-unmasked": "the method's own run: client sampling, local training and the agents' "
    "noise shares on the updates the server receives, on record canaries",
}

# The canary's expected mean on its score direction, in units of S, with uniform predictions
# p = 1/C (C = 10): its column carries s/√(s²+1) of the clipped norm, and (e_y − p)/‖e_y − p‖
# projects onto (e_{y⁺} − e_{y⁻})/√2 by 1/(√2·√(1 − 1/C)). Only the power depends on it.
SHIFT_FRACTION = CANARY_SCALE / math.sqrt(CANARY_SCALE**2 + 1) / math.sqrt(2 * 0.9)


def draw_fedavg_canaries(
    count: int, inputs: int, num_classes: int, rng: np.random.Generator
) -> RecordCanaries:
    """``count`` canaries, one a client: coordinate j mod in, label pair (2p, 2p+1) randomly ordered, coin."""
    pairs = num_classes // 2
    if pairs < 1:
        raise ConfigError("dataset", "a record canary needs two labels: at least 2 classes")
    if count > inputs * pairs:
        raise ConfigError(
            "trials",
            f"at most {inputs * pairs} DP-FedAvg canaries (one input coordinate and label pair each) "
            f"fit {inputs} inputs and {num_classes} classes, got {count}",
        )
    index = np.arange(count)
    low = 2 * (index // inputs)
    swap = rng.random(count) < 0.5
    return RecordCanaries(
        client=index,
        coordinate=index % inputs,
        label_in=np.where(swap, low + 1, low),
        label_out=np.where(swap, low, low + 1),
        included=rng.random(count) < 0.5,
        records_per_client=1,
        clients=count,
    )


def fedavg_canary_federation(
    federation: Federation, canaries: RecordCanaries, level: str, shift: tuple[float, ...] | None
) -> Federation:
    """``federation`` with one client per canary (public pool and test set kept).

    Client j: the record μ + s·e_{k_j}, labelled by the coin (instance), or — agent level,
    coin "out" — no record at all.
    """
    shape = tuple(federation.example_shape)
    inputs = int(np.prod(shape))
    mu = np.zeros(inputs) if shift is None else np.asarray(shift, dtype=np.float64)
    labels = canaries.labels()
    agents = []
    for j in range(canaries.count):
        if level == "agent" and not canaries.included[j]:
            agents.append(LabeledData(np.zeros((0, *shape), dtype=np.float32), np.zeros(0, dtype=np.int64)))
            continue
        record = mu.copy()
        record[canaries.coordinate[j]] += CANARY_SCALE
        features = record.astype(np.float32).reshape((1, *shape))
        agents.append(LabeledData(features, labels[j : j + 1].astype(np.int64)))
    return dataclasses.replace(federation, agents=tuple(agents), agent_domains=())


class SumRecordingTransport(RecordingTransport):
    """:class:`RecordingTransport` that also keeps each round's θ sent down and each secure sum's total.

    ``thetas``: θ_t of every round (every mode sends it down, m_t = 0 included); ``sums``:
    the totals the server received from :meth:`secure_update_sum` (distributed noise).
    """

    def __init__(self, federation: Federation, **settings: Any) -> None:
        super().__init__(federation, **settings)
        self.thetas: list[np.ndarray] = []
        self.sums: list[np.ndarray] = []

    def local_updates(self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining) -> Any:
        """The sampled agents' updates (recorded as the server received them); θ_t recorded."""
        self.thetas.append(np.asarray(global_params, dtype=np.float64).copy())
        return super().local_updates(global_params, agent_ids, training)

    def secure_update_sum(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> np.ndarray:
        """The secure sum of every agent's release, as :class:`LocalTransport` computes it; recorded."""
        self.thetas.append(np.asarray(global_params, dtype=np.float64).copy())
        total = super().secure_update_sum(global_params, agent_ids, training)
        self.sums.append(np.asarray(total, dtype=np.float64).copy())
        return total


def _projections(vectors: np.ndarray, canaries: RecordCanaries, inputs: int) -> np.ndarray:
    """(v[y⁺, k] − v[y⁻, k])/√2 of each row of ``vectors`` (R, d) for each canary, (R, m)."""
    up = canaries.label_in * inputs + canaries.coordinate
    down = canaries.label_out * inputs + canaries.coordinate
    return (vectors[:, up] - vectors[:, down]) / math.sqrt(2.0)


def fedavg_trainer_audit(
    method: Any,
    federation: Federation,
    level: str,
    count: int,
    *,
    seed: int,
    noise_seed: int | None,
    secure_sum: bool = False,
    secure_noise: bool = False,
    progress: Progress = NO_PROGRESS,
) -> TrainerAudit:
    """Run DP-FedAvg (``method``, any noise mode) once on ``count`` canary clients and score them.

    The method runs as planned (σ, q, S, T, E, learning rate, input shift, t) with the
    logistic model on N = m canary clients through its own :meth:`run`; the claim it is held
    to is the planned run's (its N, for the unmasked mode's no-sampling-credit events).
    ``secure_sum``/``secure_noise``: the transport as ``--secure-sum``/``--secure-noise`` builds it
    (pairwise masks; CSPRNG-seeded shares and server noise, unseedable).
    """
    from fedvote.methods.gradient import privacy_generator
    from fedvote.models.local_training import flat_parameters
    from fedvote.privacy.ledger import PrivacyLedger

    if getattr(method, "local_da", "none") != "none":
        raise ConfigError("local_da", "the trainer audit crafts canaries for the logistic model: use none")
    if method.noise == "distributed" and method.responders(count) > count:  # shares σS/√t from < t agents
        raise ConfigError("trials", f"{count} canary agents are fewer than t = {method.min_responders}")
    planned_agents = method.num_agents
    unmasked = method.noise == "distributed-unmasked"
    if unmasked and planned_agents is not None:
        _check_unmasked_rounds(count, float(method.sampling_rate), planned_agents)
    agents = count if unmasked else method.num_agents  # the unmasked run checks N against the transport
    audited = dataclasses.replace(method, model=AUDIT_MODEL, num_agents=agents)
    shape = tuple(federation.example_shape)
    inputs = check_logistic_layout(shape, federation.num_classes)
    server = federation.server_data()
    shift = audited.input_shift(server)  # public: the canaries are crafted around it
    coins = privacy_generator(noise_seed, 0xCA7F)
    canaries = draw_fedavg_canaries(count, inputs, federation.num_classes, coins)
    transport = SumRecordingTransport(
        fedavg_canary_federation(federation, canaries, level, shift),
        seed=seed,
        noise_seed=noise_seed,
        secure_sum=secure_sum,
        secure_noise=secure_noise,
    )
    with single_threaded():  # small products: one thread is far faster on shared cores
        outcome = audited.run(server, transport, PrivacyLedger(), progress)  # charges a ledger of its own
    clip, sigma, rate = float(method.clip_norm), float(method.sigma), float(method.sampling_rate)
    shift_size = SHIFT_FRACTION * clip
    antipodal = level == "instance"
    if unmasked:
        own, sampled, stds = _unmasked_view(transport.observed, canaries, inputs, planned_agents, clip, sigma)
        scores = visible_gaussian_scores(own, sampled, stds, shift=shift_size, antipodal=antipodal)
    else:
        if method.noise == "distributed":
            received = np.stack(transport.sums)  # (T, d): the server's whole view
            noise_std = sigma * clip * math.sqrt(count / method.responders(count))
        else:  # server: an observer of the models, q·N·(θ_{t+1} − θ_t)
            thetas = np.stack([*transport.thetas, flat_parameters(outcome.student).astype(np.float64)])
            received = np.diff(thetas, axis=0) * rate * count
            noise_std = sigma * clip
        scores = subsampled_gaussian_scores(
            _projections(received, canaries, inputs), shift=shift_size, noise_std=noise_std, rate=rate,
            antipodal=antipodal,
        )  # fmt: skip
    return TrainerAudit(
        scores=scores,
        canaries=canaries,
        description=_description(canaries, level),
        details={
            "code_under_audit": CODE_UNDER_AUDIT[method.noise],
            "noise": method.noise,
            "model": AUDIT_MODEL,
            "planned_model": method.model,
            "canary_clients": count,
            "canary_scale": CANARY_SCALE,
            "secure_sum": bool(secure_sum),
            "noise_source": "csprng-gaussian" if secure_noise else "pcg64",
            "rounds": int(method.rounds),
            "rounds_observed": len(transport.thetas),
            "sampling_rate": rate,
            "clip_norm": clip,
            "sigma": sigma,
        },
    )


def _check_unmasked_rounds(count: int, rate: float, planned_agents: int) -> None:
    """Refuse, before the run, canaries whose rounds would sample more than the planned N (6 sd above q·m).

    The unmasked events assume m_t ≤ N; a round beyond it is refused after the run otherwise.
    """
    expected = rate * count
    if expected + 6.0 * math.sqrt(expected * (1.0 - rate)) > planned_agents:
        raise ConfigError(
            "trials",
            f"{count} canaries at q = {rate:g} can sample more than the planned N = {planned_agents} "
            "in a round (the unmasked events assume at most N): fewer trials, more --agents or a smaller "
            "--sampling-rate",
        )


def _unmasked_view(
    observed: list[tuple[np.ndarray, np.ndarray]],
    canaries: RecordCanaries,
    inputs: int,
    planned_agents: int | None,
    clip: float,
    sigma: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each canary's own received update on its direction (R, m), who was sampled (R, m), the shares (R,).

    The share is σS/√m_t, as the method drew it; the events assume m_t ≤ N (the planned N):
    a round with more sampled canaries is refused.
    """
    rounds, m = len(observed), canaries.count
    own, sampled, stds = np.zeros((rounds, m)), np.zeros((rounds, m), dtype=bool), np.zeros(rounds)
    for t, (ids, updates) in enumerate(observed):
        if planned_agents is not None and ids.shape[0] > planned_agents:
            problem = f"{ids.shape[0]} canaries sampled in one round exceed N = {planned_agents}"
            raise ConfigError("trials", problem)
        if ids.shape[0] == 0:
            continue
        stds[t] = sigma * clip / math.sqrt(ids.shape[0])
        sampled[t, ids] = True
        own[t, ids] = _projections(updates, canaries, inputs)[np.arange(ids.shape[0]), ids]
    return own, sampled, stds


def _description(canaries: RecordCanaries, level: str) -> str:
    """What a canary is, for the audit table."""
    coin = (
        "its client holds it or no record by a fair coin (zero-out)"
        if level == "agent"
        else "label y⁺ or y⁻ by a fair coin (replace-one)"
    )
    return (
        f"{canaries.count} canary clients of one record x = μ + {CANARY_SCALE:g}·e_k (one input coordinate "
        f"and label pair each), {coin}, trained by the method's own run"
    )
