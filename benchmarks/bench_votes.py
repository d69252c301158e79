"""Benchmark: voting and accounting for Q queries from N = 100 agents.

Times, for Q in {1e3, 1e5} and C = 10 classes: the agents' one-hot votes as one
(N, Q, C) tensor plus each agent's own noise share and the sum (the LocalTransport
vote path), the noisy argmax, the data-independent ε (PLD and exact), and the
data-dependent GNMax ε over all queries. Synthetic teachers agree with probability
0.8. Prints a table and writes benchmarks/results/votes.json with the machine.

Run: ``python benchmarks/bench_votes.py`` (``make bench``).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
import torch

from fedvote.aggregation.voting import noise_share_std, noisy_argmax
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.data_dependent import data_dependent_epsilon
from fedvote.privacy.events import pate_fl_events

AGENTS, CLASSES, SIGMA, DELTA = 100, 10, 40.0, 1e-5


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def bench(queries: int, rng: np.random.Generator) -> dict:
    truth = rng.integers(0, CLASSES, queries)  # (Q,)
    agree = rng.random((AGENTS, queries)) < 0.8
    predictions = np.where(agree, truth, rng.integers(0, CLASSES, (AGENTS, queries)))  # (N, Q)
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(0).spawn(AGENTS)]

    def vote_sum() -> np.ndarray:
        one_hot = torch.nn.functional.one_hot(torch.from_numpy(predictions), CLASSES).numpy()  # (N, Q, C)
        std = noise_share_std(SIGMA, AGENTS)
        noisy = one_hot + np.stack([s.normal(0.0, std, (queries, CLASSES)) for s in streams])
        return noisy.sum(axis=0)  # (Q, C)

    sums, vote_s = timed(vote_sum)
    labels, argmax_s = timed(lambda: noisy_argmax(sums))
    event = pate_fl_events(SIGMA, queries).agent
    eps_pld, pld_s = timed(lambda: epsilon_for(event, DELTA, "pld"))
    eps_exact, exact_s = timed(lambda: epsilon_for(event, DELTA, "exact"))
    clean = np.stack([np.bincount(predictions[:, q], minlength=CLASSES) for q in range(queries)]) \
        if queries <= 1000 else np.apply_along_axis(np.bincount, 0, predictions, minlength=CLASSES).T
    dd, dd_s = timed(lambda: data_dependent_epsilon(clean, SIGMA, DELTA))
    return {
        "queries": queries,
        "agents": AGENTS,
        "classes": CLASSES,
        "sigma": SIGMA,
        "label_accuracy": float(np.mean(labels == truth)),
        "vote_sum_s": vote_s,
        "argmax_s": argmax_s,
        "epsilon_pld": eps_pld,
        "pld_s": pld_s,
        "epsilon_exact": eps_exact,
        "exact_s": exact_s,
        "epsilon_data_dependent": dd.epsilon,
        "data_dependent_s": dd_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    rng = np.random.default_rng(0)
    rows = [bench(q, rng) for q in (1_000, 100_000)]
    header = f"{'Q':>7} {'vote+noise s':>12} {'argmax s':>9} {'ε PLD':>8} {'PLD s':>7} {'ε exact':>8} {'ε data-dep':>10} {'dd s':>6} {'peak MB':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['queries']:>7} {r['vote_sum_s']:>12.3f} {r['argmax_s']:>9.4f} {r['epsilon_pld']:>8.3f} "
              f"{r['pld_s']:>7.3f} {r['epsilon_exact']:>8.3f} {r['epsilon_data_dependent']:>10.4f} "
              f"{r['data_dependent_s']:>6.2f} {r['peak_rss_mb']:>8.0f}")
    out = Path(__file__).resolve().parent / "results" / "votes.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "votes",
        "command": "python benchmarks/bench_votes.py",
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__},
        "results": rows,
    }, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
