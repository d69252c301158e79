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
the budgets given). ``--seeds`` (default 0,1,2; one seed or several) sets the hold-out, split,
training and noise seed, one seed after another (the features mapped once per seed); each row
carries its seed, and a run of a seed replaces that seed's saved rows only (rows saved before
``--seeds`` existed are seed 0).

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets nice .venv/bin/python experiments/fedaux_cifar10.py [--seeds 0,1,2] [--render]

Writes ``experiments/results/fedaux_cifar10.json`` and ``fedaux_cifar10.section.md`` (placed in
docs/results.md by ``experiments/run.py --render``), after every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import code_version, machine, parse_seeds, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

NAME = "fedaux_cifar10"
SEEDS = "0,1,2"
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


def base_config(data_dir: str, seed: int = 0) -> Any:
    """Every row's config but method and options; ``seed`` is the training and noise seed."""
    from fedvote.config import RunConfig

    return RunConfig.from_dict({
        "method": "fedaux-fdp",
        "federation": {"dataset": "cifar10", "data_dir": data_dir, "agents": 20, "input_features": "auto",
                       "partition": {"scheme": "dirichlet-balanced", "alpha": ALPHAS[0]}},
        "privacy": {"sigma": None, "epsilon": None, "delta": DELTA, "accountant": "pld", "noise_seed": seed},
        "seed": seed,
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
    row: dict[str, Any] = {"seed": base.seed, "alpha": alpha, "method": method, "setting": setting, "options": options,
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


def _find(
    rows: list[dict[str, Any]], alpha: float, method: str, setting: str, seed: int
) -> dict[str, Any] | None:
    return next(
        (
            r
            for r in rows
            if (r["alpha"], r["method"], r["setting"], r["seed"]) == (alpha, method, setting, seed)
        ),
        None,
    )


def _seeds(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({r["seed"] for r in rows})


def _accuracies(rows: list[dict[str, Any]], alpha: float, method: str, setting: str) -> dict[int, float]:
    """Seed → accuracy of the runs of that cell that ran (refusals and missing seeds left out)."""
    found = {s: _find(rows, alpha, method, setting, s) for s in _seeds(rows)}
    return {s: r["accuracy"] for s, r in found.items() if r is not None and not r.get("refused")}


def _listed(values: list[Any]) -> str:
    return ", ".join(str(v) for v in values)


def mean_std(values: list[float], digits: int = 3, signed: bool = False) -> str:
    """Mean ± sample std over the seeds (0 for one seed)."""
    if not values:
        return "—"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):{'+' if signed else ''}.{digits}f} ± {std:.{digits}f}"


def _cell(rows: list[dict[str, Any]], alpha: float, method: str, setting: str) -> tuple[str, str]:
    """(each seed's accuracy in seed order — 'refused' or 'not run' where none —, mean ± std of those that ran)."""
    shown = []
    for seed in _seeds(rows):
        row = _find(rows, alpha, method, setting, seed)
        shown.append(
            "not run" if row is None else "refused" if row.get("refused") else f"{row['accuracy']:.3f}"
        )
    return ", ".join(shown), mean_std(list(_accuracies(rows, alpha, method, setting).values()))


def _eps(value: float | None) -> str:
    return "∞" if value is None else f"{value:.3f}"


def _one_or_each(texts: list[str]) -> str:
    return "—" if not texts else texts[0] if len(set(texts)) == 1 else ", ".join(texts)


def _gaps(
    rows: list[dict[str, Any]], alpha: float, setting: str, against: tuple[str, ...]
) -> dict[int, float]:
    """Seed → FedAUXfdp − the best of ``against`` (seeds where all of them ran)."""
    ours = _accuracies(rows, alpha, "fedaux-fdp", setting)
    theirs = [_accuracies(rows, alpha, m, setting) for m in against]
    return {s: a - max(t[s] for t in theirs) for s, a in ours.items() if all(s in t for t in theirs)}


def _signed(values: dict[int, float]) -> str:
    return (
        ", ".join(f"{v:+.3f}" for v in values.values())
        + f" (mean {mean_std(list(values.values()), signed=True)})"
    )


def _why(rows: list[dict[str, Any]]) -> list[str]:
    """Why the claim holds or not, from the runs: the frozen h̃'s ceiling (FedAUXfdp without class noise)."""
    ceilings, versus = [], []
    for setting in ("paper settings", "defaults"):
        for alpha in ALPHAS:
            free = _accuracies(rows, alpha, "fedaux-fdp", setting + ", no class DP")
            noisy = _accuracies(rows, alpha, "fedaux-fdp", setting)
            if free and noisy:
                ceilings.append(
                    f"{setting}, α = {alpha}: {statistics.mean(free.values()):.3f} without class noise, "
                    f"{statistics.mean(noisy.values()):.3f} with it"
                )
            gap = _gaps(rows, alpha, setting, ("fedd-p",))
            if gap:
                versus.append((setting, alpha, gap))
    if not ceilings:
        return []
    text = (
        "Why, measured: the server model is a logistic head on a frozen h̃ (PCA of the patch features of "
        f"{HOLDOUT // 5:,} auxiliary images), and even FedAUXfdp **without** class-head noise reaches only "
        + "; ".join(ceilings)
        + " (means over the seeds)."
    )
    if versus:
        widest = max(abs(statistics.mean(g.values())) for _, _, g in versus)
        text += (
            " With a representation that weak, FedAUXfdp's weighted soft labels and FedD+P's plain mean land "
            f"within {widest:.3f} of each other on average; FedAUXfdp − FedD+P per seed: "
            + "; ".join(f"{setting}, α = {alpha}: {_signed(gap)}" for setting, alpha, gap in versus)
            + "."
        )
    low = ALPHAS[0]
    paper_lead = PAPER["fedaux-fdp"][low] - max(PAPER["fedd-p"][low], PAPER["fedavg-p"][low])
    leads = [_gaps(rows, low, setting, ("fedd-p", "fedavg-p")) for setting in ("paper settings", "defaults")]
    leads = [g for g in leads if g]
    if leads:
        best = 100 * max(statistics.mean(g.values()) for g in leads)
        text += (
            f" The paper's lead of {paper_lead:.1f} points at α = {low} (FedAUXfdp {PAPER['fedaux-fdp'][low]} % vs "
            f"{PAPER['fedavg-p'][low]} / {PAPER['fedd-p'][low]} %, a contrastively pre-trained ShuffleNet on STL-10) "
            + ("does not reproduce here" if best < paper_lead / 2 else "reproduces in part here")
            + f": the largest mean lead over the better baseline measured at α = {low} is {best:+.1f} points."
        )
    return ["", text + _fedavg_note(rows)]


def _fedavg_note(rows: list[dict[str, Any]]) -> str:
    """FedAVG+P's drop from α = 10.24 to 0.01 at the paper's settings, where both ran."""
    low, high = (_accuracies(rows, a, "fedavg-p", "paper settings") for a in ALPHAS)
    both = [s for s in low if s in high]
    if not both:
        return ""
    lower = sum(low[s] < high[s] for s in both)
    return (
        f" FedAVG+P at the paper's settings: {statistics.mean(low[s] for s in both):.3f} at α = {ALPHAS[0]} vs "
        f"{statistics.mean(high[s] for s in both):.3f} at α = {ALPHAS[1]} (mean of seeds {_listed(both)}; the paper: "
        f"{PAPER['fedavg-p'][ALPHAS[0]]} % vs {PAPER['fedavg-p'][ALPHAS[1]]} %), lower at α = {ALPHAS[0]} in "
        f"{lower} of {len(both)} seeds"
        + (": averaging heads of one-class clients hurts here too." if lower == len(both) else ".")
    )


def _runs_text(record: dict[str, Any]) -> str:
    """Which seeds ran where and when, each one process: from the saved runs."""
    runs = record.get("runs", [])
    hosts = {str(r.get("machine", "unknown")).split("; fedvote")[0] for r in runs}
    parts = []
    for run in runs:
        load = (
            f", load {run['load_before']:.1f} → {run['load_after']:.1f}"
            if "load_before" in run and "load_after" in run
            else ""
        )
        parts.append(
            f"seed {run['seed']} ran {run.get('date', '?')} at fedvote {run.get('commit', 'unknown')}"
            + ("" if len(hosts) == 1 else f" on {str(run.get('machine')).split('; fedvote')[0]}")
            + f": patch features mapped once in {run.get('features_seconds', 0):.0f} s, "
            f"{run.get('seconds', 0):.0f} s in all{load}"
        )
    where = f"Ran on {hosts.pop()}, one process per seed: " if len(hosts) == 1 else "One process per seed: "
    return where + "; ".join(parts) + "."


def _knobs_text(found: list[dict[str, Any]], knobs: list[str]) -> str:
    """λ and d as fedvote reported them, naming the seeds where earlier runs did not record them."""
    if not knobs:
        return ""
    told = [r["seed"] for r in found if r.get("lambda_") is not None]
    which = "" if len(told) == len(found) else f"seed{'s' if len(told) > 1 else ''} {_listed(told)}: "
    return f" ({which}{'; '.join(knobs)})"


def section(record: dict[str, Any]) -> str:
    """The docs/results.md section."""
    rows = record["rows"]
    seeds = _seeds(rows)
    done = [r for r in rows if not r.get("refused") and r.get("agent_epsilon") is not None]
    agent = [r["agent_epsilon"] for r in done]
    lines = [
        "## FedAUXfdp, CIFAR-10 (JPEG copy) clients, **held-out CIFAR-10 as auxiliary data** (fedaux-fdp paper, Table 2; issue 43 item 3b)",
        "",
        _runs_text(record),
        "",
        f"Command: `{COMMAND}` (`--seeds`, default {SEEDS}). 20 clients split 40,000 of CIFAR-10's training "
        "images by `dirichlet-balanced` α (2,000 each), one round, full participation. **Auxiliary (public) "
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
        f"the budgets given. Seed{'s' if len(seeds) > 1 else ''} {_listed(seeds)} (a seed sets the hold-out, "
        "the split, training and noise): each cell gives the seeds' accuracies in seed order, then mean ± std "
        "(sample std over the seeds that ran). The single-run equivalent is `fedvote run --method M --dataset "
        "cifar10 ... --epsilon-classes E` on a federation fedvote's CLI cannot build (a hold-out of the clients' "
        "own training split as the pool), hence the script.",
        "",
        "The agent-level ε column (zero-out of a whole client: every head lies in the ball "
        "‖β‖ ≤ √(2·ln K/λ), a sound but loose bound) lies between "
        + (f"{min(agent):,.0f} and {max(agent):,.0f}" if agent else "— and —")
        + ": like the paper, these runs protect records, not clients.",
        "",
        "| method, setting | ε (δ = 2e-5) | "
        + " | ".join(f"α = {a}, per seed | mean ± std" for a in ALPHAS)
        + " | PLD ε | agent-level ε, range over α and seeds |",
        "| --- " * (2 * len(ALPHAS) + 4) + "|",
    ]
    for method, _ in TABLE2:
        lines.append(
            f"| {method}, the paper (ShuffleNet, STL-10 auxiliary; mean of its seeds) | 0.6 | "
            + " | ".join(f"— | {PAPER[method][a]} %" for a in ALPHAS)
            + " | — | — |"
        )
    for setting in ("paper settings", "defaults"):
        for method, _ in TABLE2:
            ran = [r for r in done if (r["method"], r["setting"]) == (method, setting)]
            eps = _one_or_each(sorted({_eps(r["epsilon"]) for r in ran}))
            pld = _one_or_each(sorted({_eps(r["epsilon_pld"]) for r in ran}))
            spread = [r["agent_epsilon"] for r in ran]
            lines.append(
                f"| {method}, {setting} | {eps} | "
                + " | ".join(" | ".join(_cell(rows, a, method, setting)) for a in ALPHAS)
                + f" | {pld} | "
                + (f"{min(spread):.3f}–{max(spread):.3f}" if spread else "—")
                + " |"
            )
        free = setting + ", no class DP"
        if any(r["setting"] == free for r in rows):
            lines.append(
                f"| fedaux-fdp, {free} (scores ε 0.1 only; Table 3's 'None') | 0.100 | "
                + " | ".join(" | ".join(_cell(rows, a, "fedaux-fdp", free)) for a in ALPHAS)
                + " | — | — |"
            )
    verdicts = []
    for setting in ("paper settings", "defaults"):
        for alpha in ALPHAS:
            gaps = _gaps(rows, alpha, setting, ("fedd-p", "fedavg-p"))
            if not gaps:
                continue
            ahead = sum(g > 0 for g in gaps.values())
            verdict = (
                ("ahead" if ahead else "**not ahead**") + " (one seed)"
                if len(gaps) == 1
                else f"ahead in all {len(gaps)} seeds"
                if ahead == len(gaps)
                else f"**not ahead in any of the {len(gaps)} seeds**"
                if ahead == 0
                else f"**ahead in {ahead} of {len(gaps)} seeds only**"
            )
            verdicts.append(
                f"{setting}, α = {alpha}: FedAUXfdp − best baseline per seed {_signed(gaps)} — {verdict}"
            )
    lines += [
        "",
        "The paper's claim (Table 2): FedAUXfdp significantly outperforms FedD+P and FedAVG+P in the "
        "most heterogeneous settings (α = 0.01, 0.04). Measured here (the better of FedD+P and FedAVG+P "
        "in each seed): " + ("; ".join(verdicts) or "—") + ".",
        *_why(rows),
    ]
    refused = [r for r in rows if r.get("refused")]
    if refused:
        lines += ["", "Refused (what fedvote said):", ""] + [
            f"* {r['method']}, {r['setting']}, α = {r['alpha']}, seed {r['seed']}: {r['refused']}"
            for r in refused
        ]
    lines += ["", "Runs (seconds; load average before → after), per seed:", ""]
    for setting in ("paper settings", "defaults"):
        for alpha in ALPHAS:
            for method, label in [(m, m) for m, _ in TABLE2] + [("fedaux-fdp", "fedaux-fdp, no class DP")]:
                name = setting + (", no class DP" if label.endswith("no class DP") else "")
                found = [r for s in seeds for r in [_find(rows, alpha, method, name, s)] if r is not None]
                if not found:
                    continue
                knobs = sorted(
                    {
                        f"λ = {r['lambda_']:.4g}, d = {r['extractor_dim']}"
                        for r in found
                        if r.get("lambda_") is not None
                    }
                )
                lines.append(
                    f"* {method}, {name}, α = {alpha}: "
                    + "; ".join(
                        f"seed {r['seed']} "
                        + ("refused" if r.get("refused") else f"{r['accuracy']:.3f}")
                        + f", {r['seconds']:.0f} s, load {r['load_before']:.1f} → "
                        f"{r.get('load_after', r['load_before']):.1f}"
                        for r in found
                    )
                    + _knobs_text(found, knobs)
                )
    return "\n".join(lines)


def load(saved: Path) -> dict[str, Any]:
    """The saved record, each row with its seed and ``runs`` one entry per seed (date, machine,
    commit, feature and total seconds). Records saved before ``--seeds`` existed ran seed 0 only."""
    record = json.loads(saved.read_text())
    for row in record["rows"]:
        row.setdefault("seed", 0)
    if "runs" not in record:
        legacy = ("date", "machine", "commit", "features_seconds", "seconds")
        record["runs"] = (
            [{"seed": 0, **{k: record[k] for k in legacy if k in record}}] if record["rows"] else []
        )
    return record


def replace_seed(record: dict[str, Any], run: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``record`` with seed ``run["seed"]``'s run and rows replaced by ``run`` and ``rows``, the other seeds' kept."""
    seed = run["seed"]
    return {
        **record,
        "runs": sorted(
            [r for r in record.get("runs", []) if r["seed"] != seed] + [run], key=lambda r: r["seed"]
        ),
        "rows": [r for r in record["rows"] if r["seed"] != seed] + rows,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", default=SEEDS, help=f"comma-separated seeds of hold-out, split and noise (default {SEEDS})"
    )
    parser.add_argument("--render", action="store_true", help="rewrite the section from the saved results")
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)  # smoke tests only
    args = parser.parse_args(argv)
    saved = HERE / "results" / f"{NAME}.json"
    if args.render:
        record = load(saved)
        save_results(NAME, record, section(record))
        return
    script = f"experiments/{NAME}.py"
    seeds = parse_seeds(args.seeds, script)
    data_dir = require_data_dir(script, holding="cifar10/")
    for seed in seeds:
        run_seed(saved, data_dir, seed, args.limit)
    print(section(load(saved)))


def run_seed(saved: Path, data_dir: str, seed: int, limit: int | None) -> None:
    """Every row of one seed (hold-out, split, training and noise), replacing that seed's saved rows."""
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    clients, aux, test, features_s = mapped_datasets(data_dir, seed=seed, limit=limit)
    print(f"[{NAME}] seed {seed}: patch features: {features_s:.0f} s", file=sys.stderr, flush=True)
    record: dict[str, Any] = (
        load(saved) if saved.exists() else {"name": NAME, "command": COMMAND, "holdout": HOLDOUT, "rows": []}
    )
    record = {key: value for key, value in record.items() if key not in ("date", "machine", "commit", "seconds",
                                                                         "features_seconds")}  # fmt: skip
    run_info: dict[str, Any] = {
        "seed": seed, "date": time.strftime("%Y-%m-%d"), "machine": machine(), "commit": code_version(),
        "features_seconds": round(features_s, 1), "load_before": load_before,
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    base = base_config(data_dir, seed)

    def save(row: dict[str, Any]) -> None:
        nonlocal record
        rows.append(row)
        run_info.update(seconds=round(time.perf_counter() - started, 1), load_after=os.getloadavg()[0])
        record = replace_seed(record, run_info, rows)
        save_results(NAME, record, section(record))

    for alpha in ALPHAS:
        fed = federation(clients, aux, test, alpha, seed=seed)
        for setting, extra in (("paper settings", PAPER_OPTIONS), ("defaults", {})):
            for method, budget in TABLE2:
                save(one_run(base, fed, alpha, method, setting, {**extra, **budget}))
            save(one_run(base, fed, alpha, "fedaux-fdp", setting + ", no class DP",
                         {**extra, "epsilon_scores": 0.1, "class_privacy": False}))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
