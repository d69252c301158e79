"""CNN teachers on a GPU: the batched ensemble (both backward forms) against the per-agent loop.

N = 100 agents x 600 MNIST-sized records (1x28x28, synthetic), the zoo's ``cnn``, 5 epochs,
batch 32 (issue 21's CNN case). Times ``fit_ensemble`` on CUDA with the hand-written stacked
backward (``fedvote.models.stacked_conv``, the default) and with the grouped-convolution
autograd form, interleaved, two runs each (the first pays CUDA's start-up); and the per-agent
loop (``fit_classifier``, as ``Agent.train_teacher`` runs it) on the same machine's CPU for
a few agents, extrapolated to N. First it checks that the GPU trains what the CPU trains: a
small ensemble fitted on both, compared by parameters and by the votes it would cast.

Run on a machine with a GPU: ``python benchmarks/bench_cnn_gpu.py`` (writes
``benchmarks/results/cnn_gpu.json``). Without CUDA it says so and leaves that file as it is,
so ``make bench`` on a CPU machine keeps the last GPU figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "src"),
]

import fedvote.models.ensemble as ensemble  # noqa: E402
import fedvote.models.ensemble_kernels as ensemble_kernels  # noqa: E402
from benchmarks.common import write_results  # noqa: E402
from fedvote.models.training import TrainingConfig, fit_classifier  # noqa: E402
from fedvote.models.zoo import build_model  # noqa: E402


def _timed_ensemble(
    features: list[np.ndarray], labels: list[np.ndarray], config: TrainingConfig, form: str
) -> float:
    ensemble_kernels._CONV_BACKWARD = form
    torch.cuda.synchronize()
    start = time.perf_counter()
    ensemble.fit_ensemble(features, labels, config, list(range(len(features))), num_classes=10, device="cuda")
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _agreement_with_cpu(
    tf32: bool, agents: int = 8, records: int = 320, queries: int = 500
) -> dict[str, Any]:
    """Fit one small CNN ensemble on the CPU and on CUDA from the same seeds; how far apart they end.

    The GPU's kernels round differently (and with ``tf32``, PyTorch's default for cuDNN
    convolutions, multiply in 10-bit mantissas), and Adam's normalised steps amplify the
    difference on parameters whose gradients are near zero. The votes (each model's argmax on
    the same queries) are what the PATE mechanism releases, so their agreement is what matters.
    """
    defaults = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    rng = np.random.default_rng(1)
    centres = rng.random((10, 1, 28, 28), dtype=np.float32)  # (C, 1, 28, 28): learnable classes
    labels = [rng.integers(0, 10, records) for _ in range(agents)]
    features = [
        centres[y] + 0.3 * rng.standard_normal((records, 1, 28, 28), dtype=np.float32) for y in labels
    ]
    query_labels = rng.integers(0, 10, queries)
    query_x = centres[query_labels] + 0.3 * rng.standard_normal((queries, 1, 28, 28), dtype=np.float32)
    config = TrainingConfig(model="cnn", epochs=5, batch_size=32)
    fitted = {
        device: ensemble.fit_ensemble(
            features, labels, config, list(range(agents)), num_classes=10, device=device
        )
        for device in ["cpu", "cuda"]
    }
    difference = (fitted["cpu"].flat_params - fitted["cuda"].flat_params.cpu()).abs()  # (N, P)
    votes_cpu = fitted["cpu"].predict(query_x).cpu()  # (N, Q)
    votes_cuda = fitted["cuda"].predict(query_x).cpu()  # (N, Q)
    # PyTorch's settings as found, for the timings that follow
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = defaults
    return {
        "tf32": tf32,
        "median_abs_parameter_difference": float(difference.median()),
        "max_abs_parameter_difference": float(difference.max()),
        "max_parameter_magnitude": float(fitted["cpu"].flat_params.abs().max()),
        "vote_agreement": float((votes_cpu == votes_cuda).float().mean()),
        "cpu_vote_accuracy": float((votes_cpu == torch.from_numpy(query_labels)).float().mean()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--records", type=int, default=600)
    parser.add_argument("--loop-agents", type=int, default=5, help="agents timed in the CPU loop")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: benchmarks/results/cnn_gpu.json left as it is")
        return 0
    agreements = [_agreement_with_cpu(tf32) for tf32 in [True, False]]
    print(f"GPU against CPU: {agreements}")
    rng = np.random.default_rng(0)
    features = [rng.random((args.records, 1, 28, 28), dtype=np.float32) for _ in range(args.agents)]
    labels = [rng.integers(0, 10, args.records) for _ in range(args.agents)]
    config = TrainingConfig(model="cnn", epochs=5, batch_size=32)
    times: dict[str, list[float]] = {"manual": [], "autograd": []}
    for form in ["manual", "autograd", "manual", "autograd"]:
        times[form].append(_timed_ensemble(features, labels, config, form))
    start = time.perf_counter()
    for i in range(args.loop_agents):
        generator = torch.Generator().manual_seed(i)
        model = build_model("cnn", (1, 28, 28), 10, generator=generator)
        fit_classifier(model, features[i], labels[i], config, generator)
    loop = (time.perf_counter() - start) / args.loop_agents * args.agents
    best = {form: min(values) for form, values in times.items()}
    rows = [
        {"variant": "batched, stacked manual backward (default)", "device": "cuda", "seconds": best["manual"],
         "runs": times["manual"]},
        {"variant": "batched, grouped-conv autograd", "device": "cuda", "seconds": best["autograd"],
         "runs": times["autograd"]},
        {"variant": f"per-agent loop (extrapolated from {args.loop_agents})", "device": "cpu", "seconds": loop},
    ]  # fmt: skip
    summary = [
        f"cnn, N = {args.agents} x {args.records}, 5 epochs, batch 32: batched {best['manual']:.2f} s on the GPU "
        f"(autograd form {best['autograd']:.2f} s), per-agent loop on the host CPU {loop:.1f} s: "
        f"{loop / best['manual']:.0f}x",
        *(
            f"GPU against CPU, TF32 {'on (PyTorch default for convolutions)' if a['tf32'] else 'off'} "
            f"(8 agents x 320 records, 5 epochs, the same seeds): votes agree on {a['vote_agreement']:.2%} of 500 "
            f"queries (CPU votes {a['cpu_vote_accuracy']:.2%} correct); parameter difference median "
            f"{a['median_abs_parameter_difference']:.1e}, largest {a['max_abs_parameter_difference']:.1e} "
            f"(largest parameter {a['max_parameter_magnitude']:.2f})"
            for a in agreements
        ),
    ]
    columns = [{"key": "variant", "label": "variant"}, {"key": "device", "label": "device"},
               {"key": "seconds", "label": "seconds", "format": ".2f"}]  # fmt: skip
    write_results(
        "cnn_gpu",
        title="CNN teachers on a GPU (issue 21, item 3)",
        rows=rows,
        columns=columns,
        summary=summary,
        notes="Fastest of two interleaved runs per form (the first pays CUDA's start-up); synthetic records. "
        "The loop runs on the GPU machine's own CPU cores, torch's default threads.",
        path=args.out,
    )
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
