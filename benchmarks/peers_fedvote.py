"""fedvote's side of benchmarks/bench_peers.py: one job, in its own process, as ``fedvote run`` runs it.

``python benchmarks/peers_fedvote.py JOB.npz [--threads K] [--noise distributed]`` reads only the
job's settings from the file (the data it rebuilds itself, as ``fedvote run`` does; the file
was built from the same federation) and prints one line ``RESULT {json}``.

* ``dp-fedavg``: :func:`fedvote.runner.run` on the job's config (``fedvote run --method
  dp-fedavg --sigma σ --noise server …``): data, T rounds through LocalTransport's batched
  clients, evaluation. ``job_s`` is that whole call; ``method_s`` its T rounds.
* ``vote``: the voting step through LocalTransport, as PATE-FL's run does it: the
  federation, ``train_teachers`` (the batched MLP ensemble), one ``vote_sum`` of the Q
  queries with each agent's noise share σ/√N, the argmax. ``job_s`` is all of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import default_data_dir  # noqa: E402
from benchmarks.peers_jobs import FedAvgJob, VoteJob, job_from_settings, load, run_config  # noqa: E402
from fedvote.runner import make_federation, run  # noqa: E402
from fedvote.transport.local import LocalTransport  # noqa: E402


def vote_job(job: VoteJob, settings: dict[str, object], arrays: dict[str, np.ndarray]) -> dict[str, object]:
    """Teachers, one noisy vote sum of the Q queries, the argmax: timed as one block."""
    from fedvote.models.config import TrainingConfig

    start = time.perf_counter()
    config = run_config(job, default_data_dir())
    federation = make_federation(config)
    data_s = time.perf_counter() - start
    transport = LocalTransport(federation, seed=job.seed, noise_seed=job.noise_seed)
    teacher = TrainingConfig(**settings["teacher"])  # type: ignore[arg-type]
    transport.train_teachers(teacher)
    released = transport.vote_sum(arrays["query_indices"], float(settings["noise_share_std"]),  # type: ignore[arg-type]
                                  min_responders=job.agents)
    assert released is not None
    labels = np.argmax(released.sums, axis=1)  # (Q,)
    job_s = time.perf_counter() - start
    return {"job_s": job_s, "data_s": data_s, "accuracy": float(np.mean(labels == arrays["query_y"]))}


def fedavg_job(job: FedAvgJob, noise: str) -> dict[str, object]:
    """``fedvote run --method dp-fedavg`` with the job's settings."""
    import dataclasses

    config = run_config(job, default_data_dir())
    if noise != "server":
        config = dataclasses.replace(config, options={**config.options, "noise": noise})
    start = time.perf_counter()
    result = run(config)
    job_s = time.perf_counter() - start
    return {
        "job_s": job_s,
        "data_s": result.timings["data_s"],
        "method_s": result.timings["method_s"],
        "evaluation_s": result.timings["evaluation_s"],
        "accounting_s": result.timings["accounting_s"],  # the ledger's ε, part of evaluation_s
        "accuracy": float(result.accuracy),
        "epsilon": float(result.privacy.agent.epsilon),
        "epsilon_source": f"fedvote's ledger (agent level, PLD, δ = {config.privacy.delta:g})",
        "mean_sampled": float(result.details.get("mean_sampled_agents", float("nan"))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("job", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--noise-seed", type=int, default=None, help="override the job's noise seed")
    parser.add_argument("--noise", default="server", help="DP-FedAvg noise placement (server: as the peers)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings, arrays = load(args.job)
    if args.noise_seed is not None:
        settings["noise_seed"] = args.noise_seed
    job = job_from_settings(settings)
    import_s = time.perf_counter() - STARTED
    if isinstance(job, VoteJob):
        result = vote_job(job, settings, arrays)
    else:
        result = fedavg_job(job, args.noise)
    result.update(import_s=import_s, torch=torch.__version__, threads=torch.get_num_threads())
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
