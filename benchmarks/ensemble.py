"""One teacher-training case: batched ensemble vs per-agent loop vs one centralised model.

For N agents x n records each, E epochs, batch B (issue 7):

* batched -- ``fedvote.models.ensemble.fit_ensemble``: all N teachers in one vectorised loop;
* loop    -- ``build_model`` + ``fit_classifier`` for one agent after another (what
  ``LocalTransport(batched=False)`` does), on the CPU. Beyond ``--loop-max-agents`` agents only
  the first ones are timed and the total is extrapolated linearly (``loop_extrapolated``):
  every agent does the same work;
* limit   -- one model of the same architecture trained on the union of the N datasets with
  batch N x B for E epochs: as many examples and optimizer steps per epoch as the ensemble,
  with a single set of weights (the cost the issue aims at), on the CPU.

The three are interleaved ``--repeats`` times and the fastest run of each is kept (the
machine may be shared). Peak memory is the process's resident set (``VmHWM``, reset before
each variant) and, on a GPU, the CUDA allocator's peak; ``*_extra_mb`` is the part above what
the process held before that variant (the agents' data itself is held throughout).

Models: ``mlp-small`` (digits-sized MLP 64 -> 32 -> 10), ``mlp-mnist`` (784 -> 128 -> 10),
``cnn`` (the zoo's small CNN on 1x28x28). Data: Gaussian class clusters of those shapes
(``synthetic``) or MNIST training images (``mnist``, from $FEDVOTE_DATA or
../shared/datasets), shuffled and dealt out iid.

Run from the repository root::

    python -m benchmarks.ensemble --agents 100 --records 600 --model mlp-small --epochs 5 --json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Measure, default_data_dir, measured, print_table
from fedvote.models.ensemble import fit_ensemble
from fedvote.models.training import TrainingConfig, fit_classifier
from fedvote.models.zoo import build_model

NUM_CLASSES = 10


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

COLUMNS = [
    {"key": "data", "label": "data"},
    {"key": "model", "label": "model"},
    {"key": "agents", "label": "N"},
    {"key": "records", "label": "n"},
    {"key": "epochs", "label": "E"},
    {"key": "batched_s", "label": "batched s", "format": ".3f"},
    {"key": "loop_s", "label": "loop s", "format": ".3f"},
    {"key": "limit_s", "label": "limit s", "format": ".3f"},
    {"key": "speedup_vs_loop", "label": "loop/batched", "format": ".1f"},
    {"key": "batched_over_limit", "label": "batched/limit", "format": ".2f"},
    {"key": "batched_peak_mb", "label": "batched peak MB", "format": ".0f"},
    {"key": "batched_extra_mb", "label": "batched +MB", "format": ".0f"},
    {"key": "loop_extra_mb", "label": "loop +MB", "format": ".0f"},
    {"key": "limit_extra_mb", "label": "limit +MB", "format": ".0f"},
    {"key": "loop_extrapolated", "label": "loop extrap."},
    {"key": "threads", "label": "threads"},
    {"key": "device", "label": "device"},
]


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
    """MNIST training images (60000, 1, 28, 28) in [0, 1] and labels, if the data is there."""
    root = default_data_dir()
    if root is None:
        return None
    images, labels = root / "mnist" / "train-images-idx3-ubyte.gz", root / "mnist" / "train-labels-idx1-ubyte.gz"
    if not (images.exists() and labels.exists()):
        return None
    x = (_read_idx(images).astype(np.float32) / 255.0)[:, None, :, :]
    return x, _read_idx(labels).astype(np.int64)


def make_union(data: str, spec: ModelSpec, total: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``total`` records of the model's shape; None where MNIST is absent or too small."""
    if data == "synthetic":
        return synthetic_union(total, spec.example_shape, seed)
    if spec.example_shape != (1, 28, 28):
        return None
    mnist = mnist_train()
    if mnist is None or total > mnist[0].shape[0]:
        return None
    order = np.random.default_rng(seed).permutation(mnist[0].shape[0])[:total]
    return mnist[0][order], mnist[1][order]


def run_batched(features, labels, config, spec, device) -> Measure:
    with measured(device) as m:
        ensemble = fit_ensemble(
            features, labels, config, list(range(len(features))),
            num_classes=NUM_CLASSES, hidden=spec.hidden, device=device,
        )  # fmt: skip
        del ensemble
    return m


def run_loop(features, labels, config, spec, max_agents: int) -> tuple[Measure, int]:
    """The per-agent loop over the first k agents, its time scaled to all N; and k."""
    k = min(len(features), max_agents)
    with measured() as m:
        for i in range(k):
            generator = torch.Generator().manual_seed(i)
            model = build_model(
                spec.zoo_name, spec.example_shape, NUM_CLASSES, hidden=spec.hidden, generator=generator
            )
            fit_classifier(model, features[i], labels[i], config, generator)
    m.seconds *= len(features) / k
    return m, k


def run_limit(x_union, y_union, config, spec, num_agents: int) -> Measure:
    union_config = TrainingConfig(
        model=config.model,
        epochs=config.epochs,
        batch_size=config.batch_size * num_agents,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
    )
    with measured() as m:
        generator = torch.Generator().manual_seed(0)
        model = build_model(spec.zoo_name, spec.example_shape, NUM_CLASSES, hidden=spec.hidden, generator=generator)
        fit_classifier(model, x_union, y_union, union_config, generator)
    return m


def warm_up(spec: ModelSpec, device: str) -> None:
    """Pay one-off costs (lazy imports, kernel selection) outside the timings."""
    x, y = synthetic_union(64, spec.example_shape, seed=1)
    config = TrainingConfig(model=spec.zoo_name, epochs=1, batch_size=16)
    run_batched([x[:32], x[32:]], [y[:32], y[32:]], config, spec, device)
    run_loop([x], [y], config, spec, 1)


def run_case(
    *,
    model: str,
    agents: int,
    records: int,
    epochs: int,
    batch_size: int = 32,
    data: str = "synthetic",
    repeats: int = 1,
    loop_max_agents: int = 100,
    device: str | None = None,
    variants: tuple[str, ...] = ("batched", "loop", "limit"),
) -> dict[str, Any] | None:
    """Time one case; None where its data is unavailable (MNIST absent or too small)."""
    spec = MODELS[model]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    union = make_union(data, spec, agents * records, seed=agents)
    if union is None:
        return None
    x_union, y_union = union  # (N * n, *shape), (N * n,)
    features = np.split(x_union, agents)  # views, no copy
    labels = np.split(y_union, agents)
    config = TrainingConfig(model=spec.zoo_name, epochs=epochs, batch_size=batch_size)
    warm_up(spec, device)
    best: dict[str, Measure] = {}
    loop_timed = 0
    for _ in range(max(1, repeats)):  # interleaved, so that load on the machine hits all three
        runs: dict[str, Measure] = {}
        if "batched" in variants:
            runs["batched"] = run_batched(features, labels, config, spec, device)
        if "loop" in variants:
            runs["loop"], loop_timed = run_loop(features, labels, config, spec, loop_max_agents)
        if "limit" in variants:
            runs["limit"] = run_limit(x_union, y_union, config, spec, agents)
        for name, m in runs.items():
            if name not in best or m.seconds < best[name].seconds:
                best[name] = m
    row: dict[str, Any] = {
        "data": data,
        "model": model,
        "agents": agents,
        "records": records,
        "epochs": epochs,
        "batch_size": batch_size,
        "repeats": repeats,
        "device": device,
        "threads": torch.get_num_threads(),
        "loop_device": "cpu",
        "limit_device": "cpu",
    }
    for name, m in best.items():
        row[f"{name}_s"] = round(m.seconds, 4)
        row[f"{name}_peak_mb"] = round(m.peak_mb, 1)
        row[f"{name}_extra_mb"] = round(m.extra_mb, 1)
        if m.cuda_peak_mb is not None:
            row[f"{name}_cuda_peak_mb"] = round(m.cuda_peak_mb, 1)
    if "loop" in best:
        row["loop_agents_timed"] = loop_timed
        row["loop_extrapolated"] = loop_timed < agents
    if "batched" in best and "loop" in best:
        row["speedup_vs_loop"] = round(best["loop"].seconds / best["batched"].seconds, 2)
    if "batched" in best and "limit" in best:
        row["batched_over_limit"] = round(best["batched"].seconds / best["limit"].seconds, 2)
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=100, help="N agents")
    parser.add_argument("--records", type=int, default=600, help="n records per agent")
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp-small")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data", choices=["synthetic", "mnist"], default="synthetic")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats; the best of each is kept")
    parser.add_argument("--loop-max-agents", type=int, default=100, help="agents timed in the loop (then extrapolated)")
    parser.add_argument("--variants", default="batched,loop,limit", help="which of batched,loop,limit to run")
    parser.add_argument("--device", default=None, help="device of the batched ensemble (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads for all variants (default: torch's)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    row = run_case(
        model=args.model,
        agents=args.agents,
        records=args.records,
        epochs=args.epochs,
        batch_size=args.batch_size,
        data=args.data,
        repeats=args.repeats,
        loop_max_agents=args.loop_max_agents,
        device=args.device,
        variants=tuple(v for v in args.variants.split(",") if v),
    )
    if row is None:
        message = f"no {args.data} data for {args.model} with {args.agents} x {args.records} records"
        if args.json:
            print(json.dumps({"skipped": message}))
        else:
            print(message)
        return 0
    if args.json:
        print(json.dumps(row))
    else:
        print_table([row], [c for c in COLUMNS if c["key"] in row])
    return 0


if __name__ == "__main__":
    sys.exit(main())
