"""Issue 43 item 3d: Fashion-MNIST, the voting paper's non-IID command as typed and every method on its defaults.

Table 3d has two parts, every run a fresh ``fedvote`` process on its defaults (nothing else
typed), one after the other:

a. **The Bar command**: ``fedvote run --dataset fashion-mnist --data-dir DIR --agents 100
   --partition classes --classes-per-agent 6 --epsilon 4.3 --seed s --noise-seed s`` for
   s = 0, 1, 2 (PATE-FL; 100 agents × 600 records of 6 classes each, the public pool 30 % of
   the test split — 3,000 images — and the other 7,000 the test set; agent ε 4.3, δ 1e-3).
   Issue 43's bar: test accuracy ≥ 0.85 at agent ε ≤ 4.3. DP-FedAvg runs the same command
   (``--method dp-fedavg``) at the same seeds: the paper's Table 1 non-iid row compares the two.
b. **Every registered method** (:data:`fedvote.methods.METHODS`) with a 20-agent federation:
   ``fedvote run --method M --dataset fashion-mnist --data-dir DIR --agents 20`` (iid, ε 4 at
   the method's own level, δ 1e-3), at seed 0 as typed and at ``--seed s --noise-seed s`` for
   s = 1, 2.

The wall time includes start-up; CPU seconds are the child's user + system time; the 1-minute
load average is recorded before and after each run (the 2-core host is shared). Results are
saved after every run and a rerun skips the runs already saved (``--fresh`` starts over), so a
stopped experiment keeps what it measured. Writes ``experiments/results/fashion_mnist.json``
and its docs/results.md section (``experiments/run.py`` places it, between its markers).

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/fashion_mnist.py \
        [--part a|b|both] [--seeds 0,1,2] [--methods pate-fl,fedavg] [--fresh] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from benchmarks.common import fedvote_command  # noqa: E402
from run import code_version, machine, refuse, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

from fedvote.methods import METHODS  # noqa: E402

NAME = "fashion_mnist"
BAR_FLAGS = (
    "--dataset", "fashion-mnist", "--agents", "100", "--partition", "classes", "--classes-per-agent", "6",
    "--epsilon", "4.3",
)  # fmt: skip
BAR_COMMAND = (
    "fedvote run --dataset fashion-mnist --data-dir DIR --agents 100 --partition classes "
    "--classes-per-agent 6 --epsilon 4.3"
)
EVERY_FLAGS = ("--dataset", "fashion-mnist", "--agents", "20")
EVERY_COMMAND = "fedvote run --method M --dataset fashion-mnist --data-dir DIR --agents 20"
SEEDS = (0, 1, 2)
# Part (a) runs the Bar command (PATE-FL, the default method) and DP-FedAvg on it: the voting
# paper's Table 1 non-iid row compares the two at equal agent ε.
BAR_METHODS = ("pate-fl", "dp-fedavg")
BAR_ACCURACY = 0.85
BAR_EPSILON = 4.3


def one_run(data_dir: str, flags: tuple[str, ...]) -> dict[str, Any]:
    """``fedvote run`` with ``flags`` in a fresh process: its result's figures, wall and CPU time, load."""
    with tempfile.TemporaryDirectory() as out:
        load_before = os.getloadavg()[0]
        cpu_before = os.times()
        started = time.perf_counter()
        finished = subprocess.run(
            [*fedvote_command(), "run", *flags, "--data-dir", data_dir, "--out", out],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
        cpu_after = os.times()
        load_after = os.getloadavg()[0]
        timing = {
            "wall_seconds": wall,
            "cpu_seconds": (cpu_after.children_user - cpu_before.children_user)
            + (cpu_after.children_system - cpu_before.children_system),
            "load_before": load_before,
            "load_after": load_after,
            "commit": code_version().removeprefix("commit "),
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        if finished.returncode != 0:
            # A refusal (exit status 2, one "fedvote: error: ..." line) is a result of the defaults too.
            errors = [line for line in finished.stderr.splitlines() if line.startswith("fedvote: error:")]
            message = errors[-1] if errors else (finished.stderr.strip().splitlines() or ["(no message)"])[-1]
            return {"accuracy": None, "refused": message, "exit_status": finished.returncode, **timing}
        result = json.loads((Path(out) / "result.json").read_text())
    privacy = result["privacy"]
    details = result  # result.json holds a method's details at its top level
    return {
        "accuracy": result["accuracy"],
        "label_accuracy": result.get("label_accuracy"),
        "epsilon_agent": privacy["agent"]["epsilon"],
        "epsilon_instance": privacy["instance"]["epsilon"],
        "delta": privacy["delta"],
        "sigma": result.get("sigma"),
        "queries": result.get("queries"),
        "student_queries": details.get("student_queries"),
        "teacher_model": details.get("teacher_model"),
        "teacher_epochs": details.get("teacher_epochs"),
        "timings": result.get("timings"),
        **timing,
    }


def _epsilon(value: float | None) -> str:
    return "∞" if value is None or value == float("inf") else f"{value:.3f}"


def _labels(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def bar_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Part (a): one row per seed, then the verdict."""
    lines = [
        f"**(a) The Bar command**: `{BAR_COMMAND} --seed s --noise-seed s` (PATE-FL on its defaults).",
        "",
        "| seed | test accuracy | pseudo-label accuracy | labels used / queries | σ | agent ε | δ "
        "| wall s | CPU s | load before → after | commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    refused = [r for r in runs if r.get("refused")]
    runs = [r for r in runs if not r.get("refused")]
    for run in refused:
        lines.append(
            f"| {run['seed']} | refused: {run['refused'].removeprefix('fedvote: error: ')} |" + " |" * 9
        )
    for run in sorted(runs, key=lambda r: r["seed"]):
        lines.append(
            f"| {run['seed']} | {run['accuracy']:.4f} | {_labels(run['label_accuracy'])} "
            f"| {run.get('student_queries') or '—'} / {run.get('queries') or '—'} | {run['sigma']:.2f} "
            f"| {_epsilon(run['epsilon_agent'])} | {run['delta']:g} | {run['wall_seconds']:.0f} "
            f"| {run['cpu_seconds']:.0f} | {run['load_before']:.1f} → {run['load_after']:.1f} | {run['commit']} |"
        )
    if runs:
        accuracies = [r["accuracy"] for r in runs]
        mean = statistics.mean(accuracies)
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        epsilon = max(r["epsilon_agent"] for r in runs)
        reached = sum(a >= BAR_ACCURACY for a in accuracies)
        met = not refused and reached == len(runs) and epsilon <= BAR_EPSILON + 1e-9
        lines += [
            "",
            f"Mean {mean:.4f} ± {spread:.4f} (lowest {min(accuracies):.4f}); {reached} of {len(runs)} seeds at "
            f"{BAR_ACCURACY} or above, agent ε at most {epsilon:.4f}; wall time "
            f"{min(r['wall_seconds'] for r in runs):.0f}–{max(r['wall_seconds'] for r in runs):.0f} s. "
            f"Issue 43's bar (≥ {BAR_ACCURACY} at agent ε ≤ {BAR_EPSILON}): "
            f"**{'met on every seed' if met else 'not met on every seed'}**.",
        ]
    return lines


def claim_lines(voting: list[dict[str, Any]], rival: list[dict[str, Any]]) -> list[str]:
    """Part (a)'s DP-FedAvg rows on the Bar command and whether the voting paper's claim holds there."""
    runs = [r for r in rival if not r.get("refused")]
    if not runs:
        return []
    lines = [
        "",
        f"**DP-FedAvg on the same command**: `{BAR_COMMAND} --method dp-fedavg --seed s --noise-seed s`.",
        "",
        "| seed | test accuracy | agent ε | instance ε | wall s | CPU s | load before → after | commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['seed']} | {r['accuracy']:.4f} | {_epsilon(r['epsilon_agent'])} | {_epsilon(r['epsilon_instance'])} "
        f"| {r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | {r['load_before']:.1f} → {r['load_after']:.1f} "
        f"| {r['commit']} |"
        for r in sorted(runs, key=lambda r: r["seed"])
    ]
    theirs = {r["seed"]: r["accuracy"] for r in runs}
    ours = {r["seed"]: r["accuracy"] for r in voting if not r.get("refused") and r["seed"] in theirs}
    if ours:
        ahead = sum(ours[s] > theirs[s] for s in ours)
        verdict = (
            "holds" if ahead == len(ours) else "does not hold" if ahead == 0 else "holds on some seeds only"
        )
        lines += [
            "",
            f"**The voting paper's claim (Table 1, non-iid: PATE-FL above DP-FedAvg at equal agent ε) on "
            f"Fashion-MNIST: {verdict}**: PATE-FL {statistics.mean(ours.values()):.4f} against DP-FedAvg "
            f"{statistics.mean(theirs[s] for s in ours):.4f} (mean over seeds {', '.join(str(s) for s in sorted(ours))}); "
            f"PATE-FL ahead on {ahead} of {len(ours)} seeds.",
        ]
    return lines


def every_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Part (b): one row per method, its seeds' accuracies side by side."""
    seeds = sorted(set(SEEDS) | {key(r)[1] for r in runs})
    lines = [
        f"**(b) Every method on its defaults, 20 agents**: `{EVERY_COMMAND}` (iid; ε 4 at the method's own "
        "level, δ 1e-3; FedAvg, majority vote and FedAUX+F are not private). Seed 0 is the command as typed "
        "(`--seed` 0, noise drawn from the OS); seeds 1 and 2 add `--seed s --noise-seed s`. Accuracies in "
        "seed order ('—': not run yet), then mean ± sample std over the seeds run; ε, wall and CPU seconds: "
        "the largest over the seeds; the load: the lowest before → the highest after.",
        "",
        f"| method | test accuracy, seeds {', '.join(str(s) for s in seeds)} | mean ± std | pseudo-label "
        "accuracy, mean | agent ε | instance ε | wall s | CPU s | load | commits |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for method in sorted({r["method"] for r in runs}):
        mine = {key(r)[1]: r for r in runs if r["method"] == method}
        timing = (
            f"| {max(r['wall_seconds'] for r in mine.values()):.0f} | {max(r['cpu_seconds'] for r in mine.values()):.0f} "
            f"| {min(r['load_before'] for r in mine.values()):.1f} → {max(r['load_after'] for r in mine.values()):.1f} "
            f"| {', '.join(sorted({r.get('commit', '') for r in mine.values()}))} |"
        )
        refused = [r for r in mine.values() if r.get("refused")]
        if refused:
            lines.append(
                f"| {method} | refused: {refused[0]['refused'].removeprefix('fedvote: error: ')} | | | | "
                + timing
            )
            continue
        accuracies = [mine[s]["accuracy"] for s in seeds if s in mine]
        spread = f" ± {statistics.stdev(accuracies):.4f}" if len(accuracies) > 1 else ""
        labels = [r["label_accuracy"] for r in mine.values() if r.get("label_accuracy") is not None]
        per_seed = ", ".join(f"{mine[s]['accuracy']:.4f}" if s in mine else "—" for s in seeds)
        lines.append(
            f"| {method} | {per_seed} "
            f"| {statistics.mean(accuracies):.4f}{spread} | {_labels(statistics.mean(labels) if labels else None)} "
            f"| {_epsilon(_largest(r['epsilon_agent'] for r in mine.values()))} "
            f"| {_epsilon(_largest(r['epsilon_instance'] for r in mine.values()))} " + timing
        )
    return lines


def _largest(values: Any) -> float | None:
    """The largest ε of a method's seeds (None, unbounded, counts as ∞)."""
    values = [float("inf") if v is None else v for v in values]
    return max(values)


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    bar = [r for r in record["runs"] if r["part"] == "a" and r["method"] == "pate-fl"]
    rival = [r for r in record["runs"] if r["part"] == "a" and r["method"] == "dp-fedavg"]
    every = [r for r in record["runs"] if r["part"] == "b"]
    lines = [
        "## Fashion-MNIST: the voting paper's non-IID command and every method on its defaults (issue 43, table 3d)",
        "",
        f"Ran {record['date']} on {record['machine']} (each row names the commit it ran).",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`; every run is a "
        "fresh `fedvote` process, one after the other, on Fashion-MNIST's official IDX files. Wall time "
        "includes start-up; CPU s is the process's user + system time; the load average (1 minute) is given "
        "before → after each run: the 2-core host is shared, and wall time moves with it.",
        "",
        *bar_lines(bar),
        *claim_lines(bar, rival),
        "",
        *every_lines(every),
    ]
    missing = sorted(set(record.get("methods", [])) - {r["method"] for r in every})
    if missing:
        lines += ["", f"Not run (the experiment was stopped first): {', '.join(missing)}."]
    # Notes added by hand to the saved record (what was stopped, and why), shown as written.
    lines += [line for note in record.get("notes", []) for line in ("", note)]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Run the parts asked for, saving after every run, then write the results and the section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("a", "b", "both"), default="both")
    parser.add_argument("--seeds", default=",".join(str(s) for s in SEEDS), help="both parts (default 0,1,2)")
    parser.add_argument(
        "--methods", default=None,
        help="part b (default: every method, its saved runs kept; methods named here are run again)",
    )  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="forget the saved runs and run everything again")
    parser.add_argument(
        "--render", action="store_true", help="rewrite the section from the saved results only"
    )
    args = parser.parse_args(argv)
    path = HERE / "results" / f"{NAME}.json"
    if args.render:
        saved = json.loads(path.read_text())
        save_results(NAME, saved, section(saved))
        return
    script = f"experiments/{NAME}.py"
    data_dir = require_data_dir(script, holding="fashion-mnist/")
    methods = (
        tuple(sorted(METHODS)) if args.methods is None else tuple(m for m in args.methods.split(",") if m)
    )
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        refuse(script, f"--methods: unknown {', '.join(unknown)}; choose from {', '.join(sorted(METHODS))}")
    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s)
    except ValueError:
        refuse(script, f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if args.fresh and path.exists():
        path.unlink()
    record: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": []}
    record.update(name=NAME, machine=machine(), date=time.strftime("%Y-%m-%d"), methods=sorted(METHODS))
    again: frozenset[tuple[str, int, str]] = frozenset()
    if args.part in ("b", "both") and args.methods is not None:
        # methods named again: their part (b) rows are measured anew (e.g. after a default changed)
        again = frozenset(("b", s, m) for s in seeds for m in methods)
        record["runs"] = [r for r in record["runs"] if key(r) not in again]
    done = {key(r) for r in record["runs"]}
    jobs: list[tuple[str, int, str, tuple[str, ...]]] = []
    if args.part in ("a", "both"):
        jobs += [
            (
                "a",
                s,
                m,
                (
                    *BAR_FLAGS,
                    *(() if m == "pate-fl" else ("--method", m)),
                    "--seed",
                    str(s),
                    "--noise-seed",
                    str(s),
                ),
            )
            for m in BAR_METHODS
            for s in seeds
        ]
    if args.part in ("b", "both"):
        jobs += [
            ("b", s, m, ("--method", m, *EVERY_FLAGS, *every_seed_flags(s))) for s in seeds for m in methods
        ]
    for part, seed, method, flags in jobs:
        if (part, seed, method) in done:
            continue
        run = {"part": part, "seed": seed, "method": method, **one_run(data_dir, flags)}
        record["runs"].append(run)
        figure = "refused" if run["accuracy"] is None else f"{run['accuracy']:.4f}"
        print(f"[{NAME}] ({part}) {method} seed {seed}: {figure} in {run['wall_seconds']:.0f} s "
              f"(load {run['load_after']:.1f})", file=sys.stderr, flush=True)  # fmt: skip
        print(json.dumps(run), file=sys.stderr, flush=True)  # the whole row, for the log
        save(path, record, again)
    save(path, record, again)
    print(section(record))


def every_seed_flags(seed: int) -> tuple[str, ...]:
    """Part (b)'s seed flags: none at seed 0 (the command as typed: ``--seed`` 0, noise from the OS), else ``--seed s --noise-seed s``."""
    return () if seed == 0 else ("--seed", str(seed), "--noise-seed", str(seed))


def key(run: dict[str, Any]) -> tuple[str, int, str]:
    """What identifies a run: its part, seed and method (part (b) rows saved without a seed ran as typed: seed 0)."""
    return run["part"], 0 if run.get("seed") is None else int(run["seed"]), run["method"]


def save(path: Path, record: dict[str, Any], dropped: frozenset[tuple[str, int, str]] = frozenset()) -> None:
    """Save ``record`` with the runs another process saved meanwhile (parts a and b may run side by side).

    ``dropped``: the keys this process measures anew — their saved rows are not brought back.
    """
    if path.exists():
        mine = {key(r) for r in record["runs"]} | dropped
        record["runs"] += [r for r in json.loads(path.read_text())["runs"] if key(r) not in mine]
    save_results(NAME, record, section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
