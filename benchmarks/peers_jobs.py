"""The jobs of benchmarks/bench_peers.py, and the one data file every framework reads.

A job is built once by fedvote (its federation: the same partition, test set, public
queries and initial model θ⁰ that ``fedvote run`` would use) and written to one ``.npz``
with the job's settings as JSON. The Flower and pfl workers read only that file, so the
three frameworks train on the same records from the same θ⁰ with the same settings; the
pfl worker runs in its own interpreter (``.venv-peers``) and imports neither fedvote nor
this module.

Two kinds of job:

* ``vote``: the PATE voting step (voting paper, Algorithm 1, lines 1-4): every agent
  trains its teacher (fedvote's default MLP, Adam, 40 epochs) on its private records and
  releases one-hot votes on the Q public queries plus its Gaussian noise share
  N(0, σ²/N); the server sums the N releases and takes the argmax. Reported: the accuracy of
  the Q noisy-argmax labels against the queries' true labels.
* ``dp-fedavg``: DP-FedAvg as fedvote runs it (Geyer et al. 2017; McMahan et al. 2018's
  fixed denominator): T rounds; each agent sampled with probability q; a sampled agent
  runs E SGD steps (batch B, step size η·decayᵗ) from θ_t and clips its update to S; the
  server adds N(0, σ²S²) to the sum, divides by q·N and moves θ. Reported: test accuracy
  of θ_T and each framework's ε at δ.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

VOTE_QUERIES = 100  # fedvote run's default Q on digits
VOTE_EPSILON = 4.0  # fedvote run's default agent-level ε: σ of the vote job is calibrated to it
DELTA = 1e-3  # fedvote's default δ


@dataclass(frozen=True)
class VoteJob:
    """The PATE voting step on ``dataset`` with ``agents`` teachers and ``queries`` public queries."""

    dataset: str
    agents: int
    queries: int = VOTE_QUERIES
    teacher_model: str = "mlp"
    seed: int = 0
    noise_seed: int = 1

    @property
    def name(self) -> str:
        return f"vote {self.dataset} N={self.agents}"

    kind = "vote"


@dataclass(frozen=True)
class FedAvgJob:
    """DP-FedAvg: T rounds, sampling rate q, E local SGD steps, clip S, noise multiplier σ."""

    dataset: str
    agents: int
    rounds: int = 100
    sampling_rate: float = 0.05
    local_steps: int = 20
    batch_size: int = 32
    learning_rate: float = 0.1
    lr_decay: float = 0.99
    clip_norm: float = 0.08
    sigma: float = 0.767  # fedvote's calibration for agent-level ε = 4 at q = 0.05, T = 100, δ = 1e-3
    model: str = "mlp"
    seed: int = 0
    noise_seed: int = 1

    @property
    def name(self) -> str:
        return f"dp-fedavg {self.dataset} N={self.agents} T={self.rounds}"

    kind = "dp-fedavg"


Job = VoteJob | FedAvgJob


def run_config(job: Job, data_dir: Path | None) -> Any:
    """fedvote's RunConfig of ``job``, built as ``fedvote run``'s flags build it."""
    from fedvote.runner import build_config

    common: dict[str, Any] = {"dataset": job.dataset, "agents": job.agents, "seed": job.seed,
                              "noise_seed": job.noise_seed}
    if job.dataset != "digits":
        common["data_dir"] = str(data_dir) if data_dir is not None else None
    if isinstance(job, VoteJob):
        return build_config("pate-fl", epsilon=VOTE_EPSILON, queries=job.queries,
                            teacher_model=job.teacher_model, **common)
    return build_config(
        "dp-fedavg", sigma=job.sigma, noise="server", rounds=job.rounds, sampling_rate=job.sampling_rate,
        local_steps=job.local_steps, batch_size=job.batch_size, learning_rate=job.learning_rate,
        lr_decay=job.lr_decay, clip_norm=job.clip_norm, gradient_model=job.model, **common,
    )


def export(job: Job, data_dir: Path | None, path: Path) -> dict[str, Any]:
    """Build ``job``'s federation with fedvote and write it, with its settings, to ``path`` (.npz)."""
    import torch

    from fedvote.aggregation.voting import noise_share_std
    from fedvote.models.local_training import flat_parameters
    from fedvote.models.zoo import build_model
    from fedvote.runner import make_federation, plan
    from fedvote.transport.base import agent_training_seeds

    config = run_config(job, data_dir)
    federation = make_federation(config)
    settings: dict[str, Any] = {"kind": job.kind, "name": job.name, **asdict(job), "delta": DELTA,
                                "num_classes": federation.num_classes,
                                "example_shape": list(federation.example_shape)}
    sizes = [int(a.labels.shape[0]) for a in federation.agents]
    arrays: dict[str, np.ndarray] = {
        "agent_x": np.concatenate([a.features for a in federation.agents]).astype(np.float32),  # (Σnᵢ, *shape)
        "agent_y": np.concatenate([a.labels for a in federation.agents]).astype(np.int64),  # (Σnᵢ,)
        "agent_offsets": np.cumsum([0, *sizes]).astype(np.int64),  # (N+1,)
        "test_x": federation.test.features.astype(np.float32),
        "test_y": federation.test.labels.astype(np.int64),
    }
    if isinstance(job, VoteJob):
        method = plan(config, federation.public_metadata())
        sigma = float(method.sigma)
        queries = np.random.default_rng(job.seed).permutation(federation.public.labels.shape[0])[: job.queries]
        arrays["query_indices"] = queries.astype(np.int64)  # (Q,) into the public pool
        arrays["query_x"] = federation.public.features[queries].astype(np.float32)  # (Q, *shape)
        arrays["query_y"] = federation.public.labels[queries].astype(np.int64)  # (Q,)
        arrays["training_seeds"] = np.array(agent_training_seeds(job.seed, job.agents), dtype=np.int64)
        teacher = method.teacher
        settings.update(sigma=sigma, noise_share_std=float(noise_share_std(sigma, job.agents)), teacher=asdict(teacher))
    else:
        generator = torch.Generator().manual_seed(job.seed)  # θ⁰ as GradientMethod.initial_model draws it
        model = build_model(job.model, federation.example_shape, federation.num_classes, generator=generator)
        arrays["theta0"] = flat_parameters(model)  # (d,) float32
    settings["agent_sizes"] = sizes
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, settings=np.array(json.dumps(settings)), **arrays)  # type: ignore[arg-type]
    return settings


def job_from_settings(settings: dict[str, Any]) -> Job:
    """The job whose :func:`export` wrote ``settings``."""
    kind = VoteJob if settings["kind"] == "vote" else FedAvgJob
    fields = {f for f in kind.__dataclass_fields__}
    return kind(**{k: v for k, v in settings.items() if k in fields})


def load(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The settings and arrays :func:`export` wrote (the workers' copy of this is in peers_pfl.py)."""
    with np.load(path) as data:
        settings = json.loads(str(data["settings"]))
        arrays = {k: data[k] for k in data.files if k != "settings"}
    return settings, arrays
