"""Issue 43: what Fashion-MNIST's 3,000-image public pool can teach the default student.

The Bar asks ``fedvote run --dataset fashion-mnist --data-dir DIR --agents 100 --partition
classes --classes-per-agent 6 --epsilon 4.3`` (PATE-FL on its defaults) for test accuracy
≥ 0.85. The voting student learns only from the public pool (30 % of the test split: 3,000
images) and what the agents release about it. This script measures, on that federation
(seed 0), how far the *default* student (fedvote's own: the planned student model, FixMatch
with its self-training rounds, every unlabelled pool image used) gets in the most favourable
cases, with no noise at all:

1. the default student on R pool images with their *true* labels (R = 200, 1,000, 3,000; the
   other pool images unlabelled): the ceiling of a pool student whose labels are perfect;
2. the defaults' teachers (fedvote's own, trained by ``LocalTransport``) voting on every pool
   image *without noise*: how many plurality labels are right, and the default student on all
   3,000 of them (what voting allows at ε = ∞);
3. at the command's agent ε 4.3: one release of Q noisy sums drawn from those clean sums with
   fedvote's σ, on the default (typical) queries and on random ones, the student trained on the
   queries whose noisy gap clears PATE-FL's bar (0.5σ) or on all Q.

Test accuracy on the 7,000 test images. Writes ``experiments/results/fashion_mnist_ceiling.json``
and its section. ``--part student`` (run first by default, ``--part ceiling`` skips it) trains the
default student and one knob each on 200 random pool images with their true labels
(``fashion_mnist_student_capacity.json`` and its section).

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/fashion_mnist_ceiling.py
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import clean_pool_votes, machine, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

from fedvote.data.federation import Federation  # noqa: E402
from fedvote.data.query_selection import choose_queries  # noqa: E402
from fedvote.methods.pate_fl import PateFL  # noqa: E402
from fedvote.models.semi_supervised import ConsistencySettings  # noqa: E402
from fedvote.models.student import train_student  # noqa: E402
from fedvote.models.training import predict_labels  # noqa: E402
from fedvote.runner import make_federation, plan, prepare_public  # noqa: E402
from fedvote.settings import build_config  # noqa: E402

NAME = "fashion_mnist_ceiling"
SEED = 0
EPSILON = 4.3
COMMAND_SETTINGS = {"dataset": "fashion-mnist", "agents": 100, "partition": "classes", "classes_per_agent": 6}
LABELLED_SIZES = (200, 1_000, 3_000)
BAR = 0.85  # issue 43: test accuracy on the command as typed
CAPACITY_NAME = "fashion_mnist_student_capacity"
CAPACITY_LABELLED = 200  # random pool images with their true labels: what a release at ε 4.3 gives, perfectly
DEFAULTS = ConsistencySettings()
# (what, the student's epochs factor, its FixMatch settings): one knob each against the default.
STUDENT_VARIANTS = (
    ("default student", 1, DEFAULTS),
    ("twice the steps (epochs x2, step cap x2)", 2, dataclasses.replace(DEFAULTS, max_steps=2 * DEFAULTS.max_steps)),
    ("wider self-training student (48, 96 channels; default 24, 48)", 1,
     dataclasses.replace(DEFAULTS, relabel_cnn_widths=(48, 96))),
)  # fmt: skip


def default_student_accuracy(
    federation: Federation,
    planned: PateFL,
    indices: np.ndarray,
    labels: np.ndarray,
    *,
    epochs_factor: int = 1,
    consistency: ConsistencySettings | None = None,
) -> float:
    """Test accuracy of the planned student trained on ``labels`` (L,) of pool points ``indices`` (L,).

    The rest of the pool is its unlabelled set, as :func:`fedvote.methods.voting.student_from_labels`
    gives it; ``epochs_factor`` and ``consistency`` change one knob for ``--part student``.
    """
    pool = federation.public.features
    config = planned.student
    if epochs_factor != 1:
        config = dataclasses.replace(config, epochs=epochs_factor * config.planned_epochs)
    student = train_student(
        pool[indices], labels, num_classes=federation.num_classes, config=config, seed=SEED,
        unlabeled=pool[np.setdiff1d(np.arange(pool.shape[0]), indices)],
        semi_supervised=planned.semi_supervised,
        self_training_rounds=planned.self_training_rounds,
        consistency=consistency,
    )  # fmt: skip
    return float((predict_labels(student, federation.test.features) == np.asarray(federation.test.labels)).mean())


def save_record(name: str, rows: list[dict[str, Any]], started: float, render: Any, **extra: Any) -> None:
    """Save ``rows`` under ``name`` with the machine, date, seed, load and wall time; print the section."""
    record = {"name": name, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "seed": SEED, **extra,
              "rows": rows, "load_after": os.getloadavg()[0], "wall_seconds": time.perf_counter() - started}  # fmt: skip
    save_results(name, record, render(record))
    print(render(record))


def ran_line(record: dict[str, Any]) -> str:
    """Where and when a record ran, its wall time and the load at its end."""
    return (f"Ran {record['date']} on {record['machine']}; {record['wall_seconds']:.0f} s wall "
            f"(load {record['load_after']:.1f} at the end).")  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "ceiling", "student"), default="all",
                        help="ceiling: the rows above; student: the default student against one knob each, on "
                             f"{CAPACITY_LABELLED} random pool images with their true labels; all (default): both")  # fmt: skip
    part = parser.parse_args(argv).part
    data_dir = require_data_dir(f"experiments/{NAME}.py", holding="fashion-mnist/")
    started = time.perf_counter()
    config = build_config("pate-fl", data_dir=data_dir, seed=SEED, epsilon=EPSILON, **COMMAND_SETTINGS)
    federation = prepare_public(config, make_federation(config))
    pool_labels = np.asarray(federation.public.labels)
    planned = plan(config, federation.public_metadata())  # the defaults' student and teachers
    assert isinstance(planned, PateFL)
    rows: list[dict[str, Any]] = []
    if part in ("all", "student"):
        student_capacity(federation, planned, started)
    if part == "student":
        return
    started = time.perf_counter()

    def student_accuracy(indices: np.ndarray, labels: np.ndarray) -> float:
        return default_student_accuracy(federation, planned, indices, labels)

    def row(what: str, accuracy: float, **extra: Any) -> None:
        rows.append({"what": what, "accuracy": accuracy, **extra})
        print(f"[{NAME}] {what}: {accuracy:.4f} {extra}", file=sys.stderr, flush=True)

    rng = np.random.default_rng(SEED)
    for size in LABELLED_SIZES:
        begun = time.perf_counter()
        chosen = np.sort(rng.choice(len(pool_labels), size, replace=False))
        row(f"default student, {size:,} pool images with their true labels",
            student_accuracy(chosen, pool_labels[chosen]), right_labels=1.0, labelled=size,
            seconds=time.perf_counter() - begun)  # fmt: skip

    begun = time.perf_counter()
    sums = clean_pool_votes(federation, planned.teacher, SEED)  # (3000, C), noiseless
    everything = np.arange(len(pool_labels))
    plurality = sums.argmax(axis=1)
    right = float((plurality == pool_labels).mean())
    row("default student, all 3,000 pool images with the teachers' clean plurality labels (ε = ∞)",
        student_accuracy(everything, plurality), right_labels=right, labelled=len(everything),
        seconds=time.perf_counter() - begun)  # fmt: skip
    # At the command's agent ε: one release of Q noisy sums (σ from fedvote's planner), drawn as the
    # mechanism draws it from these teachers' clean sums; the same draw for both query rules.
    noise = np.random.default_rng([SEED, 77]).normal(0.0, planned.sigma, size=sums.shape)  # (3000, C)
    for rule in ("typical", "random"):
        chosen = choose_queries(federation.public.features, planned.queries, SEED, rule)  # (Q,)
        noisy = sums[chosen] + noise[chosen]
        labels = noisy.argmax(axis=1)
        ordered = np.sort(noisy, axis=1)
        gaps = ordered[:, -1] - ordered[:, -2]
        for margin in (planned.student_min_margin, 0.0):
            kept = gaps >= margin * planned.sigma
            begun = time.perf_counter()
            row(f"ε {EPSILON}: {rule} queries (Q = {planned.queries}, σ {planned.sigma:.2f}), "
                f"noisy gap ≥ {margin:g}σ kept ({int(kept.sum())})",
                student_accuracy(chosen[kept], labels[kept]),
                right_labels=float((labels[kept] == pool_labels[chosen[kept]]).mean()), labelled=int(kept.sum()),
                seconds=time.perf_counter() - begun)  # fmt: skip
    save_record(NAME, rows, started, section)


def section(record: dict[str, Any]) -> str:
    """The markdown section: one row per case."""
    lines = [
        "## Fashion-MNIST: what the 3,000-image public pool can teach the default student (issue 43's 0.85 bar)",
        "",
        ran_line(record),
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. The federation "
        "of the Bar's command (100 agents, 6 classes each, seed 0). Every student is fedvote's default "
        "for this command on its pixels (`--input-features none`, the default until fedvote 7aef668; "
        "the planned student model, FixMatch and its self-training rounds, every "
        "other pool image unlabelled); no noise except in the ε 4.3 rows (one noise draw, shared by "
        "the rows; σ from fedvote's planner, agent level, δ 1e-3).",
        "",
        "| case | test accuracy | right labels | wall s |",
        "| --- | --- | --- | --- |",
    ]
    for entry in record["rows"]:
        lines.append(f"| {entry['what']} | {entry['accuracy']:.4f} | {entry['right_labels']:.3f} | "
                     f"{entry['seconds']:.0f} |")  # fmt: skip
    best = max(entry["accuracy"] for entry in record["rows"] if not entry["what"].startswith("ε"))
    lines += [
        "",
        "With every pool image labelled, none is left for FixMatch, and the student trains on the "
        "labels alone (the 3,000-true-label row's short wall time); the clean-plurality row's wall time "
        "includes training the teachers. "
        f"The best of these noiseless cases is {best:.4f}: "
        + ("below" if best < BAR else "at or above")
        + f" the Bar's {BAR:.2f}. A voting student on this pool, whose labels at agent ε 4.3 are "
        "fewer and less often right than in any noiseless row here, "
        + ("cannot reach it unless the student itself learns more from the pool than the default does."
           if best < BAR else "is limited by its labels, not by the student."),
    ]
    return "\n".join(lines)


def student_capacity(federation: Federation, planned: PateFL, started: float) -> None:
    """The default student against one knob each, on the same true labels; writes its own section."""
    pool_labels = np.asarray(federation.public.labels)
    chosen = np.sort(np.random.default_rng(SEED).choice(len(pool_labels), CAPACITY_LABELLED, replace=False))
    rows = []
    for what, factor, settings in STUDENT_VARIANTS:
        begun = time.perf_counter()
        accuracy = default_student_accuracy(
            federation, planned, chosen, pool_labels[chosen], epochs_factor=factor, consistency=settings
        )
        rows.append({"what": what, "accuracy": accuracy, "seconds": time.perf_counter() - begun})
        print(f"[{CAPACITY_NAME}] {what}: {accuracy:.4f}", file=sys.stderr, flush=True)
    epochs = planned.student.planned_epochs
    save_record(CAPACITY_NAME, rows, started, capacity_section, labelled=CAPACITY_LABELLED, epochs=epochs)


def capacity_section(record: dict[str, Any]) -> str:
    """The markdown section of ``--part student``."""
    lines = [
        "## Fashion-MNIST: the default student against one knob each (issue 43's 0.85 bar)",
        "",
        ran_line(record),
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py --part student`. "
        f"The Bar's federation (seed 0); {record['labelled']} random pool images with their true labels, the "
        "rest of the pool unlabelled; each row changes one setting of the default student "
        f"(FixMatch and one self-training round, {record['epochs']} epochs) and trains on the same labels.",
        "",
        "| student | test accuracy | wall s |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {row['what']} | {row['accuracy']:.4f} | {row['seconds']:.0f} |" for row in record["rows"]]
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
