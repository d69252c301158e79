"""FedAUXfdp vs FedD+P and FedAVG+P on the FedAUX family's defaults, three seeds, and why it wins or loses.

Issue 17's bar: FedAUXfdp ≥ both FedD+P and FedAVG+P at α = 0.01, total ε 0.6 (δ 2e-5),
mean of three seeds, or an ablation that explains why not. The federation is the
fedaux-fdp paper's Table 2 on our data: MNIST train split among 20 clients by a balanced
Dirichlet(α), α ∈ {0.01, 0.04, 0.16, 10.24}; the server's auxiliary data is USPS train,
resized to 28×28 and then framed as MNIST's digits are (``framing="mnist"``,
:func:`fedvote.data.framing.frame_digits`); the test set is MNIST test. Seed s (0, 1, 2) is
the federation's dealing seed, the run's seed (pool split, h₀, student) and the noise seed.

Every run is ``fedvote.runner.run`` of ``experiments/fedaux_fdp.json`` with its options
cleared, so each method runs on the family's defaults (λ = 1/ln C, tight class-head
sensitivity, PCA h₀ of auto dimension, feature bias 0.1, quantile 0) with only its budget
given: fedaux-fdp ε_scores 0.1 (the default) + ε_classes 0.5, fedd-p and fedavg-p
ε_classes 0.6. The ablation at α = 0.01 changes one thing at a time from there
(extractor, head sensitivity, framing, λ; the certainty weighting through FedD+P at
FedAUXfdp's class ε and FedAUXfdp without class-head noise). Runs one after another,
single-threaded; a few minutes on 2 cores (the contrastive h₀ is trained once per seed
and then read from the extractor cache).

Usage (repository root): ``FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/fedaux_ablation.py``
(``--render``: only the section again, from the saved JSON).

Writes ``experiments/results/fedaux_ablation.json`` and the section
``fedaux_ablation.section.md`` that ``experiments/run.py`` places in docs/results.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fedaux_fdp import ALPHAS, TOTAL_EPSILON  # noqa: E402  (experiments/fedaux_fdp.py)
from run import machine, save_results  # noqa: E402  (experiments/run.py)

SEEDS = (0, 1, 2)
BAR_ALPHA = 0.01
EPSILON_CLASSES = 0.5  # fedaux-fdp's class heads; its scoring heads take the default 0.1
COMMAND = "FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/fedaux_ablation.py"
METHODS = ("fedaux-fdp", "fedd-p", "fedavg-p")
# Every method's budget at a total ε of 0.6 (fedaux-fdp's ε_scores is its default 0.1).
BUDGET: dict[str, dict[str, Any]] = {
    "fedaux-fdp": {"epsilon_classes": EPSILON_CLASSES},
    "fedd-p": {"epsilon_classes": TOTAL_EPSILON},
    "fedavg-p": {"epsilon_classes": TOTAL_EPSILON},
}
PAPER_FEATURES = {"lambda_": 0.01, "extractor_dim": 32, "feature_bias": 0.5, "feature_quantile": 0.5}
# The ablation at α = 0.01, all three methods: (key, label, framing, options on top of the budget).
ABLATIONS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("defaults", "defaults (Table A)", "mnist", {}),
    ("contrastive", "h₀ contrastive (SimCLR) instead of PCA", "mnist", {"extractor": "contrastive"}),
    ("autoencoder", "h₀ autoencoder instead of PCA", "mnist", {"extractor": "autoencoder"}),
    ("paper-sensitivity", "class-head Δ the paper's 2√C/(λ·nᵢ) instead of 2√2/(λ·nᵢ)", "mnist",
     {"head_sensitivity": "paper"}),
    ("unframed", "USPS plainly resized, not framed", "none", {}),
    ("lambda", "λ = 0.01 (the paper's) instead of 1/ln C", "mnist", {"lambda_": 0.01}),
    ("paper", "the paper's settings (λ 0.01, d 32, bias 0.5, quantile 0.5)", "mnist", PAPER_FEATURES),
    ("paper-unframed", "the paper's settings, unframed (the fedaux_fdp section's, but 30 distillation epochs)",
     "none", PAPER_FEATURES),
)
# The certainty weighting, at both λ: FedD+P at FedAUXfdp's class ε (same class-head noise,
# no scores) and FedAUXfdp with class heads not noised (what the weighting does without it).
WEIGHTING_LAMBDAS: tuple[dict[str, Any], ...] = ({}, {"lambda_": 0.01})
WEIGHTING_EXTRA: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fedd-p", {"epsilon_classes": EPSILON_CLASSES}),
    ("fedaux-fdp", {"class_privacy": False}),
)


def cells() -> list[tuple[float, str, str, dict[str, Any]]]:
    """Every (α, framing, method, options) to run for every seed, without repeats."""
    planned: list[tuple[float, str, str, dict[str, Any]]] = []

    def add(alpha: float, framing: str, method: str, options: dict[str, Any]) -> None:
        if (alpha, framing, method, options) not in planned:
            planned.append((alpha, framing, method, options))

    for alpha in ALPHAS:  # Table A
        for method in METHODS:
            add(alpha, "mnist", method, dict(BUDGET[method]))
    for _, _, framing, extra in ABLATIONS:
        for method in METHODS:
            add(BAR_ALPHA, framing, method, {**BUDGET[method], **extra})
    for lam in WEIGHTING_LAMBDAS:
        for method, options in WEIGHTING_EXTRA:
            budget = {} if "class_privacy" in options else BUDGET[method]
            add(BAR_ALPHA, "mnist", method, {**budget, **options, **lam})
    return planned


@functools.cache
def datasets(data_dir: str) -> tuple[Any, Any, Any]:
    """MNIST train, MNIST test, USPS train resized to 28×28."""
    from fedvote.data.datasets import load_splits

    mnist = load_splits("mnist", data_dir)
    return mnist.train, mnist.test, load_splits("usps", data_dir).train.resized((28, 28))


def federation(alpha: float, seed: int, framing: str, data_dir: str) -> Any:
    """20 clients on MNIST train by balanced Dirichlet(α), USPS train as the pool (framed or not), MNIST test."""
    from fedvote.data.federation import build_domain_federation
    from fedvote.data.partition import PartitionSpec

    train, test, usps = datasets(data_dir)
    return build_domain_federation(
        [train],
        usps,
        target_test=test,
        num_agents=20,
        partition=PartitionSpec("dirichlet-balanced", alpha=alpha),
        framing=framing,
        seed=seed,
    )


def one_run(base: Any, fed: Any, alpha: float, seed: int, framing: str, method: str,
            options: dict[str, Any]) -> dict[str, Any]:
    """``method`` with ``options`` (else its defaults) on ``fed``, seeded by ``seed``: the saved row."""
    from fedvote.errors import ConfigError
    from fedvote.runner import run

    partition = dataclasses.replace(base.federation.partition, alpha=alpha)
    config = dataclasses.replace(
        base,
        method=method,
        seed=seed,
        federation=dataclasses.replace(base.federation, partition=partition),
        privacy=dataclasses.replace(base.privacy, noise_seed=seed),
        options=dict(options),
    )
    row: dict[str, Any] = {"alpha": alpha, "seed": seed, "framing": framing, "method": method, "options": options}
    started = time.perf_counter()
    try:
        result = run(config, federation=fed)
    except ConfigError as error:  # class heads drowned by their noise: refused before fitting
        if error.argument != "epsilon_classes":
            raise
        row.update(accuracy=None, refused=str(error), seconds=round(time.perf_counter() - started, 2))
    else:
        pld = result.privacy.statement("pld accountant, the same releases")
        details = result.details["fedaux"]
        row.update(
            accuracy=result.accuracy,
            epsilon=result.privacy.instance.epsilon,
            epsilon_pld=pld.epsilon if pld is not None else result.privacy.instance.epsilon,
            agent_epsilon=result.privacy.agent.epsilon,
            delta=result.privacy.delta,
            extractor=details["extractor"],
            extractor_dim=details["extractor_dim"],
            lambda_=details["lambda"],
            seconds=round(time.perf_counter() - started, 2),
        )
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    """Run every cell for every seed, one after another, and save the rows and the section."""
    data_dir = os.environ.get("FEDVOTE_DATA")
    if not data_dir:
        sys.exit("experiments/fedaux_ablation.py: set FEDVOTE_DATA to the directory holding mnist/ and usps/")
    from fedvote.config import RunConfig

    base = RunConfig.from_dict({**json.loads((HERE / "fedaux_fdp.json").read_text()), "options": {}})
    started = time.perf_counter()
    planned = cells()
    rows = []
    for alpha in ALPHAS:
        for framing in ("mnist", "none"):
            here = [(m, o) for a, f, m, o in planned if a == alpha and f == framing]
            for seed in SEEDS if here else ():
                fed = federation(alpha, seed, framing, data_dir)
                rows += [one_run(base, fed, alpha, seed, framing, m, o) for m, o in here]
    record = {
        "name": "fedaux_ablation",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started, 1),
        "command": COMMAND,
        "seeds": list(SEEDS),
        "rows": rows,
    }
    save_results("fedaux_ablation", record, section(record))


def accuracies(rows: list[dict[str, Any]], alpha: float, framing: str, method: str,
               options: dict[str, Any]) -> list[float] | None:
    """The accuracy per seed of one cell; None when it was not run or was refused."""
    found = [r for r in rows if (r["alpha"], r["framing"], r["method"], r["options"]) == (alpha, framing, method, options)]
    if not found or any(r["accuracy"] is None for r in found):
        return None
    return [r["accuracy"] for r in sorted(found, key=lambda r: r["seed"])]


def spread(values: list[float] | None) -> str:
    """'mean ± std' (sample std over the seeds), or a dash."""
    if values is None:
        return "—"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def gap(rows: list[dict[str, Any]], alpha: float, framing: str, extra: dict[str, Any]) -> list[float] | None:
    """FedAUXfdp minus the better baseline, per seed (paired: same federation, same seed)."""
    ours = accuracies(rows, alpha, framing, "fedaux-fdp", {**BUDGET["fedaux-fdp"], **extra})
    theirs = [accuracies(rows, alpha, framing, m, {**BUDGET[m], **extra}) for m in METHODS[1:]]
    if ours is None or any(t is None for t in theirs):
        return None
    best = max(theirs, key=lambda t: statistics.mean(t))  # type: ignore[arg-type]
    return [a - b for a, b in zip(ours, best, strict=True)]  # type: ignore[arg-type]


def signed(values: list[float] | None) -> str:
    """'+mean ± std' of paired differences, or a dash."""
    if values is None:
        return "—"
    return f"{statistics.mean(values):+.3f} ± {statistics.stdev(values):.3f}"


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    rows = record["rows"]
    seeds = ", ".join(map(str, record["seeds"]))
    lines = [
        "## FedAUXfdp vs FedD+P and FedAVG+P on the defaults, three seeds, and an ablation (issue 17's bar)",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['seconds']:.0f} s in all, runs one after "
        f"another on one thread. Seeds {seeds} (each the federation's dealing seed, the run's seed and "
        "the noise seed); mean ± sample std over them.",
        "",
        f"Command: `{record['command']}` (config `experiments/fedaux_fdp.json` with its options cleared: "
        "the FedAUX family's defaults, λ = 1/ln C, tight class-head sensitivity 2√2/(λ·nᵢ), PCA h₀ of "
        "auto dimension, feature bias 0.1, quantile 0, 30 distillation epochs). 20 clients, MNIST train "
        "split by `dirichlet-balanced` α; auxiliary data = USPS train resized to 28×28 and then **framed "
        "as MNIST's digits are** (`framing=\"mnist\"`: ink box scaled to 20 px, centred by its centre of "
        "mass); test = MNIST test. Every method at total instance ε = 0.6, δ = 2e-5: FedAUXfdp 0.1 on "
        "its scoring heads + 0.5 on its class heads, FedD+P and FedAVG+P 0.6 on their class heads.",
        "",
        "**Table A** — server accuracy on MNIST test:",
        "",
        "| method | " + " | ".join(f"α = {a}" for a in ALPHAS) + " |",
        "| --- " * (len(ALPHAS) + 1) + "|",
    ]
    for method in METHODS:
        cells_ = [spread(accuracies(rows, a, "mnist", method, BUDGET[method])) for a in ALPHAS]
        lines.append(f"| {method} | " + " | ".join(cells_) + " |")
    gaps = [gap(rows, a, "mnist", {}) for a in ALPHAS]
    lines.append("| fedaux-fdp − better baseline (paired) | " + " | ".join(map(signed, gaps)) + " |")
    bar = gaps[ALPHAS.index(BAR_ALPHA)]
    if bar is not None:
        verdict = "**meets**" if statistics.mean(bar) >= 0 else "does **not** meet"
        lines += ["", f"At α = {BAR_ALPHA} FedAUXfdp {verdict} the bar (≥ both baselines, mean of three seeds)."]
    lines += [
        "",
        f"**Ablation at α = {BAR_ALPHA}** — one change from the defaults per row, all three methods "
        "at the same budgets:",
        "",
        "| setting | fedaux-fdp | fedd-p | fedavg-p | fedaux-fdp − better baseline | h₀ dim (fedaux-fdp) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for _, label, framing, extra in ABLATIONS:
        accs = [spread(accuracies(rows, BAR_ALPHA, framing, m, {**BUDGET[m], **extra})) for m in METHODS]
        dims = sorted({r["extractor_dim"] for r in rows if r["alpha"] == BAR_ALPHA and r["framing"] == framing
                       and r["method"] == "fedaux-fdp" and r["options"] == {**BUDGET["fedaux-fdp"], **extra}
                       and r.get("extractor_dim") is not None})
        lines.append(f"| {label} | " + " | ".join(accs) + f" | {signed(gap(rows, BAR_ALPHA, framing, extra))} | "
                     + (", ".join(map(str, dims)) or "—") + " |")
    lines += [
        "",
        f"**The certainty weighting at α = {BAR_ALPHA}** (paired differences over the seeds). FedD+P at "
        "ε_classes 0.5 carries exactly FedAUXfdp's class-head noise without its scoring heads, so "
        "FedAUXfdp − FedD+P(0.5) is what the private certainty weighting adds, and FedD+P(0.6) − "
        "FedD+P(0.5) what the 0.1 spent on scores costs the class heads. No option makes the scores "
        "non-private while the class heads stay private, and ε_scores ≥ 1 is refused (its agent-level "
        "privacy loss cannot be accounted), so the weighting is also shown with class heads not noised "
        "(total ε ∞).",
        "",
        "| | λ = 1/ln C (default) | λ = 0.01 |",
        "| --- | --- | --- |",
    ]

    def weighting(method: str, options: dict[str, Any]) -> list[list[float] | None]:
        return [accuracies(rows, BAR_ALPHA, "mnist", method, {**options, **lam}) for lam in WEIGHTING_LAMBDAS]

    aux = weighting("fedaux-fdp", BUDGET["fedaux-fdp"])
    aux_free = weighting("fedaux-fdp", {"class_privacy": False})
    fedd_half = weighting("fedd-p", {"epsilon_classes": EPSILON_CLASSES})
    fedd = weighting("fedd-p", BUDGET["fedd-p"])

    def diff(a: list[float] | None, b: list[float] | None) -> list[float] | None:
        return None if a is None or b is None else [x - y for x, y in zip(a, b, strict=True)]

    table = (
        ("fedaux-fdp, scores 0.1 + classes 0.5", aux, spread),
        ("fedaux-fdp, scores 0.1, class heads not noised (ε ∞)", aux_free, spread),
        ("fedd-p, classes 0.5 (FedAUXfdp's class noise, no scores)", fedd_half, spread),
        ("fedd-p, classes 0.6", fedd, spread),
        ("weighting: fedaux-fdp − fedd-p(0.5)", [diff(a, b) for a, b in zip(aux, fedd_half, strict=True)], signed),
        ("weighting without class noise: fedaux-fdp(ε ∞) − fedd-p(0.6)",
         [diff(a, b) for a, b in zip(aux_free, fedd, strict=True)], signed),
        ("ε spent on scores: fedd-p(0.6) − fedd-p(0.5)", [diff(a, b) for a, b in zip(fedd, fedd_half, strict=True)],
         signed),
        ("class-head noise: fedaux-fdp − fedaux-fdp(ε ∞)", [diff(a, b) for a, b in zip(aux, aux_free, strict=True)],
         signed),
    )
    for label, values, show in table:
        lines.append(f"| {label} | " + " | ".join(show(v) for v in values) + " |")  # type: ignore[operator]
    refused = [r for r in rows if r.get("refused")]
    if refused:
        lines += ["", f"Refused before fitting ({len(refused)} runs), e.g. `{refused[0]['refused']}`."]
    longest = max(rows, key=lambda r: r["seconds"])
    lines += [
        "",
        f"{len(rows)} runs, {statistics.mean(r['seconds'] for r in rows):.1f} s each on average; the "
        f"longest, {longest['seconds']:.0f} s, is {longest['method']} with h₀ "
        f"{longest.get('extractor', '?')} (a learned h₀ is trained by the first run of a seed and read "
        "from the extractor cache by the others). Per-run seconds, ε by the PLD and the agent-level ε "
        "are in `experiments/results/fedaux_ablation.json`.",
    ]
    lines += ["", *explanation(record)]
    return "\n".join(lines)


def score_weight_ceiling(regularization: float) -> float:
    """The most eq. (1) can favour one client over another: max fᵢ(x)/fⱼ(x) = e^b.

    A scoring head's norm is at most b = √(2·ln 2/λ) (J(β*) ≤ J(0)) and ‖h̃(x)‖ ≤ 1, so
    fᵢ(x) = σ(sᵢᵀh̃(x)) lies in [σ(−b), σ(b)], whose ratio is e^b.
    """
    return math.exp(math.sqrt(2.0 * math.log(2.0) / regularization))


def explanation(record: dict[str, Any]) -> list[str]:
    """What the ablation shows, in a few sentences whose figures are read from the rows."""
    rows = record["rows"]

    def acc(method: str, options: dict[str, Any], framing: str = "mnist") -> list[float] | None:
        return accuracies(rows, BAR_ALPHA, framing, method, options)

    def paired(a: list[float] | None, b: list[float] | None) -> list[float] | None:
        return None if a is None or b is None else [x - y for x, y in zip(a, b, strict=True)]

    small = {"lambda_": 0.01}
    aux, fedd, fedavg = (acc(m, BUDGET[m]) for m in METHODS)
    figures = {
        "gap": gap(rows, BAR_ALPHA, "mnist", {}),
        "gap_small": gap(rows, BAR_ALPHA, "mnist", small),
        "noise": paired(aux, acc("fedaux-fdp", {"class_privacy": False})),
        "scores_eps": paired(fedd, acc("fedd-p", {"epsilon_classes": EPSILON_CLASSES})),
        "free": paired(acc("fedaux-fdp", {"class_privacy": False}), fedd),
        "free_small": paired(acc("fedaux-fdp", {"class_privacy": False, **small}), acc("fedd-p", {**BUDGET["fedd-p"], **small})),
        "noise_small": paired(acc("fedaux-fdp", {**BUDGET["fedaux-fdp"], **small}),
                              acc("fedaux-fdp", {"class_privacy": False, **small})),
        "weighting_small": paired(acc("fedaux-fdp", {**BUDGET["fedaux-fdp"], **small}),
                                  acc("fedd-p", {"epsilon_classes": EPSILON_CLASSES, **small})),
    }
    others = [gap(rows, BAR_ALPHA, framing, extra) for key, _, framing, extra in ABLATIONS
              if key in ("contrastive", "autoencoder", "paper-sensitivity", "unframed")]
    if any(v is None for v in [*figures.values(), *others, aux, fedd, fedavg]):
        return []
    f = {k: f"{statistics.mean(v):+.3f}" for k, v in figures.items()}  # type: ignore[arg-type]
    means = [statistics.mean(g) for g in others]  # type: ignore[arg-type]
    seeds_behind = sum(d < 0 for d in figures["gap"])  # type: ignore[union-attr]
    default_lambda = 1.0 / math.log(10)
    return [
        f"**What the ablation shows.** On the defaults FedAUXfdp − better baseline = {f['gap']} at "
        f"α = {BAR_ALPHA} (behind in {seeds_behind} of {len(SEEDS)} seeds). Changing the extractor, "
        f"the head sensitivity or the framing moves all three methods together (the gap stays between "
        f"{min(means):+.3f} and {max(means):+.3f}), so none of them is the cause; the certainty "
        f"weighting is. At λ = 1/ln C class-head noise costs nothing (FedAUXfdp with − without it: "
        f"{f['noise']}; FedD+P at ε_classes 0.6 − 0.5: {f['scores_eps']}), yet FedAUXfdp without "
        f"class noise is still {f['free']} against FedD+P: a scoring head's norm is at most "
        f"√(2·ln 2/λ) and ‖h̃‖ ≤ 1, so eq. (1) can favour one client over another by at most "
        f"{score_weight_ceiling(default_lambda):.0f}×, too flat to single out the clients holding "
        f"x's class (and FedAVG+P's plain average of the heads already does as well, "
        f"{statistics.mean(fedavg):.3f}). At the paper's λ = 0.01 (ceiling "
        f"{score_weight_ceiling(0.01):.1e}×) FedAUXfdp without class noise is {f['free_small']} "
        "against FedD+P at ε 0.6, but its class heads' noise, which grows as 1/λ, costs it "
        f"{f['noise_small']}, leaving {f['weighting_small']} against FedD+P at the same class ε and "
        f"{f['gap_small']} against the better baseline, within the seeds' spread. Neither λ gives "
        f"FedAUXfdp a lead at total ε 0.6 here: its best mean ({statistics.mean(aux):.3f}, defaults) "
        f"is below FedD+P's ({statistics.mean(fedd):.3f}, defaults).",
    ]


if __name__ == "__main__":
    if sys.argv[1:] == ["--render"]:  # the section again from the saved rows, nothing rerun
        saved = json.loads((HERE / "results" / "fedaux_ablation.json").read_text())
        save_results("fedaux_ablation", saved, section(saved))
    else:
        main()
