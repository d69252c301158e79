"""Teacher training: batched ensemble vs per-agent loop vs one centralised model (the limit).

For N agents x n records each, E epochs, batch B (issue 7):

* batched  -- ``fedvote.models.ensemble.fit_ensemble``: all N teachers in one vectorised loop;
* loop     -- ``build_model`` + ``fit_classifier`` for one agent after another (what
  ``LocalTransport(batched=False)`` does). For large N only the first ``--loop-max-agents``
  agents are timed and the total is extrapolated linearly (marked ``*`` in the table and
  ``loop_extrapolated`` in the JSON): every agent does the same work, so this is exact up to noise;
* limit    -- one model of the same architecture trained on the union of the N datasets with
  batch N x B for E epochs: the same number of examples and optimizer steps per epoch as
  the ensemble, with a single set of weights.

Models: ``mlp-small`` (digits-sized MLP 64 -> 32 -> 10), ``mlp-mnist`` (784 -> 128 -> 10),
``cnn`` (the zoo's small CNN on 1x28x28). Data: Gaussian class clusters of those shapes
(synthetic), and MNIST from ``$FEDVOTE_DATA/mnist`` when present (iid split, only where the
60k training images cover N x n records).

Run: ``python benchmarks/bench_teachers.py`` (``make bench``); ``--help`` for options.
Writes ``benchmarks/results/teachers.json`` with the machine it ran on.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedvote.models.ensemble import fit_ensemble
from fedvote.models.training import TrainingConfig, fit_classifier
from fedvote.models.zoo import build_model

NUM_CLASSES = 10
RESULTS = Path(__file__).resolve().parent / "results" / "teachers.json"


@dataclass(frozen=True)
class ModelSpec:
    zoo_name: str
    example_shape: tuple[int, ...]
    hidden: int


MODELS = {
    "mlp-small": ModelSpec("mlp", (1, 8, 8), 32),
    "mlp-mnist": ModelSpec("mlp", (1, 28, 28), 128),
    "cnn": ModelSpec("cnn", (1, 28, 28), 128),
}


def synthetic_union(total: int, shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian class clusters: x = centre[y] + noise, (total, *shape) float32 and (total,) int64."""
    rng = np.random.default_rng(seed)
    dim = int(np.prod(shape))
    centres = rng.normal(size=(NUM_CLASSES, dim)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=total).astype(np.int64)
    features = rng.standard_normal(size=(total, dim), dtype=np.float32)  # (total, dim)
    features *= 2.0
    features += centres[labels]
    return features.reshape(total, *shape), labels


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mnist_train() -> tuple[np.ndarray, np.ndarray] | None:
    """MNIST training images (60000, 1, 28, 28) in [0, 1] and labels, if $FEDVOTE_DATA has them."""
    root = os.environ.get("FEDVOTE_DATA")
    if not root:
        return None
    folder = Path(root) / "mnist"
    images, labels = folder / "train-images-idx3-ubyte.gz", folder / "train-labels-idx1-ubyte.gz"
    if not (images.exists() and labels.exists()):
        return None
    x = (_read_idx(images).astype(np.float32) / 255.0)[:, None, :, :]
    return x, _read_idx(labels).astype(np.int64)


def time_batched(features, labels, config, spec, device) -> float:
    seeds = list(range(len(features)))
    start = time.perf_counter()
    ensemble = fit_ensemble(
        features, labels, config, seeds, num_classes=NUM_CLASSES, hidden=spec.hidden, device=device
    )
    if ensemble.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def time_loop(features, labels, config, spec, max_agents: int) -> tuple[float, int]:
    """Seconds for the per-agent loop over all agents (extrapolated from the first k); k."""
    k = min(len(features), max_agents)
    start = time.perf_counter()
    for i in range(k):
        generator = torch.Generator().manual_seed(i)
        model = build_model(
            spec.zoo_name, spec.example_shape, NUM_CLASSES, hidden=spec.hidden, generator=generator
        )
        fit_classifier(model, features[i], labels[i], config, generator)
    return (time.perf_counter() - start) * len(features) / k, k


def time_limit(x_union, y_union, config, spec, num_agents: int) -> float:
    union_config = TrainingConfig(
        model=config.model,
        epochs=config.epochs,
        batch_size=config.batch_size * num_agents,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
    )
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(0)
    model = build_model(
        spec.zoo_name, spec.example_shape, NUM_CLASSES, hidden=spec.hidden, generator=generator
    )
    fit_classifier(model, x_union, y_union, union_config, generator)
    return time.perf_counter() - start


def warm_up(spec: ModelSpec, device: str) -> None:
    """Pay one-off costs (lazy imports, kernel selection) outside the timings."""
    x, y = synthetic_union(64, spec.example_shape, seed=1)
    config = TrainingConfig(model=spec.zoo_name, epochs=1, batch_size=16)
    time_batched([x[:32], x[32:]], [y[:32], y[32:]], config, spec, device)
    time_loop([x], [y], config, spec, 1)


def run_case(data_name, model_name, num_agents, records, epochs, args, union) -> dict:
    spec = MODELS[model_name]
    x_union, y_union = union  # (N * n, *shape), (N * n,)
    features = np.split(x_union, num_agents)  # views, no copy
    labels = np.split(y_union, num_agents)
    config = TrainingConfig(model=spec.zoo_name, epochs=epochs, batch_size=args.batch_size)
    batched_s = min(time_batched(features, labels, config, spec, args.device) for _ in range(args.repeats))
    loop_s, timed = min(
        (time_loop(features, labels, config, spec, args.loop_max_agents) for _ in range(args.repeats)),
        key=lambda pair: pair[0],
    )
    limit_s = min(time_limit(x_union, y_union, config, spec, num_agents) for _ in range(args.repeats))
    return {
        "data": data_name,
        "model": model_name,
        "agents": num_agents,
        "records": records,
        "epochs": epochs,
        "batch_size": args.batch_size,
        "batched_s": round(batched_s, 4),
        "loop_s": round(loop_s, 4),
        "limit_s": round(limit_s, 4),
        "loop_agents_timed": timed,
        "loop_extrapolated": timed < num_agents,
        "speedup_vs_loop": round(loop_s / batched_s, 2),
        "batched_over_limit": round(batched_s / limit_s, 2),
        "device": args.device,
    }


def machine() -> dict:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpus_available": affinity,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    return info


def print_table(rows: list[dict], *, header_only: bool = False, body_only: bool = False) -> None:
    header = (
        f"{'data':<10}{'model':<11}{'N':>5}{'n':>5}{'E':>3}  {'batched s':>10}{'loop s':>11}"
        f"{'limit s':>9}  {'loop/batched':>12}{'batched/limit':>14}"
    )
    if not body_only:
        print(header)
        print("-" * len(header))
    if header_only:
        return
    for r in rows:
        mark = "*" if r["loop_extrapolated"] else " "
        print(
            f"{r['data']:<10}{r['model']:<11}{r['agents']:>5}{r['records']:>5}{r['epochs']:>3}  "
            f"{r['batched_s']:>10.2f}{r['loop_s']:>10.2f}{mark}{r['limit_s']:>9.2f}  "
            f"{r['speedup_vs_loop']:>11.1f}x{r['batched_over_limit']:>13.2f}x"
        )
    if not body_only and any(r["loop_extrapolated"] for r in rows):
        print("* loop time extrapolated linearly from the first --loop-max-agents agents")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", default="10,100,800", help="comma-separated N values")
    parser.add_argument("--records", type=int, default=600, help="records per agent")
    parser.add_argument("--models", default="mlp-small,mlp-mnist,cnn", help=f"from {', '.join(MODELS)}")
    parser.add_argument("--epochs", type=int, default=5, help="epochs for the MLPs")
    parser.add_argument("--cnn-epochs", type=int, default=1, help="epochs for the CNN (compute-bound)")
    parser.add_argument("--cnn-max-agents", type=int, default=100, help="largest N for the CNN (800 CNNs take tens of minutes on 2 CPU cores)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--loop-max-agents", type=int, default=20, help="agents timed in the loop")
    parser.add_argument("--repeats", type=int, default=1, help="best of this many timings")
    parser.add_argument("--device", default="cpu", help="device of the batched ensemble")
    parser.add_argument("--no-mnist", action="store_true", help="skip MNIST even if present")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    agent_counts = [int(a) for a in args.agents.split(",")]
    model_names = args.models.split(",")
    for name in model_names:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    mnist = None if args.no_mnist else mnist_train()
    rows: list[dict] = []
    print_table([], header_only=True)
    for model_name in model_names:
        spec = MODELS[model_name]
        epochs = args.cnn_epochs if model_name == "cnn" else args.epochs
        warm_up(spec, args.device)
        for num_agents in agent_counts:
            if model_name == "cnn" and num_agents > args.cnn_max_agents:
                continue
            total = num_agents * args.records
            union = synthetic_union(total, spec.example_shape, seed=num_agents)
            rows.append(run_case("synthetic", model_name, num_agents, args.records, epochs, args, union))
            print_table(rows[-1:], body_only=True)
            del union
            if mnist is not None and spec.example_shape == (1, 28, 28) and total <= mnist[0].shape[0]:
                order = np.random.default_rng(num_agents).permutation(mnist[0].shape[0])[:total]
                union = (mnist[0][order], mnist[1][order])
                rows.append(run_case("mnist", model_name, num_agents, args.records, epochs, args, union))
                print_table(rows[-1:], body_only=True)
                del union
    print()
    print_table(rows)
    report = {
        "benchmark": "teachers",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "notes": (
            "loop_s is extrapolated linearly from loop_agents_timed agents where loop_extrapolated; "
            "limit_s trains one model on the union with batch agents x batch_size"
        ),
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
