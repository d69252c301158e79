"""Reputation-weighted voting on MNIST with bad teachers (reputation-weighted-pate.txt, Sec. 4).

Usage (from the repository root):

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/weighted_voting.py [--quick]

75 teachers on MNIST's training split (balanced-iid, unbalanced-iid, unbalanced-non-iid;
the paper's Sec. 4.1.2), a public pool of 30 % of MNIST's test split (500 of it labelled
as the validation set), the rest the test set. For every (setting, model, seed) the
teachers are trained *once*; their clean predictions on the queries and the validation
set are then reused for every bad-teacher fraction (adversaries who vote for a target
wrong class, :mod:`fedvote.agents.behaviour`) and every weighting scheme — the schemes
differ only in the weights, and the noise (summary and votes) is drawn afresh for each.

Every scheme is calibrated to the *same agent-level ε* (PLD, δ from the config): the
weights' w_max is the votes' sensitivity, so σ differs by scheme, and the relative
schemes also pay for their accuracy summary. The aggregation is the library's own
(:class:`~fedvote.aggregation.voting.WeightRule`, :func:`project_histogram`, each agent's
noise share σ/√N, :func:`fedvote.methods.voting.student_from_votes`).

Writes ``experiments/results/weighted_voting.json``, ``docs/weighted_voting.png`` and the
table ``experiments/results/weighted_voting.section.md``, which ``experiments/run.py``
keeps in ``docs/results.md`` (rewritten here too).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fedvote.agents.behaviour import assign_behaviours
from fedvote.aggregation.voting import (
    RELATIVE_SCHEMES,
    WeightRule,
    accuracy_bin,
    noisy_argmax,
    project_histogram,
    top_two_gap,
)
from fedvote.data.datasets import load_splits
from fedvote.data.federation import Federation, build_domain_federation
from fedvote.data.partition import PartitionSpec
from fedvote.data.query_selection import random_queries
from fedvote.data.validation import with_validation
from fedvote.methods.voting import ReleasedVotes, student_from_votes
from fedvote.models.ensemble import fit_ensemble
from fedvote.models.training import TrainingConfig, fit_classifier, predict_labels
from fedvote.models.zoo import build_model
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import accuracy_summary_events, weighted_pate_events
from fedvote.transport.base import agent_training_seeds

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PLOT = HERE.parent / "docs" / "weighted_voting.png"

PARTITIONS = {
    "balanced-iid": PartitionSpec("iid"),
    "unbalanced-iid": PartitionSpec("unbalanced"),
    "unbalanced-noniid": PartitionSpec("unbalanced-noniid"),
}


def build(setting: str, config: dict, seed: int) -> Federation:
    """The federation of ``setting``: 75 agents, pool = 30 % of the test split, minus validation."""
    splits = load_splits(config["dataset"])
    assert splits.test is not None
    federation = build_domain_federation(
        [splits.train],
        splits.test,
        num_agents=config["agents"],
        partition=PARTITIONS[setting],
        test_fraction=1.0 - config["public_fraction_of_test"],
        public_fraction=1.0,
        seed=seed,
    )
    return with_validation(federation, config["validation_size"], seed)


def teacher_predictions(
    federation: Federation, model: str, epochs: int, seed: int, points: np.ndarray
) -> np.ndarray:
    """Each agent's teacher's predicted labels on ``points``, (N, P); trained once."""
    config = TrainingConfig(model=model, epochs=epochs, batch_size=32)
    seeds = agent_training_seeds(seed, federation.num_agents)
    if model != "cnn":
        ensemble = fit_ensemble(
            [a.features for a in federation.agents],
            [a.labels for a in federation.agents],
            config,
            seeds,
            num_classes=federation.num_classes,
        )
        return ensemble.predict(points).cpu().numpy()
    rows = []
    for data, agent_seed in zip(federation.agents, seeds, strict=True):
        generator = torch.Generator().manual_seed(agent_seed)
        net = build_model(model, federation.example_shape, federation.num_classes, generator=generator)
        rows.append(predict_labels(fit_classifier(net, data.features, data.labels, config, generator), points))
    return np.stack(rows)


def calibrated_sigma(scheme: str, config: dict, epsilon: float) -> float:
    """σ of the votes so that summary (if any) + votes reach ``epsilon`` at the agent level."""
    max_weight = 1.0 if scheme == "one-vote" else config["max_weight"]
    summary = config["summary_sigma"] if scheme in RELATIVE_SCHEMES else None
    return calibrate_sigma(
        lambda s: weighted_pate_events(s, config["queries"], max_weight, summary).agent,
        epsilon,
        config["delta"],
    )


def run_cell(
    federation: Federation,
    votes: np.ndarray,
    validation_votes: np.ndarray,
    chosen: np.ndarray,
    scheme: str,
    sigma: float,
    config: dict,
    rng: np.random.Generator,
    seed: int,
) -> dict:
    """One scheme on fixed voted labels: weights, noisy weighted sums, student; its figures."""
    n, c = votes.shape[0], federation.num_classes
    validation = federation.validation
    assert validation is not None
    accuracies = np.mean(validation_votes == validation.labels[None, :], axis=1)  # (N,)
    histogram = None
    if scheme in RELATIVE_SCHEMES:  # each agent: one-hot bin + N(0, σ_s²/N); the sum is released
        bins = config["summary_bins"]
        shares = np.zeros((n, bins))
        shares[np.arange(n), [accuracy_bin(a, bins) for a in accuracies]] = 1.0
        shares += rng.normal(0.0, config["summary_sigma"] / np.sqrt(n), size=shares.shape)
        histogram = project_histogram(shares.sum(axis=0), n)
    rule = WeightRule(
        scheme,
        min_weight=config["min_weight"],
        max_weight=config["max_weight"],
        zscore_span=config["zscore_span"],
        histogram=histogram,
    )
    weights = np.array([rule.weight(a) for a in accuracies])  # (N,), each computed by its agent
    one_hot = np.eye(c)[votes]  # (N, Q, C)
    noisy = weights[:, None, None] * one_hot + rng.normal(0.0, sigma / np.sqrt(n), size=one_hot.shape)
    sums = noisy.sum(axis=0)  # (Q, C): what secure aggregation reveals
    released = ReleasedVotes(query_indices=chosen, pseudo_labels=noisy_argmax(sums), margins=top_two_gap(sums))
    student_config = TrainingConfig(**config["student"])
    student, used = student_from_votes(
        federation.server_data(),
        released,
        sigma=sigma,
        min_margin=config["student_min_margin"],
        config=student_config,
        seed=seed,
        self_training_rounds=0,
        semi_supervised=config["student_training"],
    )
    test = federation.test
    return {
        "accuracy": float(np.mean(predict_labels(student, test.features) == test.labels)),
        "label_accuracy": float(np.mean(released.pseudo_labels == federation.public.labels[chosen])),
        "student_queries": used,
        "mean_weight": float(weights.mean()),
    }


def main(argv: list[str]) -> None:
    """Run the grid of the config (``--quick``: one seed, FCN, 2 settings) and save it."""
    config = json.loads((HERE / "weighted_voting.json").read_text())
    quick = "--quick" in argv
    # Many tiny models: intra-op threads only add synchronisation, badly so on a busy machine.
    torch.set_num_threads(1)
    started = time.perf_counter()
    rows: list[dict] = []
    privacy: dict[str, dict] = {}
    for model_name, spec in config["models"].items():
        if quick and model_name != "fcn":
            continue
        settings = spec["settings"] or config["settings"]
        seeds = spec["seeds"] or config["seeds"]
        if quick:
            settings, seeds = settings[:2], seeds[:1]
        sigmas = {scheme: calibrated_sigma(scheme, config, spec["epsilon"]) for scheme in config["schemes"]}
        for scheme, sigma in sigmas.items():
            max_weight = 1.0 if scheme == "one-vote" else config["max_weight"]
            summary = config["summary_sigma"] if scheme in RELATIVE_SCHEMES else None
            events = weighted_pate_events(sigma, config["queries"], max_weight, summary)
            share = (
                epsilon_for(accuracy_summary_events(summary).agent, config["delta"]) if summary else 0.0
            )
            privacy[f"{model_name}/{scheme}"] = {
                "sigma": sigma,
                "epsilon_agent": epsilon_for(events.agent, config["delta"]),
                "epsilon_instance": epsilon_for(events.instance, config["delta"]),
                "summary_epsilon_agent_alone": share,
            }
        for setting in settings:
            for seed in seeds:
                mark = time.perf_counter()
                federation = build(setting, config, seed)
                assert federation.validation is not None
                # Random queries, as when its table was made (before typical selection).
                chosen = random_queries(len(federation.public), config["queries"], seed)  # (Q,)
                points = np.concatenate([federation.public.features[chosen], federation.validation.features])
                predictions = teacher_predictions(federation, spec["model"], spec["epochs"], seed, points)
                clean, clean_val = predictions[:, : chosen.shape[0]], predictions[:, chosen.shape[0] :]
                teacher_acc = np.mean(clean_val == federation.validation.labels[None, :], axis=1)
                print(
                    f"[{model_name} {setting} seed {seed}] teachers {time.perf_counter() - mark:.0f} s, "
                    f"validation accuracy {teacher_acc.mean():.3f} ± {teacher_acc.std():.3f}",
                    file=sys.stderr,
                    flush=True,
                )
                for fraction in config["bad_fractions"]:
                    behaviours = assign_behaviours(
                        federation.num_agents,
                        fraction=fraction,
                        kind=config["bad_kind"],
                        num_classes=federation.num_classes,
                        target_class=config["bad_target_class"],
                        seed=seed,
                    )
                    behaviour_rng = np.random.default_rng([seed, 0xBE4A])
                    votes = np.stack([b.act(p, 10, behaviour_rng) for b, p in zip(behaviours, clean, strict=True)])
                    val_votes = np.stack(
                        [b.act(p, 10, behaviour_rng) for b, p in zip(behaviours, clean_val, strict=True)]
                    )
                    for scheme in config["schemes"]:
                        noise_rng = np.random.default_rng([seed, int(fraction * 100), len(rows)])
                        cell = run_cell(
                            federation, votes, val_votes, chosen, scheme,
                            privacy[f"{model_name}/{scheme}"]["sigma"], config, noise_rng, seed,
                        )
                        rows.append(
                            {"model": model_name, "setting": setting, "seed": seed, "bad_fraction": fraction,
                             "scheme": scheme, "teacher_accuracy": float(teacher_acc.mean()),
                             "teacher_accuracy_std": float(teacher_acc.std()), **cell}
                        )
                print(
                    f"[{model_name} {setting} seed {seed}] done in {time.perf_counter() - mark:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
                save(config, quick, started, privacy, rows)  # after every teacher set: partial results survive
    save(config, quick, started, privacy, rows, complete=True)
    record = json.loads((RESULTS / "weighted_voting.json").read_text())
    (RESULTS / "weighted_voting.section.md").write_text("\n".join(render_section(record)) + "\n")
    from run import DOC, render  # experiments/run.py keeps every saved section in docs/results.md

    DOC.write_text(render() + "\n")
    print(f"wrote {DOC}", file=sys.stderr)


def save(config: dict, quick: bool, started: float, privacy: dict, rows: list[dict], complete: bool = False) -> None:
    """Write the results so far (and the plot) to experiments/results/weighted_voting.json."""
    from run import machine  # experiments/run.py, beside this file

    record = {
        "name": "weighted_voting",
        "config": config,
        "quick": quick,
        "complete": complete,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "privacy": privacy,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "weighted_voting.json").write_text(json.dumps(record, indent=2) + "\n")
    plot(record)
    print(f"wrote {RESULTS / 'weighted_voting.json'} and {PLOT} ({record['seconds']} s so far)", file=sys.stderr)


def summary_table(record: dict) -> list[dict]:
    """Mean and std over seeds of student accuracy per (model, setting, bad fraction, scheme)."""
    groups: dict[tuple, list[dict]] = {}
    for row in record["rows"]:
        key = (row["model"], row["setting"], row["bad_fraction"], row["scheme"])
        groups.setdefault(key, []).append(row)
    table = []
    for (model, setting, fraction, scheme), members in groups.items():
        accuracies = np.array([m["accuracy"] for m in members])
        table.append(
            {"model": model, "setting": setting, "bad_fraction": fraction, "scheme": scheme,
             "accuracy": float(accuracies.mean()), "accuracy_std": float(accuracies.std()),
             "label_accuracy": float(np.mean([m["label_accuracy"] for m in members])),
             "seeds": len(members)}
        )
    return table


def plot(record: dict) -> None:
    """Student accuracy against the bad-teacher fraction, one panel per (model, setting)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = summary_table(record)
    panels = sorted({(r["model"], r["setting"]) for r in table}, key=lambda p: (p[0] != "fcn", p[1]))
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4), squeeze=False)
    for axis, (model, setting) in zip(axes[0], panels, strict=True):
        for scheme in record["config"]["schemes"]:
            points = sorted(
                (r["bad_fraction"], r["accuracy"], r["accuracy_std"])
                for r in table
                if (r["model"], r["setting"], r["scheme"]) == (model, setting, scheme)
            )
            xs, ys, es = zip(*points, strict=True)
            axis.errorbar(np.array(xs) * 100, ys, yerr=es, marker="o", capsize=3, label=scheme)
        epsilon = record["config"]["models"][model]["epsilon"]
        axis.set_title(f"{model.upper()}, {setting} (ε = {epsilon:g})", fontsize=9)
        axis.set_xlabel("adversarial teachers (%)")
        axis.set_ylabel("student test accuracy")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    PLOT.parent.mkdir(exist_ok=True)
    figure.savefig(PLOT, dpi=110)


def render_section(record: dict) -> list[str]:
    """The docs/results.md section of this experiment (saved as weighted_voting.section.md)."""
    config = record["config"]
    table = summary_table(record)
    schemes = config["schemes"]
    lines = [
        "## Reputation-weighted voting with adversarial teachers, MNIST, 75 teachers",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['seconds'] / 60:.1f} min in all.",
        "",
        "Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/weighted_voting.py` "
        "(config `experiments/weighted_voting.json`). Teachers are trained once per (setting, model, seed); "
        "their clean votes are reused for every bad fraction and scheme, with fresh noise each time. "
        f"{config['queries']} queries, validation set {config['validation_size']} labelled pool points, "
        f"weights in [{config['min_weight']:g}, {config['max_weight']:g}], accuracy summary σ = "
        f"{config['summary_sigma']:g} over {config['summary_bins']} bins, z-score span {config['zscore_span']:g}; "
        f"bad teachers are `{config['bad_kind']}` (they vote class {config['bad_target_class']}, or the next "
        "class when their teacher predicts it). Student: an MLP on the pseudo-labelled queries whose noisy "
        f"margin is ≥ {config['student_min_margin']:g}σ, trained `{config['student_training']}` (the study "
        "compares voting rules: one supervised student per cell keeps its 180 students to minutes, where "
        "FixMatch's 4,000 steps each took hours on 2 cores), no self-training.",
        "",
        "Every scheme is calibrated to the same **agent-level ε** (δ = "
        f"{config['delta']:g}, PLD); σ differs by scheme because the votes' sensitivity is w_max "
        "(1 for one-vote) and the relative schemes also spend part of ε on the accuracy summary:",
        "",
        "| model | scheme | σ (votes) | ε agent | ε instance | ε of the summary alone (agent) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, entry in record["privacy"].items():
        model, scheme = key.split("/")
        lines.append(
            f"| {model} | {scheme} | {entry['sigma']:.2f} | {entry['epsilon_agent']:.3f} | "
            f"{entry['epsilon_instance']:.3f} | {entry['summary_epsilon_agent_alone']:.3f} |"
        )
    lines += [
        "",
        "Student test accuracy, mean ± std over seeds (pseudo-label accuracy in brackets):",
        "",
        "| model | setting | bad % | " + " | ".join(schemes) + " | seeds |",
        "| --- | --- | --- | " + " | ".join("---" for _ in schemes) + " | --- |",
    ]
    keyed = {(r["model"], r["setting"], r["bad_fraction"], r["scheme"]): r for r in table}
    for model, setting, fraction in sorted({(r["model"], r["setting"], r["bad_fraction"]) for r in table},
                                          key=lambda k: (k[0] != "fcn", k[1], k[2])):
        cells = []
        best = max(keyed[(model, setting, fraction, s)]["accuracy"] for s in schemes)
        for scheme in schemes:
            entry = keyed[(model, setting, fraction, scheme)]
            text = f"{entry['accuracy']:.3f} ± {entry['accuracy_std']:.3f} ({entry['label_accuracy']:.2f})"
            cells.append(f"**{text}**" if entry["accuracy"] == best else text)
        seeds = keyed[(model, setting, fraction, schemes[0])]["seeds"]
        lines.append(f"| {model} | {setting} | {fraction * 100:.0f} | " + " | ".join(cells) + f" | {seeds} |")
    lines += ["", "![student accuracy against the fraction of adversarial teachers](weighted_voting.png)", ""]
    return lines


if __name__ == "__main__":
    main(sys.argv[1:])
