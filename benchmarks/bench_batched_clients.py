"""Batched sampled clients vs the per-agent loop: FedAvg, DP-FedAvg, DP-FedSGD (issue 21, item 2).

For each case, one federation is built and ``fedvote.runner.run`` runs the method twice per
repeat on it — with :class:`~fedvote.transport.local.LocalTransport`'s batched clients (the
default) and with its per-agent loop (``batched=False``) — interleaved, with the same seeds
and noise seed, so both release the same model up to float32 rounding (the accuracies
printed should agree). Reported: the method's seconds per round (``timings.method_s`` over
T; no calibration, σ is given), the median over the repeats, and loop / batched.

Cases: DP-FedAvg on the digits defaults (50 agents, q = 0.05, E = 20, MLP 64-128-10,
distributed noise) and on MNIST (100 agents x 600, MLP 784-128-10, q = 0.05); FedAvg on
MNIST; DP-FedSGD on digits (q = 1: all 50 agents every round, logistic for small agents)
and on MNIST (q = 1, E = 1, MLP); and the MNIST cases again on the ``dirichlet`` partition
(β = 0.5: 76 to 1,406 records an agent, so DP-SGD's Poisson batches differ in size and are
padded). Padding is measured apart: one DP-FedSGD round of all 100 Dirichlet agents as one
padded computation against the size groups LocalTransport uses. Last, whole default digits
runs (T = 100) of DP-FedAvg and DP-FedSGD, each in a fresh process, start-up costs included. The load
average is recorded before and after: the machine may be shared.

Run: ``python benchmarks/bench_batched_clients.py`` (``make bench``); ``--quick`` for fewer
rounds and repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import default_data_dir, print_table, write_results
from fedvote.agents.agent import Agent
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.partition import PartitionSpec
from fedvote.models.local_training import DpSgdSpec, LocalTraining, flat_parameters
from fedvote.models.zoo import build_model
from fedvote.runner import make_federation, run
from fedvote.transport.batched_clients import (
    GROUP_RATIO,
    BatchedUpdates,
    StackedRecords,
    expected_batch,
    size_groups,
)
from fedvote.transport.local import LocalTransport

COLUMNS = [
    {"key": "case", "label": "case"},
    {"key": "method", "label": "method"},
    {"key": "data", "label": "data"},
    {"key": "agents", "label": "N"},
    {"key": "partition", "label": "partition"},
    {"key": "mean_sampled", "label": "agents/round", "format": ".1f"},
    {"key": "local_steps", "label": "E"},
    {"key": "rounds", "label": "T timed"},
    {"key": "batched_s_per_round", "label": "batched s/round", "format": ".4f"},
    {"key": "loop_s_per_round", "label": "loop s/round", "format": ".4f"},
    {"key": "speedup", "label": "loop/batched", "format": ".1f"},
    {"key": "batched_clients_s", "label": "clients batched s/round", "format": ".4f"},
    {"key": "loop_clients_s", "label": "clients loop s/round", "format": ".4f"},
    {"key": "clients_speedup", "label": "clients loop/batched", "format": ".1f"},
    {"key": "stack_s", "label": "stack s (once)", "format": ".2f"},
    {"key": "batched_accuracy", "label": "acc batched", "format": ".4f"},
    {"key": "loop_accuracy", "label": "acc loop", "format": ".4f"},
]


class TimedTransport(LocalTransport):
    """A LocalTransport that adds up the seconds of the clients' side of every round.

    ``local_updates`` and ``secure_update_sum``: θ down, the sampled agents' training and
    releases (and, with distributed noise, every other agent's noise share) — what batching
    changes; the server's side (sampling, the ledger's charge, aggregation) is the rest of
    the round.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client_seconds = 0.0

    @contextmanager
    def _clock(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.client_seconds += time.perf_counter() - start

    def local_updates(self, global_params: Any, agent_ids: Any, training: Any) -> Any:
        with self._clock():
            return super().local_updates(global_params, agent_ids, training)

    def secure_update_sum(self, global_params: Any, agent_ids: Any, training: Any) -> Any:
        with self._clock():
            return super().secure_update_sum(global_params, agent_ids, training)


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark case: a method on a federation, T rounds, σ given (no calibration)."""

    name: str
    method: str
    dataset: str
    agents: int
    rounds: int
    sigma: float
    partition: str = "iid"
    options: tuple[tuple[str, Any], ...] = ()


CASES = [
    Case("dp-fedavg digits defaults", "dp-fedavg", "digits", 50, 20, 0.767),
    Case("dp-fedavg mnist", "dp-fedavg", "mnist", 100, 5, 0.767),
    Case("dp-fedavg mnist server noise", "dp-fedavg", "mnist", 100, 5, 0.767, options=(("noise", "server"),)),
    Case("fedavg mnist", "fedavg", "mnist", 100, 5, 0.0),
    Case("dp-fedsgd digits defaults", "dp-fedsgd", "digits", 50, 10, 1.0),
    Case("dp-fedsgd mnist", "dp-fedsgd", "mnist", 100, 2, 1.0),
    Case("dp-fedavg mnist dirichlet", "dp-fedavg", "mnist", 100, 5, 0.767, "dirichlet"),
    # the smallest agent's 76 records would pick the logistic model (docs/defaults.md): keep the MLP
    Case("dp-fedsgd mnist dirichlet", "dp-fedsgd", "mnist", 100, 2, 1.0, "dirichlet", (("gradient_model", "mlp"),)),
]


def config_for(case: Case, data_dir: Path | None, rounds: int) -> RunConfig:
    federation = FederationConfig(
        dataset=case.dataset,
        data_dir=str(data_dir) if data_dir is not None and case.dataset == "mnist" else None,
        agents=case.agents,
        partition=PartitionSpec(case.partition),
    )
    return RunConfig(
        method=case.method,
        federation=federation,
        privacy=PrivacyConfig(sigma=case.sigma, noise_seed=1),
        options={"rounds": rounds, **dict(case.options)},
    )


def time_case(case: Case, data_dir: Path | None, repeats: int, rounds: int) -> dict[str, Any]:
    """Batched and loop, interleaved ``repeats`` times on one federation: seconds per round and accuracy.

    Each variant's transport is made once and warmed by a one-round run (imports, and the
    batched clients' one-time stacking of every agent's records, timed apart as ``stack_s``),
    then every timed run reuses it, as the rounds of one long run would.
    """
    config = config_for(case, data_dir, rounds)
    federation = make_federation(config)
    start = time.perf_counter()
    StackedRecords(federation.agents, torch.device("cpu"))  # what the batched transport builds once per run
    stack_s = time.perf_counter() - start
    transports = {
        batched: TimedTransport(federation, seed=config.seed, noise_seed=1, batched=batched) for batched in (True, False)
    }
    for transport in transports.values():
        run(config_for(case, data_dir, 1), federation=federation, transport=transport)  # warm-up, untimed
    seconds: dict[bool, list[float]] = {True: [], False: []}
    clients: dict[bool, list[float]] = {True: [], False: []}
    accuracy: dict[bool, float] = {}
    details: dict[str, Any] = {}
    for _ in range(repeats):
        for batched, transport in transports.items():
            transport.client_seconds = 0.0
            result = run(config, federation=federation, transport=transport)
            seconds[batched].append(result.timings["method_s"] / rounds)
            clients[batched].append(transport.client_seconds / rounds)
            accuracy[batched] = result.accuracy
            details = result.details
    batched_s, loop_s = statistics.median(seconds[True]), statistics.median(seconds[False])
    batched_c, loop_c = statistics.median(clients[True]), statistics.median(clients[False])
    sampled = float(details.get("mean_sampled_agents", 0.0))
    local_steps = details.get("local_steps_per_round")
    return {
        "case": case.name,
        "method": case.method,
        "data": case.dataset,
        "agents": case.agents,
        "partition": case.partition,
        "mean_sampled": sampled,
        "local_steps": local_steps,
        "rounds": rounds,
        "batched_s_per_round": batched_s,
        "loop_s_per_round": loop_s,
        "speedup": loop_s / batched_s,
        "batched_clients_s": batched_c,
        "loop_clients_s": loop_c,
        "clients_speedup": loop_c / batched_c,
        "batched_accuracy": accuracy[True],
        "loop_accuracy": accuracy[False],
        "stack_s": stack_s,
        "batched_s_all": seconds[True],
        "loop_s_all": seconds[False],
    }


PADDING_COLUMNS = [
    {"key": "grouping", "label": "batched clients"},
    {"key": "groups", "label": "groups"},
    {"key": "padded_rows", "label": "rows computed / rows drawn (expected)", "format": ".2f"},
    {"key": "seconds", "label": "s per round", "format": ".4f"},
]


def padding_rows(data_dir: Path, repeats: int) -> list[dict[str, Any]]:
    """DP-FedSGD's round on MNIST Dirichlet(0.5), all 100 agents: one padded computation vs size groups.

    :class:`~fedvote.transport.batched_clients.BatchedUpdates` directly, one round's
    training (E = 1, q_b = 0.25, MLP) of every agent from one θ, interleaved repeats, median.
    Rows computed / drawn: Σ over groups of (agents × the largest expected batch) over Σ q_b·nᵢ.
    """
    case = next(c for c in CASES if c.name == "dp-fedsgd mnist dirichlet")
    federation = make_federation(config_for(case, data_dir, 1))
    records = StackedRecords(federation.agents, torch.device("cpu"))
    training = LocalTraining(model="mlp", steps=1, learning_rate=1.0,
                             dp_sgd=DpSgdSpec(sampling_rate=0.25, noise_multiplier=1.0, max_grad_norm=1.0))
    theta = flat_parameters(build_model("mlp", federation.example_shape, federation.num_classes))
    agents = [
        Agent(agent_id=i, data=data, public_features=federation.public.features, num_classes=federation.num_classes,
              noise_rng=np.random.default_rng(i), seed=i)
        for i, data in enumerate(federation.agents)
    ]
    expected = [expected_batch(agent.num_records, training) for agent in agents]
    variants = {"one padded computation": math.inf, f"size groups (ratio {GROUP_RATIO:g})": GROUP_RATIO}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as LocalTransport runs them
    try:
        for _ in range(repeats + 1):  # the first round of each warms up, untimed
            for name, ratio in variants.items():
                clients = BatchedUpdates(records, federation.example_shape, federation.num_classes, group_ratio=ratio)
                start = time.perf_counter()
                clients.updates(agents, theta, training)
                seconds[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    rows = []
    for name, ratio in variants.items():
        groups = size_groups(expected, ratio)
        computed = sum(len(group) * max(expected[j] for j in group) for group in groups)
        rows.append({"grouping": name, "groups": len(groups), "padded_rows": computed / sum(expected),
                     "seconds": statistics.median(seconds[name][1:])})
    return rows


WHOLE_RUN = """
import json, sys
from fedvote.config import PrivacyConfig, RunConfig
from fedvote.runner import make_federation, run
from fedvote.transport.local import LocalTransport
config = RunConfig(method=sys.argv[1], privacy=PrivacyConfig(sigma=float(sys.argv[2]), noise_seed=1))
federation = make_federation(config)
transport = LocalTransport(federation, seed=config.seed, noise_seed=1, batched=sys.argv[3] == "batched")
result = run(config, federation=federation, transport=transport)
print(json.dumps({"method_s": result.timings["method_s"], "accuracy": result.accuracy}))
"""


def whole_runs(repeats: int) -> list[str]:
    """A default digits run (T = 100) of DP-FedAvg and DP-FedSGD, each in a fresh process: method seconds.

    What ``fedvote run --method dp-fedavg --sigma 0.767`` spends in the method, start-up costs
    of either path included (the loop's first ``torch.optim`` and Opacus use), median of
    interleaved repeats.
    """
    lines = []
    for method, sigma in (("dp-fedavg", 0.767), ("dp-fedsgd", 1.0)):
        seconds: dict[str, list[float]] = {"batched": [], "loop": []}
        for _ in range(repeats):
            for variant in seconds:
                done = subprocess.run([sys.executable, "-c", WHOLE_RUN, method, str(sigma), variant],
                                      capture_output=True, text=True, check=True)
                seconds[variant].append(json.loads(done.stdout.strip().splitlines()[-1])["method_s"])
        batched, loop = statistics.median(seconds["batched"]), statistics.median(seconds["loop"])
        lines.append(f"whole default digits run of {method} (T = 100, σ {sigma}), fresh process: method "
                     f"{batched:.2f} s batched, {loop:.2f} s loop ({loop / batched:.1f}x)")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per variant (median)")
    parser.add_argument("--quick", action="store_true", help="1 repeat, at most 2 rounds per case")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args(argv)
    data_dir = default_data_dir()
    wanted = {name.strip() for name in args.cases.split(",") if name.strip()}
    load_before = os.getloadavg()
    rows = []
    for case in CASES:
        if wanted and case.name not in wanted:
            continue
        if case.dataset == "mnist" and (data_dir is None or not (data_dir / "mnist").is_dir()):
            print(f"skipped {case.name}: MNIST not found (set FEDVOTE_DATA or put it in ../shared/datasets/mnist)")
            continue
        rounds = min(case.rounds, 2) if args.quick else case.rounds
        row = time_case(case, data_dir, 1 if args.quick else args.repeats, rounds)
        print(f"{case.name}: batched {row['batched_s_per_round']:.4f} s/round, loop {row['loop_s_per_round']:.4f}, "
              f"{row['speedup']:.1f}x; clients {row['clients_speedup']:.1f}x", flush=True)
        rows.append(row)
    whole = whole_runs(1 if args.quick else args.repeats) if not wanted or "whole" in wanted else []
    padding: list[dict[str, Any]] = []
    if data_dir is not None and (data_dir / "mnist").is_dir() and (not wanted or "padding" in wanted):
        padding = padding_rows(data_dir, 1 if args.quick else args.repeats)
        print_table(padding, PADDING_COLUMNS)
    load_after = os.getloadavg()
    print_table(rows, COLUMNS)
    load = f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (1-minute; the machine is shared)"
    summary = [
        f"{row['case']} ({row['mean_sampled']:.1f} agents a round): batched {row['batched_s_per_round']:.4f} s per "
        f"round, loop {row['loop_s_per_round']:.4f} s: {row['speedup']:.1f}x (the clients' side alone: "
        f"{row['batched_clients_s']:.4f} s vs {row['loop_clients_s']:.4f} s, {row['clients_speedup']:.1f}x)"
        for row in rows
    ] + [
        f"padding, DP-FedSGD round of all 100 MNIST Dirichlet(0.5) agents: {row['grouping']}, {row['groups']} "
        f"group(s), {row['padded_rows']:.2f}x the drawn rows computed, {row['seconds']:.4f} s"
        for row in padding
    ] + whole + [load]
    out = write_results(
        "batched_clients",
        title="Batched sampled clients vs the per-agent loop: FedAvg, DP-FedAvg, DP-FedSGD",
        rows=rows,
        columns=COLUMNS,
        notes=(
            "seconds per round: fedvote.runner.run's timings.method_s over the T rounds timed (σ given: no "
            "calibration), median of interleaved repeats; clients: the transport's local_updates / "
            "secure_update_sum alone (θ down, training, releases, noise shares), the rest of a round being the "
            "server's sampling, ledger charge and aggregation; stack: stacking every agent's records once per "
            "run (batched only); both variants run the same seeds and noise seed "
            "(equal models up to float32 rounding, tests/transport/test_batched_clients.py). DP-FedAvg's "
            "distributed noise: every one of the N agents draws its d-float noise share each round, in both "
            "variants. dirichlet: record counts differ across agents (76 to 1,406 on MNIST; batches padded). "
            f"OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS', 'unset')}; {load}."
        ),
        summary=summary,
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
