"""pfl-research's side of benchmarks/bench_peers.py: DP-FedAvg in Apple's pfl simulator.

Runs in its own interpreter, ``.venv-peers`` (``make bench-peers-env``: torch==2.13.0 and
``pfl[pytorch]``), and imports neither fedvote nor the other benchmark modules: it reads
the job file :func:`benchmarks.peers_jobs.export` wrote (the same partition, test set, θ⁰
and settings fedvote uses) and prints ``RESULT {json}``.

``python benchmarks/peers_pfl.py JOB.npz [--threads K]`` (a ``dp-fedavg`` job only; the
voting job is not run in pfl: its training loop aggregates model statistics, see below).

The job as pfl expresses it (pfl 0.6):

* ``FederatedAveraging`` over a ``FederatedDataset`` of the N agents, a ``PyTorchModel``
  (the same MLP, loaded with θ⁰; local optimiser plain SGD, central optimiser SGD with
  step 1, so θ moves by the averaged update), ``SimulatedBackend`` in process.
* Central DP: ``CentrallyAppliedPrivacyMechanism(GaussianMechanism)`` built from pfl's
  ``PLDPrivacyAccountant`` (T compositions, sampling probability q, noise parameter σ, δ):
  each update clipped to S, N(0, σ²S²) added to the sum. The ε reported is that
  accountant's.
* Poisson sampling: the cohort size is a ``HyperParam`` drawn Binomial(N, q) every
  iteration, and the user sampler draws without repeats within a cohort (pfl's
  ``minimize_reuse``), i.e. a uniform subset of that size — Poisson sampling's law. A round
  that draws no agent still adds the noise (:class:`FixedDenominatorFedAvg`).
* The fixed denominator q·N (fedvote's, McMahan et al. 2018) instead of pfl's division by
  the cohort's weight: :class:`FixedDenominatorFedAvg` sets the summed statistics' weight
  to q·N before ``average()``.
* E local steps exactly as fedvote takes them: each time a user is sampled its dataset is
  the E mini-batches of min(B, n) rows that fedvote's ``minibatch_rows`` would draw
  (shuffled passes, reshuffled when a pass runs out), walked once by pfl's own SGD bridge.
* Step size η·decayᵗ: a ``HyperParam`` that is also a callback, advanced after every
  central iteration.

The voting job is not expressed in pfl: pfl's algorithms train a model by aggregating
model statistics from local SGD; a one-shot vote histogram on public queries would need a
custom ``FederatedAlgorithm``, model and statistics (and pfl's own DP mechanisms clip and
noise the whole statistics vector, not a vote), i.e. rewriting the job outside pfl's API.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import HyperParam, NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.internal.bridge import FrameworkBridgeFactory as bridges  # noqa: E402
from pfl.metrics import Metrics  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism, PLDPrivacyAccountant  # noqa: E402


class Mlp(torch.nn.Module):
    """fedvote's ``mlp``: Flatten, Linear(in, 128), ReLU, Linear(128, C), with pfl's loss and metrics."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 128):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_features, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:  # noqa: A002
        self.eval() if eval else self.train()
        return torch.nn.functional.cross_entropy(self(x), y)

    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict[str, Any]:  # noqa: A002
        from pfl.metrics import Weighted

        self.eval()
        with torch.no_grad():
            correct = (self(x).argmax(dim=1) == y).sum().item()
        return {"accuracy": Weighted(correct, len(y))}


class DecayingRate(HyperParam, TrainingProcessCallback):
    """η·decayᵗ at central iteration t (pfl's pattern: a hyperparameter that is also a callback)."""

    def __init__(self, rate: float, decay: float):
        self._rate, self._decay, self._t = rate, decay, 0

    def value(self) -> float:
        return self._rate * self._decay**self._t

    def after_central_iteration(self, aggregate_metrics: Any, model: Any, *, central_iteration: int) -> Any:
        self._t = central_iteration + 1
        return False, Metrics()


class PoissonCohortSize(HyperParam):
    """Binomial(N, q) every time pfl asks for the iteration's cohort size (once per iteration)."""

    def __init__(self, agents: int, rate: float, rng: np.random.Generator):
        self._agents, self._rate, self._rng = agents, rate, rng
        self.drawn: list[int] = []

    def value(self) -> int:
        size = int(self._rng.binomial(self._agents, self._rate))
        self.drawn.append(size)
        return size


class FixedDenominatorFedAvg(FederatedAveraging):
    """pfl's FedAvg with the fixed denominator q·N and per-user batch min(B, n)."""

    def __init__(self, denominator: float, batch_size: int, noise_std: float):
        super().__init__()
        self._denominator, self._batch_size, self._noise_std = denominator, batch_size, noise_std

    def train_one_user(self, initial_model_state: Any, model: Any, user_dataset: Any, central_context: Any) -> Any:
        params = central_context.model_train_params
        batch = min(self._batch_size, int(user_dataset.metadata["records"]))
        bridges.sgd_bridge().do_sgd(model, user_dataset, params.static_clone(local_batch_size=batch))
        return model.get_model_difference(initial_model_state), Metrics()

    def process_aggregated_statistics(self, central_context: Any, aggregate_metrics: Any, model: Any,
                                      statistics: Any) -> Any:
        statistics.weight = self._denominator  # Σ clipped updates + N(0, σ²S²), over q·N
        statistics.average()
        return model.apply_model_update(statistics)

    def process_aggregated_statistics_from_all_contexts(self, stats_context_pairs: Any, aggregate_metrics: Any,
                                                        model: Any) -> Any:
        if all(stats is None for _, stats in stats_context_pairs):  # no agent sampled: the noise alone
            model_, metrics = self._noise_only_step(model)
            return model_, metrics
        return super().process_aggregated_statistics_from_all_contexts(stats_context_pairs, aggregate_metrics, model)

    def _noise_only_step(self, model: Any) -> Any:
        from pfl.stats import MappedVectorStatistics

        noise = MappedVectorStatistics(
            {name: torch.randn(v.shape) * self._noise_std for name, v in model.variable_map.items()},
            weight=self._denominator)
        noise.average()
        return model.apply_model_update(noise)


class EmptyCohortBackend(SimulatedBackend):
    """pfl's in-process backend, except that a cohort of 0 users returns no statistics.

    pfl 0.6's ``SimulatedBackend`` fails on an empty cohort (``MetricsZero | Metrics``);
    Poisson sampling at q·N = 2.5 draws one in about 8 % of rounds. The algorithm then
    takes the noise-only step (:meth:`FixedDenominatorFedAvg._noise_only_step`).
    """

    async def async_gather_results(self, model: Any, training_algorithm: Any, *, central_context: Any) -> Any:
        if central_context.cohort_size == 0:
            return None, Metrics()
        return await super().async_gather_results(model, training_algorithm, central_context=central_context)


def minibatch_rows(n: int, steps: int, batch: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of ``steps`` mini-batches of ``batch`` records, (steps·batch,): fedvote's passes."""
    order, position, rows = rng.permutation(n), 0, []
    for _ in range(steps):
        if position + batch > n:
            order, position = rng.permutation(n), 0
        rows.append(order[position:position + batch])
        position += batch
    return np.concatenate(rows)


def run(path: Path, noise_seed: int | None = None) -> dict[str, Any]:
    with np.load(path) as data:
        settings = json.loads(str(data["settings"]))
        arrays = {k: data[k] for k in data.files if k != "settings"}
    if noise_seed is not None:
        settings["noise_seed"] = noise_seed
    if settings["kind"] != "dp-fedavg":
        raise SystemExit("pfl: only the dp-fedavg job (see the module docstring)")
    setup = time.perf_counter()
    n, q, steps = settings["agents"], settings["sampling_rate"], settings["local_steps"]
    offsets, x, y = arrays["agent_offsets"], torch.as_tensor(arrays["agent_x"]), torch.as_tensor(arrays["agent_y"])
    rng = np.random.default_rng([settings["noise_seed"], 0x9F1])
    torch.manual_seed(settings["noise_seed"])  # pfl draws its Gaussian noise from torch

    def make_dataset(user: int) -> Dataset:
        start, stop = int(offsets[user]), int(offsets[user + 1])
        batch = min(settings["batch_size"], stop - start)
        rows = torch.as_tensor(start + minibatch_rows(stop - start, steps, batch, rng))  # (E·b,)
        return Dataset(raw_data=[x[rows], y[rows]], user_id=str(user), metadata={"records": stop - start})

    users = list(range(n))
    training = FederatedDataset(make_dataset, get_user_sampler("minimize_reuse", users))
    accounting = time.perf_counter()
    accountant = PLDPrivacyAccountant(num_compositions=settings["rounds"], sampling_probability=q,
                                      mechanism="gaussian", delta=settings["delta"], noise_parameter=settings["sigma"])
    accounting_s = time.perf_counter() - accounting
    mechanism = GaussianMechanism.from_privacy_accountant(accountant, settings["clip_norm"])
    backend = EmptyCohortBackend(training_data=training, val_data=None,
                               postprocessors=[CentrallyAppliedPrivacyMechanism(mechanism)])
    module = Mlp(math.prod(settings["example_shape"]), settings["num_classes"])
    torch.nn.utils.vector_to_parameters(torch.as_tensor(arrays["theta0"]), module.parameters())
    model = PyTorchModel(module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0))
    rate = DecayingRate(settings["learning_rate"], settings["lr_decay"])
    cohort = PoissonCohortSize(n, q, rng)
    algorithm = FixedDenominatorFedAvg(q * n, settings["batch_size"],
                                       settings["sigma"] * settings["clip_norm"])
    params = NNAlgorithmParams(central_num_iterations=settings["rounds"], evaluation_frequency=settings["rounds"] + 1,
                               train_cohort_size=cohort, val_cohort_size=0)
    train_params = NNTrainHyperParams(local_batch_size=settings["batch_size"], local_num_epochs=1,
                                      local_learning_rate=rate)
    setup_s = time.perf_counter() - setup
    start = time.perf_counter()
    algorithm.run(params, backend, model, train_params, NNEvalHyperParams(local_batch_size=None),
                  callbacks=[rate], send_metrics_to_platform=False)
    with torch.no_grad():
        predicted = module(torch.as_tensor(arrays["test_x"])).argmax(dim=1).numpy()
    job_s = time.perf_counter() - start
    return {
        "job_s": job_s,
        "setup_s": setup_s,
        "accounting_s": accounting_s,
        "accuracy": float(np.mean(predicted == arrays["test_y"])),
        "epsilon": float(accountant.epsilon),
        "epsilon_source": f"pfl PLDPrivacyAccountant (q = {q:g}, T = {settings['rounds']}, σ = {settings['sigma']:g}, "
                          f"δ = {settings['delta']:g})",
        "noise_std": float(settings["sigma"] * settings["clip_norm"]),
        "relative_noise_stddev": float(mechanism.relative_noise_stddev),
        "mean_sampled": float(np.mean(cohort.drawn)) if cohort.drawn else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("job", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--noise-seed", type=int, default=None, help="override the job's noise seed")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import_s = time.perf_counter() - STARTED
    result = run(args.job, args.noise_seed)
    import pfl.version

    result.update(import_s=import_s, pfl=getattr(pfl.version, "__version__", "?"), torch=torch.__version__,
                  threads=torch.get_num_threads())
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
