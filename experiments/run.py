"""Run the paper-reproduction experiments and write docs/results.md.

Usage (from the repository root, with the datasets of ../shared/datasets):

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/run.py [NAME ...]
    .venv/bin/python experiments/run.py --render   # rewrite docs/results.md from the saved results

Each ``experiments/NAME.json`` is a fedvote run config (the ``config`` object of a
result.json; ``fedvote run --config experiments/NAME.json`` runs one alone). An
experiment may carry a non-private reference: the same config with σ = 0, on the same
split. Results go to ``experiments/results/NAME.json``; docs/results.md is regenerated
from every result file present, with the machine each ran on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from fedvote.models.threads import apply_host_policy

# As the command line does, before torch loads: OpenMP threads sleep while they wait and torch
# takes only the CPUs other processes leave idle (an experiment that trains in this process,
# beside other jobs on 2 cores, otherwise ran 10x slower: 915 s against 89 s for one student).
# Only when an experiment script runs: a test that imports one keeps its own environment.
if Path(sys.argv[0]).resolve().parent == Path(__file__).resolve().parent:
    apply_host_policy()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fedvote.compare import compare, format_table  # noqa: E402
from fedvote.config import RunConfig  # noqa: E402
from fedvote.data.federation import Federation  # noqa: E402
from fedvote.models.config import TrainingConfig  # noqa: E402
from fedvote.runner import run  # noqa: E402
from fedvote.transport.local import LocalTransport  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOC = HERE.parent / "docs" / "results.md"

# name -> (title, what the paper reports, run a σ = 0 reference too, seeds). Each seed
# deals its own federation and draws its own noise (``seed`` and ``noise_seed``); the
# reference runs on the first seed's federation.
EXPERIMENTS = {
    "pate_mnist_noniid": (
        "PATE-FL, MNIST non-IID (voting paper, Table 1 last row)",
        "0.951 at agent-level ε = 4.3, δ = 1e-3 (RDP, classic conversion)",
        True,
        (0, 1, 2),
    ),
    "knn_mnist_to_usps": (
        "Private-kNN-FL, MNIST → USPS, 10 agents, instance level (tight bound)",
        "no direct counterpart (the paper's instance-level runs use Office-Caltech / DomainNet). "
        "Settings: both domains framed as MNIST is (`framing: auto`; plainly resized, the private run "
        "gave 0.657 with pseudo-labels 0.568 right), k = 1 % of an agent's 6,000 records (60; chosen "
        "by measuring the noisy labels' accuracy against the pool's labels for k = 10, 30, 100, 300 "
        "per agent: 0.55, 0.92, 0.88, 0.83 — an experiment setting, not a default), the FixMatch "
        "student on the 7,291-image USPS pool",
        True,
        (0, 1, 2),
    ),
}


def machine() -> str:
    """A one-line description of where the experiment ran, and from which commit of fedvote."""
    return (
        f"{platform.platform()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({'CUDA' if torch.cuda.is_available() else 'CPU only'}), "
        f"{torch.get_num_threads()} torch threads; fedvote {code_version()}"
    )


def refuse(script: str, message: str) -> NoReturn:
    """Exit with status 2 and the one-line error ``script: message`` (bad input, nothing run)."""
    print(f"{script}: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse_seeds(text: str, script: str) -> list[int]:
    """``--seeds``: one seed or comma-separated seeds, each a non-negative integer, no repeats."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        refuse(script, f"--seeds must be comma-separated integers, got {text!r}")
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        refuse(script, f"--seeds must be distinct non-negative integers, got {text!r}")
    return seeds


def require_data_dir(script: str, holding: str = "mnist/") -> str:
    """``$FEDVOTE_DATA``, or a one-line refusal naming ``script`` and what the directory must hold."""
    data_dir = os.environ.get("FEDVOTE_DATA")
    if not data_dir:
        refuse(script, f"set FEDVOTE_DATA to the directory holding {holding}")
    return data_dir


# What the experiments write: changes there do not make the code that ran another commit.
OUTPUT_PATHS = (":(top,exclude)experiments/results", ":(top,exclude)docs")


def code_version() -> str:
    """The checkout's commit (``-dirty`` with uncommitted changes outside the outputs), or "unknown"."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                                *OUTPUT_PATHS], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"commit {commit}{'-dirty' if dirty else ''}"


# name -> (title, config file, methods, target ε, δ): fedvote compare on one federation
COMPARISONS = {
    "compare_mnist_noniid": (
        "PATE-FL vs the gradient baselines, MNIST non-IID, all at ε = 4",
        "pate_mnist_noniid",
        ("pate-fl", "fedavg", "dp-fedavg", "dp-fedsgd"),
        4.0,
        1e-3,
    ),
}


def save_results(name: str, record: dict, section: str | None = None) -> None:
    """``results/NAME.json`` from ``record`` and, when given, the docs/results.md section ``NAME.section.md``.

    :func:`render` places every ``*.section.md`` in docs/results.md.
    """
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    if section is not None:
        (RESULTS / f"{name}.section.md").write_text(section + "\n")
        print(f"wrote {RESULTS / f'{name}.section.md'}", file=sys.stderr)


def clean_pool_votes(federation: Federation, teacher: TrainingConfig, seed: int) -> np.ndarray:
    """The teachers' noiseless vote sums on every public pool image, (P, C) float64.

    A simulation diagnostic that a deployment never has: every agent trains its teacher by
    ``teacher`` (:class:`~fedvote.transport.local.LocalTransport`, ``seed``), then all of them
    vote once on the whole pool with no noise.
    """
    transport = LocalTransport(federation, seed=seed, noise_seed=seed)
    transport.train_teachers(teacher)
    clean = transport.vote_sum(np.arange(federation.public.features.shape[0]), 0.0, federation.num_agents)
    assert clean is not None  # every agent answers a noiseless in-process vote
    return np.asarray(clean.sums, dtype=np.float64)


def run_draws_experiment(
    argv: list[str],
    name: str,
    description: str,
    measure: Callable[[int, str], dict],
    section: Callable[[dict], str],
    default_draws: int,
    draws_help: str,
) -> None:
    """The command line of an experiment that measures over ``--draws`` label sets: parse, check, run, save."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--draws", type=int, default=default_draws, help=f"{draws_help} (default {default_draws})")
    args = parser.parse_args(argv)
    data_dir = require_data_dir(f"experiments/{name}.py")
    if args.draws < 1:
        refuse(f"experiments/{name}.py", f"--draws must be at least 1, got {args.draws}")
    record = measure(args.draws, data_dir)
    save_results(name, record, section(record))


def run_comparison(name: str) -> dict:
    """Run the comparison ``name`` and save its rows."""
    title, config_name, methods, epsilon, delta = COMPARISONS[name]
    config = RunConfig.from_dict(json.loads((HERE / f"{config_name}.json").read_text()))
    print(f"[{name}] comparing {', '.join(methods)} ...", file=sys.stderr, flush=True)
    rows = compare(config, methods, epsilon=epsilon, delta=delta)
    record = {
        "name": name,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "table": format_table(rows),
        "rows": [row.to_dict() for row in rows],
    }
    save_results(name, record)
    return record


def seed_summary(result: dict) -> dict:
    """The figures of one seed's private run that the mean ± std row reads."""
    return {
        "seed": result["seed"],
        "accuracy": result["accuracy"],
        "label_accuracy": result.get("label_accuracy"),
        "epsilon_agent": result["privacy"]["agent"]["epsilon"],
        "epsilon_instance": result["privacy"]["instance"]["epsilon"],
        "seconds": result["timings"]["total_s"],
    }


def run_experiment(name: str) -> dict:
    """Run ``name`` on each of its seeds (and its σ = 0 reference on the first) and save the results."""
    base = RunConfig.from_dict(json.loads((HERE / f"{name}.json").read_text()))
    seeds = EXPERIMENTS[name][3]
    record: dict = {"name": name, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "by_seed": []}
    for seed in seeds:
        config = dataclasses.replace(
            base, seed=seed, privacy=dataclasses.replace(base.privacy, noise_seed=seed)
        )
        print(f"[{name}] private run, seed {seed} ...", file=sys.stderr, flush=True)
        result = run(config).to_dict()
        record.setdefault("private", result)  # the first seed's whole result
        record["by_seed"].append(seed_summary(result))
    config = dataclasses.replace(
        base, seed=seeds[0], privacy=dataclasses.replace(base.privacy, noise_seed=seeds[0])
    )
    if EXPERIMENTS[name][2]:
        reference = dataclasses.replace(
            config, privacy=dataclasses.replace(config.privacy, sigma=0.0, epsilon=None)
        )
        print(f"[{name}] non-private reference (σ = 0) ...", file=sys.stderr, flush=True)
        record["reference"] = run(reference).to_dict()
    save_results(name, record)
    return record


def render() -> str:
    """docs/results.md from every saved result."""
    lines = [
        "# Results",
        "",
        "Produced by `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/run.py` "
        "(`make results`); every figure below is read from `experiments/results/*.json`, "
        "never typed by hand. Each experiment's config is `experiments/NAME.json`; "
        "`fedvote run --config experiments/NAME.json` reruns one.",
        "",
    ]
    for name, (title, paper, _, _) in EXPERIMENTS.items():
        path = RESULTS / f"{name}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        private = record["private"]
        privacy = private["privacy"]
        lines += [
            f"## {title}",
            "",
            f"Ran {record['date']} on {record['machine']}.",
            "",
            f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/run.py {name}`; "
            f"each seed s is `fedvote run --config experiments/{name}.json` with `seed` and "
            "`privacy.noise_seed` set to s. The first two rows are seed "
            f"{record.get('by_seed', [{'seed': record['private']['seed']}])[0]['seed']}'s.",
            "",
            "| run | test accuracy | pseudo-label accuracy | ε agent | ε instance | δ | σ | queries | seconds |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for label, result in (("private", private), ("non-private reference (σ = 0)", record.get("reference"))):
            if result is None:
                continue
            p = result["privacy"]

            def eps(level: str, p: dict = p) -> str:
                value = p[level]["epsilon"]
                return "∞" if value is None else f"{value:.3f}"

            label_acc = result.get("label_accuracy")
            lines.append(
                f"| {label} | {result['accuracy']:.4f} | "
                f"{'—' if label_acc is None else f'{label_acc:.3f}'} | {eps('agent')} | {eps('instance')} | "
                f"{p['delta']:g} | {result['sigma']:.4g} | {result['queries']} | {result['timings']['total_s']:.0f} |"
            )
        by_seed = record.get("by_seed", [])
        if len(by_seed) > 1:
            accuracy = [row["accuracy"] for row in by_seed]
            labels = [row["label_accuracy"] for row in by_seed if row["label_accuracy"] is not None]
            agent = [row["epsilon_agent"] for row in by_seed]
            instance = [row["epsilon_instance"] for row in by_seed]
            lines.append(
                f"| private, seeds {', '.join(str(row['seed']) for row in by_seed)}: mean ± std | "
                f"{statistics.mean(accuracy):.4f} ± {statistics.stdev(accuracy):.4f} | "
                f"{f'{statistics.mean(labels):.3f}' if labels else '—'} | "
                f"{_largest(agent)} | {_largest(instance)} | {privacy['delta']:g} | — | "
                f"{private['queries']} | {statistics.mean(row['seconds'] for row in by_seed):.0f} |"
            )
        bound = privacy["instance"].get("bound")
        lines += [
            "",
            f"Calibrated to ε = {privacy['calibrated_to_epsilon']} at the {privacy['calibrated_level']} level"
            + (f"; instance-level sensitivity bound: {bound}" if bound else "")
            + f"; accountant {privacy['accountant']}. The paper reports {paper}.",
            "",
        ]
    for name, (title, config_name, methods, epsilon, delta) in COMPARISONS.items():
        path = RESULTS / f"{name}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        lines += [
            f"## {title}",
            "",
            f"Ran {record['date']} on {record['machine']}.",
            "",
            f"Command: `fedvote compare --config experiments/{config_name}.json --methods "
            f"{','.join(methods)} --epsilon {epsilon:g} --delta {delta:g}` (with `FEDVOTE_DATA` set); "
            "each method is calibrated to the target at its own level (DP-FedSGD: instance; "
            "FedAvg: not private).",
            "",
            "```",
            record["table"],
            "```",
            "",
        ]
    # Sections written by experiments with scripts of their own (experiments/NAME.py), kept
    # between their markers so that both this script and theirs can rewrite the file.
    for section in sorted(RESULTS.glob("*.section.md")):
        name = section.name.removesuffix(".section.md")
        lines += [f"<!-- {name}: begin -->", section.read_text().rstrip("\n"), f"<!-- {name}: end -->", ""]
    return "\n".join(lines)


def _largest(values: list[float | None]) -> str:
    """The largest ε over seeds (∞ if any is)."""
    return "∞" if any(v is None for v in values) else f"≤ {max(values):.3f}"  # type: ignore[type-var]


def main(argv: list[str]) -> None:
    """Run the named experiments (default: all), then rewrite docs/results.md (``--render``: only that)."""
    if argv == ["--render"]:  # from the saved results, e.g. after one experiment script of its own
        DOC.write_text(render() + "\n")
        print(f"wrote {DOC}", file=sys.stderr)
        return
    known = [*EXPERIMENTS, *COMPARISONS]
    names = argv or known
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"experiments/run.py: unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    if not os.environ.get("FEDVOTE_DATA"):
        sys.exit("experiments/run.py: set FEDVOTE_DATA to the directory holding mnist/ and usps/")
    for name in names:
        if name in COMPARISONS:
            run_comparison(name)
        else:
            run_experiment(name)
    DOC.write_text(render() + "\n")
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
