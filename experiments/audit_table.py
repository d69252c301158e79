"""Audit every method that claims an ε, at each level it protects, and write the table in docs/privacy.md.

Usage (from the repository root; about a quarter of an hour on 2 shared cores):

    .venv/bin/python experiments/audit_table.py            # run every row, save, render
    .venv/bin/python experiments/audit_table.py --render   # rewrite the section from the saved rows
    .venv/bin/python experiments/audit_table.py --only secure-noise,labels  # re-run those variants, merge
    .venv/bin/python experiments/audit_table.py --methods dp-fedsgd,prifedsync  # re-run those methods' rows, merge

Each row is one ``fedvote audit`` (its command is in the table) on digits with the method's
defaults, σ calibrated to --epsilon 4 (δ = 1e-3) as ``fedvote run`` would. Results go to
``experiments/results/audit.json``; the section between the audit-table markers of
docs/privacy.md is rebuilt from it. A lower bound above its claimed ε is a privacy bug: the
script then writes nothing to the docs, names the rows, and exits 1. The column "code under
audit" says what each audit executed (:func:`code_under_audit`): the release code, or the
method's own run on record canaries (DP-FedSGD, PriFedSync: their trainer; DP-FedAvg, every
noise mode: client sampling, local training, the agents' shares and the secure sum or the
server's noise); one-run rows state their ceiling, the most one run of that many canaries can
show at δ.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

from fedvote.audit import audit_config
from fedvote.audit.one_run import ceiling
from fedvote.methods.registry import METHOD_NAMES
from fedvote.progress import NO_PROGRESS
from fedvote.runner import build_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import machine  # noqa: E402  (the experiments' shared machine line)

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "audit.json"
DOC = HERE.parent / "docs" / "privacy.md"
START, END = "<!-- audit-table:start -->", "<!-- audit-table:end -->"

NOISE_SEED = 1
MULTI_TRIALS = 20_000  # releases on each neighbour
ONE_RUN_CANARIES = 200  # one run: 2·m·δ = 0.4 at δ = 1e-3 (Steinke et al.'s δ term grows with m)

# (method, level, trials[, variant]): every method of `fedvote run --help` with a finite ε at
# that level, and the variants of a release (VARIANTS) audited beside the plain one.
ROWS: tuple[tuple[str, str, int] | tuple[str, str, int, str], ...] = (
    ("pate-fl", "agent", MULTI_TRIALS),
    ("pate-fl", "instance", MULTI_TRIALS),
    ("private-knn-fl", "agent", MULTI_TRIALS),
    ("private-knn-fl", "instance", MULTI_TRIALS),
    ("weighted-pate", "agent", MULTI_TRIALS),
    ("weighted-pate", "instance", MULTI_TRIALS),
    ("fedaux-fdp", "agent", MULTI_TRIALS),
    ("fedaux-fdp", "instance", MULTI_TRIALS),
    ("fedd-p", "agent", MULTI_TRIALS),
    ("fedd-p", "instance", MULTI_TRIALS),
    ("fedavg-p", "agent", MULTI_TRIALS),
    ("fedavg-p", "instance", MULTI_TRIALS),
    ("dp-fedavg", "agent", ONE_RUN_CANARIES),
    ("dp-fedavg", "instance", ONE_RUN_CANARIES),
    ("dp-fedsgd", "instance", ONE_RUN_CANARIES),
    ("prifedsync", "instance", ONE_RUN_CANARIES),
    ("pate-fl", "agent", 4_000, "secure-noise"),
    ("pate-fl", "agent", MULTI_TRIALS, "labels"),
    ("dp-fedavg", "agent", ONE_RUN_CANARIES, "server-noise"),
    ("dp-fedavg", "instance", ONE_RUN_CANARIES, "server-noise"),
    ("dp-fedavg", "agent", ONE_RUN_CANARIES, "unmasked"),
    ("dp-fedavg", "instance", ONE_RUN_CANARIES, "unmasked"),
)

# A variant's run settings and flags (DP-FedAvg's noise modes: one run, as its default). Secure noise: OpenDP's exact sampler costs ~15 µs a
# value, so that row runs a smaller federation (10 agents, 20 queries) and fewer trials
# (about 4 min); it cannot be seeded. Labels: Confident-GNMax's pass bits and labels.
VARIANTS: dict[str, tuple[dict[str, object], str]] = {
    "": ({}, ""),
    "secure-noise": (
        {"secure_noise": True, "agents": 10, "queries": 20},
        " --secure-noise --agents 10 --queries 20",
    ),
    "labels": ({"release": "labels"}, " --release labels"),
    "server-noise": ({"noise": "server"}, " --noise server"),
    "unmasked": ({"noise": "distributed-unmasked"}, " --noise distributed-unmasked"),
}

# Methods of `fedvote run --help` that claim no finite ε at any level: nothing to audit.
NOT_PRIVATE = {
    "fedavg": "not private (no noise)",
    "majority-vote": "not private (noiseless votes)",
    "fedaux-f": "not private (FedAUX+F's SGD heads carry no noise: ε = ∞)",
}
# Private methods without a row of their own, and why.
NOT_AUDITED = {
    "dp-fedavg-multilabel": "DP-FedAvg's noise, clipping and events on BCE updates (the dp-fedavg rows)",
    "pate-fl-multilabel": "no audit of τ-clipped multi-label votes yet",
}
# The FedAUX family takes its budget per head (--epsilon-scores/--epsilon-classes; their
# defaults: ε 4 in all); every other method is calibrated to --epsilon 4.
PER_HEAD_BUDGET = frozenset({"fedaux-fdp", "fedd-p", "fedavg-p"})

# Levels a private method does not protect (ε = ∞ by its accounting).
UNPROTECTED = {
    "dp-fedsgd": "agent",
    "prifedsync": "agent",
}


def settings(method: str, variant: str = "") -> dict[str, object]:
    """The run settings of ``method``'s row: --epsilon 4 unless it budgets per head; the variant's."""
    extra, _ = VARIANTS[variant]
    base: dict[str, object] = {} if method in PER_HEAD_BUDGET else {"epsilon": 4.0}
    if not extra.get("secure_noise"):
        base["noise_seed"] = NOISE_SEED
    return {**base, **extra}


def command(method: str, level: str, trials: int, variant: str = "") -> str:
    """The command line that reproduces one row."""
    budget = "" if method in PER_HEAD_BUDGET else " --epsilon 4"
    flags = VARIANTS[variant][1]
    seed = "" if "secure_noise" in VARIANTS[variant][0] else f" --noise-seed {NOISE_SEED}"
    return f"fedvote audit --method {method} --level {level} --trials {trials}{budget}{flags}{seed} --json"


def unpack(row: tuple[str, str, int] | tuple[str, str, int, str]) -> tuple[str, str, int, str]:
    """(method, level, trials, variant) of a ROWS entry (variant "" for the plain release)."""
    return (row[0], row[1], row[2], row[3] if len(row) == 4 else "")  # type: ignore[misc]


def code_under_audit(row: dict) -> str:
    """What the row's audit executed: its own statement, else (rows saved before it was stated) by mode.

    Multi-trial audits release through the run's own agent code (``Agent.release``); the one-run
    audits run the method's own run (rows saved before they stated it: an accounting check only).
    """
    stated = row["details"].get("code_under_audit")
    if stated:
        return str(stated)
    if row["mode"] != "one-run":
        return "the release code (the agents' exit, Agent.release)"
    if row["method"] == "dp-fedavg":
        return "accounting check only (crafted updates through Agent.release; no training round)"
    return "accounting check only (DP-SGD re-simulated; the trainer not run)"


def run_rows(only: frozenset[str] | None = None, methods: frozenset[str] | None = None) -> dict:
    """Every row's audit (``only``: the rows of those variants; ``methods``: of those methods), as a record."""
    covered = {row[0] for row in ROWS} | set(NOT_PRIVATE) | set(NOT_AUDITED)
    missing = set(METHOD_NAMES) - covered
    if missing:
        raise SystemExit(f"audit_table: methods with no row and no reason: {', '.join(sorted(missing))}")
    rows = []
    started = time.perf_counter()
    for method, level, trials, variant in map(unpack, ROWS):
        if (only is not None and variant not in only) or (methods is not None and method not in methods):
            continue
        config = build_config(method=method, **settings(method, variant))
        result = audit_config(config, level, trials, progress=NO_PROGRESS)
        row = {**result.to_dict(), "variant": variant, "command": command(method, level, trials, variant)}
        rows.append(row)
        print(
            f"{method:>15} {variant:>12} {level:>8}: claimed {result.claimed_epsilon:8.3f}  lower bound "
            f"{result.epsilon_lower_bound:6.3f}  ({result.seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return {
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "total_seconds": time.perf_counter() - started,
        "rows": rows,
    }


def section(record: dict) -> str:
    """The markdown table and its notes."""
    lines = [
        START,
        f"Made by `experiments/audit_table.py` ({record['date']}, {record['total_seconds'] / 60:.1f} min on "
        f"{record['machine']}); digits, each method's defaults, σ calibrated to ε 4 at the method's own "
        "level as `fedvote run` does (the FedAUX family: its default per-head budgets), δ = 1e-3, 95 % "
        "confidence."
        + (
            f" Rerun on {record['rerun']['date']} ({record['rerun']['machine']}): "
            + ", ".join(record["rerun"]["rows"])
            + "."
            if record.get("rerun")
            else ""
        ),
        "",
        "| method | level | claimed ε | lower bound | mode | code under audit | trials | canary | test | command |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["rows"]:
        mode = "one run" if row["mode"] == "one-run" else "multi-trial"
        unit = "canaries" if row["mode"] == "one-run" else "per neighbour"
        test = (
            "per-canary subsampled-Gaussian LR, Steinke et al. Thm 5.2"
            if row["mode"] == "one-run"
            else (f"LR projection, threshold from 30 %, CP on 70 % ({row['details']['direction']})")
        )
        if row["details"].get("code_under_audit", "").startswith("the method's own run"):
            test = "per-canary change of W[y⁺, k] − W[y⁻, k] in its client's updates, Steinke et al. Thm 5.2"
            if row["method"] == "dp-fedavg":
                seen = "q·N·(θ' − θ)" if row["details"].get("noise") == "server" else "each round's secure sum"
                test = f"per-canary subsampled-Gaussian LR of W[y⁺, k] − W[y⁻, k] in {seen}, Steinke et al. Thm 5.2"
        variant = row.get("variant", "")
        if variant == "labels":
            test = (
                "LR of the per-query outcomes (unanswered / label), ratios from "
                f"{row['details']['pilot_trials']:,} pilot releases, threshold from 30 %, CP on 70 %"
            )
        if variant == "unmasked":
            test = "per-canary Gaussian LR of its own updates in the rounds it was seen sampled, Steinke et al. Thm 5.2"
        if row["mode"] == "one-run":  # a function of m, δ and the confidence alone (rows saved before it)
            top = row["details"].get("ceiling", ceiling(row["trials"], row["delta"], row["confidence"]))
            test += f" (ceiling {top:.2f}: every guess right)"
        name = row["method"] + (f" ({variant})" if variant else "")
        lines.append(
            f"| {name} | {row['level']} | {row['claimed_epsilon']:.3f} | "
            f"{row['epsilon_lower_bound']:.3f} | {mode} | {code_under_audit(row)} | {row['trials']:,} {unit} | "
            f"{row['canary']} | "
            f"{test} | `{row['command']}` |"
        )
    lines.append("")
    lines.append(
        "Not audited: "
        + "; ".join(f"{name}: {why}" for name, why in {**NOT_PRIVATE, **NOT_AUDITED}.items())
        + "; "
        + "; ".join(
            f"{name} at the {level} level (ε = ∞ by its accounting)" for name, level in UNPROTECTED.items()
        )
        + "."
    )
    lines.append(END)
    return "\n".join(lines)


def render(record: dict) -> None:
    """Replace the section between the markers of docs/privacy.md (refuses to publish a violation)."""
    violations = [row for row in record["rows"] if row["epsilon_lower_bound"] > row["claimed_epsilon"]]
    if violations:
        for row in violations:
            print(
                f"audit_table: PRIVACY BUG {row['method']} {row['level']}: lower bound "
                f"{row['epsilon_lower_bound']:.3f} > claimed {row['claimed_epsilon']:.3f}",
                file=sys.stderr,
            )
        raise SystemExit(1)
    text = DOC.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"audit_table: {DOC} has no {START} ... {END} markers")
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    DOC.write_text(before + section(record) + after)


def merged(saved: dict, fresh: dict) -> dict:
    """``saved``'s record with the rows of ``fresh`` put in (same method, level and variant replaced)."""
    def key(row: dict) -> tuple[str, str, str]:
        return (row["method"], row["level"], row.get("variant", ""))

    replaced = {key(row): row for row in fresh["rows"]}
    rows = [replaced.pop(key(row), row) for row in saved["rows"]] + list(replaced.values())
    rerun = [f"{row['method']} {row['level']}" + (f" ({row['variant']})" if row.get("variant") else "")
             for row in fresh["rows"]]  # fmt: skip
    earlier = [name for name in saved.get("rerun", {}).get("rows", []) if name not in rerun]
    rerun = earlier + rerun  # every row rerun since the full run
    return {
        **saved,
        "rows": rows,
        "total_seconds": saved["total_seconds"] + fresh["total_seconds"],
        "rerun": {"date": fresh["date"], "machine": fresh["machine"], "rows": rerun},
    }


def main(argv: list[str]) -> None:
    if "--render" in argv:
        record = json.loads(RESULT.read_text())
    else:
        only = methods = None
        if "--methods" in argv:
            methods = frozenset(argv[argv.index("--methods") + 1].split(","))
        if "--only" in argv:
            only = frozenset(argv[argv.index("--only") + 1].split(","))
            unknown = only - set(VARIANTS)
            if unknown:
                raise SystemExit(f"audit_table: unknown variants {', '.join(sorted(unknown))}")
        record = run_rows(only, methods)
        if only is not None or methods is not None:
            record = merged(json.loads(RESULT.read_text()), record)
        RESULT.parent.mkdir(exist_ok=True)
        RESULT.write_text(json.dumps(record, indent=2) + "\n")
    render(record)


if __name__ == "__main__":
    main(sys.argv[1:])
