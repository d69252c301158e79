"""Issue 43: what each refinement of the public patch features gives PATE-FL on CIFAR-10.

The CIFAR-10 command's records are seen through φ, Coates–Ng patch features fitted on the
public pool alone (``fedvote.models.patch_features``). This script maps the Bar's federation
(100 agents, Dirichlet α = 0.5, seed 0) through four versions of φ and runs PATE-FL's defaults
on each — logistic teachers (fedvote's batched trainer), dense votes on all 3,000 pool images,
the ridge student fitted to the sums — at agent ε 4, clean and with ``DRAWS`` noise draws:

1. Coates & Ng as published: 400 learned filters, 3,200 features (the defaults until 453107d);
2. the square root of every pooled code (Perronnin, Sánchez & Mensink 2010);
3. mirror-symmetric: 200 filters learned on the pool's patches and their left-right mirrors,
   the other 200 their mirrors, each pooled code averaged with its mirror's (1,600 features,
   φ(mirror x) = φ(x); the same convolutions);
4. both (the defaults now);
5. the defaults with twice the filters: 400 learned and their mirrors (3,200 features);
6. the defaults pooled over a 3×3 grid instead of quadrants (3,600 features).

Rows 5 and 6 ask whether a larger φ is the lever for the Bar's 0.60: beside each row's clean and
noisy sums is the ridge student on the pool's *true* labels (what 3,000 right labels could teach
through that φ; a reference, not a release). φ reads the pool only, so every version costs no ε and σ is the same for all (the planner's, Q =
3,000, δ 1e-3). Writes ``experiments/results/cifar10_feature_map.json`` and its section.

Usage (repository root; ``--render`` rewrites the section from the saved results only)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/cifar10_feature_map.py [--render]
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cifar10_ceiling import COMMAND_SETTINGS, EPSILON, SEED  # noqa: E402  (the same federation and ε)
from cifar10_release_variants import DRAWS, ridge_accuracy  # noqa: E402  (the defaults' student)
from run import machine, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

from fedvote.data.federation import Federation, LabeledData  # noqa: E402
from fedvote.models.ensemble import fit_ensemble  # noqa: E402
from fedvote.models.input_features import pool_standardisation  # noqa: E402
from fedvote.models.patch_features import PatchSettings, fit_patch_features  # noqa: E402
from fedvote.runner import make_federation, plan  # noqa: E402
from fedvote.settings import build_config  # noqa: E402

NAME = "cifar10_feature_map"
CHUNK = 1_000  # images mapped at a time
VARIANTS = (
    ("Coates–Ng as published: 400 learned filters (the defaults until 453107d)",
     {"mirror_symmetric": False, "square_root": False}),
    ("square root of the pooled codes", {"mirror_symmetric": False, "square_root": True}),
    ("mirror-symmetric: 200 learned filters and their mirrors", {"mirror_symmetric": True, "square_root": False}),
    ("mirror-symmetric and square-rooted (the defaults now)", {"mirror_symmetric": True, "square_root": True}),
    ("the defaults with 400 learned filters and their mirrors", {"filters": 800}),
    ("the defaults pooled over a 3×3 grid", {"grid": 3}),
)  # fmt: skip
DEFAULTS_ROW = 3  # VARIANTS[3] is the map fedvote's defaults fit (PatchSettings())


def seen_through(federation: Federation, settings: PatchSettings) -> Federation:
    """``federation`` mapped by φ of ``settings`` fitted on its pool, standardised by the pool (as the runner does)."""
    module = fit_patch_features(federation.public.features, seed=SEED, settings=settings)

    def raw(part: LabeledData) -> np.ndarray:
        images = np.asarray(part.features)
        with torch.no_grad():
            chunks = [
                module(torch.as_tensor(images[start : start + CHUNK], dtype=torch.float32)).numpy()
                for start in range(0, len(part), CHUNK)
            ]
        return np.concatenate(chunks)  # (n, dim)

    pool = raw(federation.public)
    centre, scale = pool_standardisation(pool)

    def mapped(part: LabeledData, features: np.ndarray | None = None) -> LabeledData:
        out = raw(part) if features is None else features
        return dataclasses.replace(part, features=(out - centre) / scale)

    return dataclasses.replace(
        federation,
        public=mapped(federation.public, pool),
        agents=tuple(mapped(agent) for agent in federation.agents),
        test=mapped(federation.test),
        example_shape=(module.dim,),
        input_features="patch",
    )


def main(argv: list[str]) -> None:
    if argv == ["--render"]:  # the section again from the saved results
        record = json.loads((HERE / "results" / f"{NAME}.json").read_text())
        save_results(NAME, record, section(record))
        return
    data_dir = require_data_dir(f"experiments/{NAME}.py", holding="cifar10/")
    started = time.perf_counter()
    config = build_config("pate-fl", data_dir=data_dir, seed=SEED, epsilon=EPSILON, **COMMAND_SETTINGS)
    raw = make_federation(config)
    rows: list[dict[str, Any]] = []
    for what, options in VARIANTS:
        begun = time.perf_counter()
        settings = PatchSettings(**options)
        federation = seen_through(raw, settings)
        mapped_seconds = time.perf_counter() - begun
        planned = plan(config, federation.public_metadata())
        ensemble = fit_ensemble(
            [agent.features for agent in federation.agents],
            [np.asarray(agent.labels) for agent in federation.agents],
            planned.teacher,
            [SEED * 1_000 + i for i in range(len(federation.agents))],
            num_classes=federation.num_classes,
        )
        pool, test = federation.public.features, federation.test.features
        test_labels = np.asarray(federation.test.labels)
        with torch.no_grad():
            votes = ensemble.logits(pool).argmax(dim=-1).cpu().numpy()  # (A, Q)
        clean = np.eye(federation.num_classes)[votes].sum(axis=0)  # (Q, C)
        sigma = float(planned.sigma)
        noisy = [
            ridge_accuracy(pool, clean + np.random.default_rng([SEED, 43, draw]).normal(0.0, sigma, clean.shape),
                           test, test_labels)
            for draw in range(DRAWS)
        ]  # fmt: skip
        true_labels = 100.0 * np.eye(federation.num_classes)[np.asarray(federation.public.labels)]  # (Q, C)
        rows.append({
            "what": what, "options": options, "dim": settings.dim(), "sigma": sigma,
            "true_labels": ridge_accuracy(pool, true_labels, test, test_labels),
            "clean": ridge_accuracy(pool, clean, test, test_labels), "noisy": noisy,
            "map_seconds": mapped_seconds, "seconds": time.perf_counter() - begun,
        })  # fmt: skip
        print(f"[{NAME}] {what}: {rows[-1]}", file=sys.stderr, flush=True)
    record = {"name": NAME, "machine": machine(), "date": time.strftime("%Y-%m-%d"),
              "seed": SEED, "draws": DRAWS, "rows": rows, "wall_seconds": time.perf_counter() - started}  # fmt: skip
    save_results(NAME, record, section(record))
    print(section(record))


def section(record: dict[str, Any]) -> str:
    """The markdown section: one row per version of φ."""
    lines = [
        "## CIFAR-10 (JPEG copy): the public patch features, refinement by refinement (issue 43)",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['wall_seconds']:.0f} s wall.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. The Bar's "
        "federation (100 agents, Dirichlet α = 0.5, seed 0) seen through each version of φ (fitted on the "
        "3,000-image pool alone, standardised by it); PATE-FL's defaults on each: logistic teachers, dense "
        f"votes on all 3,000 pool images, the ridge student on the sums (λ by leave-one-out; without "
        "the uniform-prior shift the defaults add since e5c727f); agent ε 4, δ 1e-3. 'noisy' is the "
        f"mean over {record['draws']} noise draws (the same draws for every row). Map seconds: fitting φ and "
        "mapping the 60,000 images, on a shared host (they move with its load, not only with φ's size). 'true labels': the same ridge student on the pool's true labels "
        "(a reference: what 3,000 right labels teach through that φ).",
        "",
        "| φ | features | σ | test accuracy, true labels | clean sums | noisy (per draw) | mean | map s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for entry in record["rows"]:
        noisy = entry["noisy"]
        reference = f"{entry['true_labels']:.3f}" if "true_labels" in entry else "—"
        lines.append(
            f"| {entry['what']} | {entry['dim']:,} | {entry['sigma']:.2f} | {reference} | {entry['clean']:.3f} | "
            f"{', '.join(f'{a:.3f}' for a in noisy)} | {float(np.mean(noisy)):.3f} | {entry['map_seconds']:.0f} |"
        )
    first, last = record["rows"][0], record["rows"][DEFAULTS_ROW]
    lines += [
        "",
        f"The defaults now against Coates–Ng as published: {float(np.mean(last['noisy'])):.3f} against "
        f"{float(np.mean(first['noisy'])):.3f} at agent ε 4 "
        f"({100 * (float(np.mean(last['noisy'])) - float(np.mean(first['noisy']))):+.1f} points), clean "
        f"{last['clean']:.3f} against {first['clean']:.3f}.",
    ]
    larger = record["rows"][DEFAULTS_ROW + 1 :]
    if larger and "true_labels" in last:
        best = max(larger, key=lambda entry: float(np.mean(entry["noisy"])))
        lines += [
            "",
            f"A larger φ raises what right labels could teach (true labels {last['true_labels']:.3f} → up to "
            f"{max(entry['true_labels'] for entry in larger):.3f}) but not the release: the best larger map, "
            f"{best['what']}, gives {float(np.mean(best['noisy'])):.3f} at agent ε 4 against the defaults' "
            f"{float(np.mean(last['noisy'])):.3f} "
            f"({100 * (float(np.mean(best['noisy'])) - float(np.mean(last['noisy']))):+.1f} points). The noise, "
            "not φ, holds the student under the Bar's 0.60.",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
