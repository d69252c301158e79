"""Issue 43 item 3b: FedAUXfdp, FedD+P and FedAVG+P on CIFAR-10 (JPEG copy), the FedAUXfdp paper's Table 2.

``fedaux-fdp.txt``, Table 2: 20 clients split CIFAR-10's training set by Dirichlet(α), one
round, every method at cumulative ε = 0.6, δ = 2e-5 (FedAUXfdp: 0.1 on the scoring heads +
0.5 on the class heads; FedD+P and FedAVG+P: 0.6 on their class heads); the server's
auxiliary (public, unlabelled) data is STL-10 or CIFAR-100. Neither is available here, so
**the auxiliary data is a held-out part of CIFAR-10's own training set**: 10,000 of its
50,000 images (seeded), which no client holds; the 20 clients split the other 40,000 by
``dirichlet-balanced`` (α ∈ {0.01, 10.24}, 2,000 each); the test set is CIFAR-10's test
split (10,000). An auxiliary set from the clients' own distribution is easier than the
paper's STL-10/CIFAR-100: the accuracies are not comparable with its figures, only the
methods' order is.

Every record is seen through the public patch features (``--input-features auto`` for
cifar10: fitted on the auxiliary pool alone, no ε), mapped once for both α (φ and its
standardisation depend on the pool alone, so mapping the 40,000 client images once and
splitting them twice gives exactly what two runs would). The FedAUX pipeline then runs as
on MNIST (``experiments/fedaux_fdp.py``): h₀ = PCA on the pool's pre-training split (20 %),
heads on h̃, distillation on the other 80 %. Two settings: the MNIST experiment's paper
settings (``experiments/fedaux_fdp.json``: λ = 0.01, d = 32, …) and fedvote's defaults (only
the budgets given). One seed (0: split, hold-out and noise), for want of CPU time.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets nice .venv/bin/python experiments/fedaux_cifar10.py [--render]

Writes ``experiments/results/fedaux_cifar10.json`` and ``fedaux_cifar10.section.md`` (placed in
docs/results.md by ``experiments/run.py --render``), after every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import code_version, machine, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

NAME = "fedaux_cifar10"
ALPHAS = (0.01, 10.24)
HOLDOUT = 10_000
TOTAL_EPSILON = 0.6
DELTA = 2e-5
COMMAND = f"FEDVOTE_DATA=../shared/datasets nice .venv/bin/python experiments/{NAME}.py"
# (method, budget options) of Table 2
TABLE2 = (
    ("fedaux-fdp", {"epsilon_scores": 0.1, "epsilon_classes": 0.5}),
    ("fedd-p", {"epsilon_classes": TOTAL_EPSILON}),
    ("fedavg-p", {"epsilon_classes": TOTAL_EPSILON}),
)
PAPER_OPTIONS = {
    "lambda_": 0.01,
    "distill_epochs": 10,
    "extractor_dim": 32,
    "feature_bias": 0.5,
    "feature_quantile": 0.5,
}
# The paper's Table 2 (ShuffleNet, CIFAR-10 clients, STL-10 auxiliary data), at the α run here, %.
PAPER = {
    "fedaux-fdp": {0.01: 75.2, 10.24: 71.7},
    "fedd-p": {0.01: 41.8, 10.24: 72.3},
    "fedavg-p": {0.01: 46.0, 10.24: 74.1},
}


def mapped_datasets(data_dir: str, seed: int, limit: int | None = None) -> tuple[Any, Any, Any, float]:
    """(clients' 40,000, auxiliary 10,000, test 10,000) of CIFAR-10 seen through the pool's patch features."""
    import numpy as np

    from fedvote.data.datasets import load_splits
    from fedvote.data.federation import Federation, LabeledData
    from fedvote.models.input_features import with_input_features

    splits = load_splits("cifar10", data_dir)
    train, test = splits.train, splits.test
    holdout = HOLDOUT
    if limit is not None:  # smoke tests: a small slice of each split
        train, test, holdout = train.subset(np.arange(limit)), test.subset(np.arange(limit // 5)), limit // 5
    order = np.random.default_rng(np.random.SeedSequence([seed, 0xA0C5])).permutation(len(train.labels))
    aux = dataclasses.replace(train.subset(np.sort(order[:holdout])), split="aux-holdout",
                              description="CIFAR-10 train, held out as the auxiliary public data")  # fmt: skip
    clients = train.subset(np.sort(order[holdout:]))
    started = time.perf_counter()
    whole = Federation(
        dataset_name="cifar10",
        agents=(LabeledData(clients.features, clients.labels),),
        public=LabeledData(aux.features, aux.labels),
        test=LabeledData(test.features, test.labels),
        num_classes=len(train.class_names),
        example_shape=tuple(train.features.shape[1:]),
    )
    seen = with_input_features(whole, "patch", seed=seed)
    seconds = time.perf_counter() - started

    def like(dataset: Any, part: Any) -> Any:
        return dataclasses.replace(dataset, features=part.features)

    return like(clients, seen.agents[0]), like(aux, seen.public), like(test, seen.test), seconds


def federation(clients: Any, aux: Any, test: Any, alpha: float, seed: int) -> Any:
    """20 clients splitting ``clients`` by dirichlet-balanced(α); pool = ``aux``; test = ``test``."""
    from fedvote.data.federation import build_domain_federation
    from fedvote.data.partition import PartitionSpec

    fed = build_domain_federation(
        [clients], aux, target_test=test, num_agents=20,
        partition=PartitionSpec("dirichlet-balanced", alpha=alpha), seed=seed,
    )  # fmt: skip
    return dataclasses.replace(fed, dataset_name="cifar10", input_features="patch")


def base_config(data_dir: str) -> Any:
    from fedvote.config import RunConfig

    return RunConfig.from_dict({
        "method": "fedaux-fdp",
        "federation": {"dataset": "cifar10", "data_dir": data_dir, "agents": 20, "input_features": "auto",
                       "partition": {"scheme": "dirichlet-balanced", "alpha": ALPHAS[0]}},
        "privacy": {"sigma": None, "epsilon": None, "delta": DELTA, "accountant": "pld", "noise_seed": 0},
        "seed": 0,
        "options": {},
    })  # fmt: skip


def one_run(
    base: Any, fed: Any, alpha: float, method: str, setting: str, options: dict[str, Any]
) -> dict[str, Any]:
    """``method`` at ``alpha`` with ``options``; refusals are rows too (what fedvote said, measured)."""
    from fedvote.errors import ConfigError
    from fedvote.runner import run

    config = dataclasses.replace(
        base,
        method=method,
        federation=dataclasses.replace(
            base.federation, partition=dataclasses.replace(base.federation.partition, alpha=alpha)
        ),
        options=dict(options),
    )
    row: dict[str, Any] = {"alpha": alpha, "method": method, "setting": setting, "options": options,
                           "load_before": os.getloadavg()[0]}  # fmt: skip
    started = time.perf_counter()
    try:
        result = run(config, federation=fed)
    except ConfigError as error:
        row.update(accuracy=None, refused=str(error), seconds=round(time.perf_counter() - started, 1))
        print(f"[{NAME}] {json.dumps(row)}", file=sys.stderr, flush=True)
        return row
    pld = result.privacy.statement("pld accountant, the same releases")
    flat = result.to_dict()
    details = flat.get("fedaux") or (flat.get("details") or {}).get("fedaux") or {}
    row.update(
        accuracy=result.accuracy,
        epsilon=result.privacy.instance.epsilon,
        epsilon_pld=pld.epsilon if pld is not None else result.privacy.instance.epsilon,
        agent_epsilon=result.privacy.agent.epsilon,
        delta=result.privacy.delta,
        extractor_dim=details.get("extractor_dim"),
        lambda_=details.get("lambda"),
        seconds=round(time.perf_counter() - started, 1),
        load_after=os.getloadavg()[0],
    )
    print(f"[{NAME}] {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def _find(rows: list[dict[str, Any]], alpha: float, method: str, setting: str) -> dict[str, Any] | None:
    return next(
        (r for r in rows if (r["alpha"], r["method"], r["setting"]) == (alpha, method, setting)), None
    )


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run"
    if row.get("refused"):
        return "refused: " + row["refused"]
    return f"{row['accuracy']:.3f}"


def _eps(value: float | None) -> str:
    return "∞" if value is None else f"{value:.3f}"


def _why(rows: list[dict[str, Any]]) -> list[str]:
    """Why the claim holds or not, from the runs: the frozen h̃'s ceiling (FedAUXfdp without class noise)."""
    ceilings = []
    for setting in ("paper settings", "defaults"):
        for alpha in ALPHAS:
            free = _find(rows, alpha, "fedaux-fdp", setting + ", no class DP")
            noisy = _find(rows, alpha, "fedaux-fdp", setting)
            if free is None or free.get("refused") or noisy is None or noisy.get("refused"):
                continue
            ceilings.append(
                f"{setting}, α = {alpha}: {free['accuracy']:.3f} without class noise, {noisy['accuracy']:.3f} with it"
            )
    if not ceilings:
        return []
    return [
        "",
        "Why, measured: the server model is a logistic head on a frozen h̃ (PCA of the patch features of "
        "2,000 auxiliary images), and even FedAUXfdp **without** class-head noise reaches only "
        + "; ".join(ceilings)
        + ". With a representation that weak, FedAUXfdp's weighted soft labels and FedD+P's plain mean "
        "land close together (one seed, no spread measured: differences of 0.01–0.02 are within what "
        "another seed could move), so the paper's 30-point gap at α = 0.01 (FedAUXfdp 75.2 % vs 46.0 / 41.8 %, "
        "a contrastively pre-trained ShuffleNet on STL-10) does not reproduce here." + _fedavg_note(rows),
    ]


def _fedavg_note(rows: list[dict[str, Any]]) -> str:
    """FedAVG+P's drop from α = 10.24 to 0.01 at the paper's settings, where both ran."""
    low, high = (_find(rows, a, "fedavg-p", "paper settings") for a in (0.01, 10.24))
    if low is None or high is None or low.get("refused") or high.get("refused"):
        return ""
    return (
        f" FedAVG+P at the paper's settings: {low['accuracy']:.3f} at α = 0.01 vs {high['accuracy']:.3f} "
        "at α = 10.24 (the paper: 46.0 % vs 74.1 %): averaging heads of one-class clients hurts here too."
    )


def section(record: dict[str, Any]) -> str:
    """The docs/results.md section."""
    rows = record["rows"]
    lines = [
        "## FedAUXfdp, CIFAR-10 (JPEG copy) clients, **held-out CIFAR-10 as auxiliary data** (fedaux-fdp paper, Table 2; issue 43 item 3b)",
        "",
        f"Ran {record['date']} on {record['machine']}; patch features mapped once in "
        f"{record['features_seconds']:.0f} s; {record.get('seconds', 0):.0f} s in all.",
        "",
        f"Command: `{COMMAND}`. 20 clients split 40,000 of CIFAR-10's training images by "
        "`dirichlet-balanced` α (2,000 each), one round, full participation. **Auxiliary (public) "
        "data: the other 10,000 training images, held out (seeded) — not the paper's STL-10 or "
        "CIFAR-100, which are not available here**; it is drawn from the clients' own distribution, "
        "an easier setting than the paper's, so accuracies are not comparable with its figures, only "
        "the methods' order. 80 % of it distils, 20 % pre-trains h₀ (PCA) and gives the scoring "
        "heads' negatives. Every record is seen through the public patch features (`--input-features "
        "auto`: fitted on the auxiliary pool alone, no ε); the server model is a logistic head on the "
        "frozen h̃ (the paper: ShuffleNet/MobileNetv2, trained end to end). Test: CIFAR-10's test "
        "split (10,000). ε at δ = 2e-5, instance level (replace-one record): FedAUXfdp 0.1 (scores) + "
        "0.5 (classes), the paper's basic composition; FedD+P and FedAVG+P 0.6 on their class heads. "
        "'paper settings': experiments/fedaux_fdp.json's options (λ = 0.01, d = 32, feature bias 0.5, "
        "quantile 0.5, 10 distillation epochs); 'defaults': fedvote's (λ = 1/ln C, d auto, …), only "
        "the budgets given. Seed 0 only (split, hold-out, noise), for want of CPU time: one draw, no "
        "spread. The single-run equivalent is `fedvote run --method M --dataset cifar10 ... "
        "--epsilon-classes E` on a federation fedvote's CLI cannot build (a hold-out of the clients' "
        "own training split as the pool), hence the script.",
        "",
        "The agent-level ε column (zero-out of a whole client: every head lies in the ball "
        "‖β‖ ≤ √(2·ln K/λ), a sound but loose bound) is in the hundreds to tens of thousands: like the "
        "paper, these runs protect records, not clients.",
        "",
        "| method, setting | ε (δ = 2e-5) | "
        + " | ".join(f"α = {a}" for a in ALPHAS)
        + " | PLD ε | agent-level ε |",
        "| --- " * (len(ALPHAS) + 4) + "|",
    ]
    paper = [f"{PAPER[m][a]} %" for m, _ in TABLE2 for a in ALPHAS]
    for index, (method, _) in enumerate(TABLE2):
        shown = paper[index * len(ALPHAS) : (index + 1) * len(ALPHAS)]
        lines.append(
            f"| {method}, the paper (ShuffleNet, STL-10 auxiliary; mean of its seeds) | 0.6 | "
            + " | ".join(shown)
            + " | — | — |"
        )
    for setting in ("paper settings", "defaults"):
        for method, _ in TABLE2:
            cells = [_find(rows, a, method, setting) for a in ALPHAS]
            done = [c for c in cells if c is not None and not c.get("refused")]
            eps = _eps(done[0]["epsilon"]) if done else "—"
            pld = _eps(done[0]["epsilon_pld"]) if done else "—"
            agent = ", ".join(_eps(c["agent_epsilon"]) for c in done) if done else "—"
            lines.append(
                f"| {method}, {setting} | {eps} | " + " | ".join(map(_cell, cells)) + f" | {pld} | {agent} |"
            )
        cells = [_find(rows, a, "fedaux-fdp", setting + ", no class DP") for a in ALPHAS]
        if any(cells):
            lines.append(
                f"| fedaux-fdp, {setting}, no class DP (scores ε 0.1 only; Table 3's 'None') | 0.100 | "
                + " | ".join(map(_cell, cells))
                + " | — | — |"
            )
    verdicts = []
    for setting in ("paper settings", "defaults"):
        for alpha in ALPHAS:
            found = {m: _find(rows, alpha, m, setting) for m, _ in TABLE2}
            if any(r is None or r.get("refused") for r in found.values()):
                continue
            ours = found["fedaux-fdp"]["accuracy"]
            best = max(found["fedd-p"]["accuracy"], found["fedavg-p"]["accuracy"])
            verdicts.append(
                f"{setting}, α = {alpha}: FedAUXfdp {ours:.3f} vs best baseline {best:.3f} — "
                + ("ahead" if ours > best else "**not ahead**")
            )
    lines += [
        "",
        "The paper's claim (Table 2): FedAUXfdp significantly outperforms FedD+P and FedAVG+P in the "
        "most heterogeneous settings (α = 0.01, 0.04). Measured here: " + ("; ".join(verdicts) or "—") + ".",
        *_why(rows),
        "",
        "Runs (seconds; load average before → after):",
        "",
    ]
    for row in rows:
        lines.append(
            f"* {row['method']}, {row['setting']}, α = {row['alpha']}: {_cell(row)}, {row['seconds']:.0f} s, "
            f"load {row['load_before']:.1f} → {row.get('load_after', row['load_before']):.1f}"
            + (
                f", λ = {row['lambda_']:.4g}, d = {row['extractor_dim']}"
                if row.get("lambda_") is not None
                else ""
            )
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="rewrite the section from the saved results")
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)  # smoke tests only
    args = parser.parse_args(argv)
    saved = HERE / "results" / f"{NAME}.json"
    if args.render:
        record = json.loads(saved.read_text())
        save_results(NAME, record, section(record))
        return
    data_dir = require_data_dir(f"experiments/{NAME}.py", holding="cifar10/")
    started = time.perf_counter()
    clients, aux, test, features_s = mapped_datasets(data_dir, seed=0, limit=args.limit)
    print(f"[{NAME}] patch features: {features_s:.0f} s", file=sys.stderr, flush=True)
    record: dict[str, Any] = {
        "name": NAME, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "command": COMMAND,
        "commit": code_version(), "holdout": HOLDOUT, "features_seconds": round(features_s, 1), "rows": [],
    }  # fmt: skip
    base = base_config(data_dir)
    for alpha in ALPHAS:
        fed = federation(clients, aux, test, alpha, seed=0)
        for setting, extra in (("paper settings", PAPER_OPTIONS), ("defaults", {})):
            for method, budget in TABLE2:
                record["rows"].append(one_run(base, fed, alpha, method, setting, {**extra, **budget}))
                record["seconds"] = round(time.perf_counter() - started, 1)
                save_results(NAME, record, section(record))
            record["rows"].append(one_run(base, fed, alpha, "fedaux-fdp", setting + ", no class DP",
                                          {**extra, "epsilon_scores": 0.1, "class_privacy": False}))  # fmt: skip
            record["seconds"] = round(time.perf_counter() - started, 1)
            save_results(NAME, record, section(record))
    print(section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
