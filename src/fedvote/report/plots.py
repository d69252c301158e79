"""The report's figures, drawn with matplotlib's object API on the Agg canvas.

No pyplot and no global backend switch: each function builds a
:class:`matplotlib.figure.Figure` attached to a ``FigureCanvasAgg`` (SVG output uses
matplotlib's SVG writer on the same figure), so importing fedvote never touches the
user's matplotlib state.

* :func:`tradeoff_figure` — accuracy vs ε per method (the voting paper's Figure 2);
* :func:`epsilon_curve_figure` — ε vs queries answered (or rounds), both levels,
  data-independent and data-dependent;
* :func:`margins_figure` — histogram of the vote margins γ(x) with Lemma 4's threshold,
  and label accuracy by margin bucket;
* :func:`teacher_accuracy_figure` — teacher accuracy across agents (the weighted-voting
  paper's Figures 2–3);
* :func:`partition_figure` — per-agent data sizes and class mix (stacked bars).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedvote.errors import ConfigError
from fedvote.report.curves import EpsilonCurve, MarginData
from fedvote.report.loaders import TradeoffPoint
from fedvote.results import write_atomic

FORMATS: tuple[str, ...] = ("png", "svg")
# Style of every figure (applied only while drawing and saving, never globally).
STYLE: dict[str, Any] = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "fedvote",  # deterministic SVG ids
    "svg.fonttype": "path",  # self-contained SVG: glyphs as paths
}
LEVEL_COLORS = {"agent": "C0", "instance": "C1"}


def _style() -> Any:
    """A context applying :data:`STYLE` (matplotlib's rc keys are typed as literals)."""
    return matplotlib.rc_context(STYLE)  # type: ignore[arg-type]


def _figure(width: float = 7.0, height: float = 4.2, panels: int = 1) -> tuple[Figure, list]:
    """A figure on the Agg canvas with ``panels`` axes stacked vertically (phone-friendly)."""
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = [figure.add_subplot(panels, 1, i + 1) for i in range(panels)]
    return figure, axes


def figure_bytes(figure: Figure, fmt: str = "png", dpi: int = 150) -> bytes:
    """``figure`` encoded as ``fmt`` ("png" or "svg")."""
    if fmt not in FORMATS:
        raise ConfigError("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    buffer = io.BytesIO()
    with _style():
        figure.savefig(
            buffer,
            format=fmt,
            dpi=dpi,
            metadata={"Software": "fedvote"} if fmt == "png" else {"Creator": "fedvote", "Date": None},
        )
    return buffer.getvalue()


def save_figure(figure: Figure, path: str | Path, dpi: int = 150) -> Path:
    """Write ``figure`` to ``path``; the format is the suffix (.png or .svg)."""
    target = Path(path)
    fmt = target.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ConfigError("out", f"{target}: the file name must end in .png or .svg")
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, figure_bytes(figure, fmt, dpi))


# --- (a) accuracy vs ε ---------------------------------------------------------------------


def tradeoff_figure(points: Sequence[TradeoffPoint], title: str | None = None) -> Figure:
    """Accuracy vs ε, one line per method (mean over repeats, error bar = std over seeds).

    Non-private rows are horizontal dashed reference lines. When methods are measured at
    different levels (DP-FedSGD protects only instances), the legend says which.
    """
    if not points:
        raise ConfigError("files", "no points to plot")
    with _style():
        figure, (axes,) = _figure()
        private = [p for p in points if p.epsilon is not None]
        levels = {p.level for p in private}
        deltas = {p.delta for p in private if p.delta is not None}
        series: dict[tuple[str, str], dict[str, list[TradeoffPoint]]] = defaultdict(lambda: defaultdict(list))
        for point in private:
            series[(point.method, point.level)][point.group].append(point)
        for index, ((method, level), groups) in enumerate(sorted(series.items())):
            rows = sorted(
                (
                    float(np.mean([p.epsilon for p in group if p.epsilon is not None])),
                    float(np.mean([p.accuracy for p in group])),
                    float(np.std([p.accuracy for p in group])) if len(group) > 1 else 0.0,
                )
                for group in groups.values()
            )
            x, y, err = (np.array(column) for column in zip(*rows, strict=True))
            label = method if len(levels) == 1 else f"{method} ({level}-level ε)"
            color = f"C{index % 10}"
            axes.plot(x, y, marker="o", color=color, label=label)
            if np.any(err > 0):
                axes.errorbar(x, y, yerr=err, fmt="none", ecolor=color, capsize=3, alpha=0.7)
        references: dict[str, list[float]] = defaultdict(list)
        for point in points:
            if point.epsilon is None:
                references[point.method].append(point.accuracy)
        for index, (method, accuracies) in enumerate(sorted(references.items())):
            axes.axhline(
                float(np.mean(accuracies)),
                linestyle="--",
                color=f"C{(len(series) + index) % 10}",
                label=f"{method} (not private)",
            )
        level_text = (
            f"{next(iter(levels))}-level ε" if len(levels) == 1 else "ε at each method's calibrated level"
        )
        if len(deltas) == 1:
            level_text += f", δ = {next(iter(deltas)):g}"
        axes.set_xlabel(f"privacy budget ({level_text})" if private else "privacy budget ε (no private run)")
        axes.set_ylabel("test accuracy")
        axes.set_title(title or "Privacy–accuracy trade-off")
        xs = [p.epsilon for p in private if p.epsilon is not None]
        if xs and min(xs) > 0 and max(xs) / min(xs) > 30:
            axes.set_xscale("log")
        axes.legend(loc="lower right", fontsize=10)
    return figure


# --- (b) ε vs queries ----------------------------------------------------------------------


def epsilon_curve_figure(curve: EpsilonCurve, note: str | None = None) -> Figure:
    """ε after each number of queries (or rounds), per level: data-independent and data-dependent."""
    with _style():
        figure, (axes,) = _figure()
        for level, values in curve.independent.items():
            axes.plot(
                curve.steps,
                values,
                color=LEVEL_COLORS[level],
                linewidth=2,
                label=f"{level} level, data-independent ({curve.accountant_label(level)})",
            )
            if level in curve.run_epsilon and curve.run_accountant != curve.accountant:
                axes.plot(  # the run's own figure, by its own accountant, at the last step
                    [curve.steps[-1]],
                    [curve.run_epsilon[level]],
                    color=LEVEL_COLORS[level],
                    marker="D",
                    linestyle="none",
                    label=f"{level} level, the run's ε {curve.run_epsilon[level]:.4f} "
                    f"({curve.run_accountant})",
                )
        for level, values in curve.dependent.items():
            axes.plot(
                curve.steps,
                values,
                color=LEVEL_COLORS[level],
                linestyle="--",
                linewidth=1.5,
                marker="o",
                markersize=3.5,
                markerfacecolor="white",
                label=f"{level} level, data-dependent (GNMax RDP; not itself private)",
            )
        axes.set_xlabel(f"number of {curve.unit}")
        axes.set_ylabel(f"ε at δ = {curve.delta:g}")
        axes.set_title(f"Privacy spent vs {curve.unit}")
        axes.set_xlim(left=0)
        axes.set_ylim(bottom=0)
        if note:
            axes.text(
                0.02, 0.97, note, transform=axes.transAxes, va="top", fontsize=8, color="0.35", wrap=True
            )
        axes.legend(loc="lower right", fontsize=8)
    return figure


# --- (c) vote margins ----------------------------------------------------------------------

MARGIN_BUCKETS = np.linspace(0.0, 1.0, 11)


def margin_buckets(data: MarginData) -> list[tuple[float, float, int, float, float]]:
    """Non-empty margin buckets: (low, high, count, label accuracy, agreement with the clean vote)."""
    out = []
    for low, high in zip(MARGIN_BUCKETS[:-1], MARGIN_BUCKETS[1:], strict=True):
        inside = (data.margins >= low) & ((data.margins < high) if high < 1.0 else (data.margins <= high))
        count = int(inside.sum())
        if count:
            out.append(
                (
                    float(low),
                    float(high),
                    count,
                    float(data.correct[inside].mean()),
                    float(data.matches_clean[inside].mean()),
                )
            )
    return out


def margins_figure(data: MarginData) -> Figure:
    """Top: histogram of γ(x) with Lemma 4's threshold; bottom: label accuracy per margin bucket."""
    with _style():
        figure, (left, right) = _figure(width=7.0, height=7.0, panels=2)
        left.hist(data.margins, bins=MARGIN_BUCKETS, color="C0", edgecolor="white")
        if data.threshold > 0:
            label = f"Lemma 4: 2σ√(2 log(C/δ))/N = {data.threshold:.3g}"
            if data.threshold <= 1.0:
                left.axvline(data.threshold, color="C3", linestyle="--", label=label)
            else:
                left.plot([], [], color="C3", linestyle="--", label=label + " (> 1)")
            left.legend(loc="upper left", fontsize=8)
        left.set_xlim(0, 1)
        left.set_xlabel("vote margin γ(x) (top-two gap of the mean vote)")
        left.set_ylabel("released queries")
        left.set_title("Vote margins (clean votes)")
        buckets = margin_buckets(data)
        centres = np.array([(low + high) / 2 for low, high, *_ in buckets])
        width = (MARGIN_BUCKETS[1] - MARGIN_BUCKETS[0]) * 0.4
        right.bar(
            centres - width / 2,
            [b[3] for b in buckets],
            width=width,
            color="C2",
            label="pseudo-label = true label",
        )
        right.bar(
            centres + width / 2,
            [b[4] for b in buckets],
            width=width,
            color="C1",
            label="pseudo-label = clean majority",
        )
        for centre, bucket in zip(centres, buckets, strict=True):
            right.text(centre, 1.02, f"n={bucket[2]}", ha="center", fontsize=7)
        if 0 < data.threshold <= 1.0:
            right.axvline(data.threshold, color="C3", linestyle="--")
        right.set_xlim(0, 1)
        right.set_ylim(0, 1.12)
        right.set_xlabel("vote margin γ(x) bucket")
        right.set_ylabel("fraction of queries")
        right.set_title("Label accuracy by margin")
        right.legend(loc="lower right", fontsize=8)
    return figure


# --- (d) teacher accuracies ----------------------------------------------------------------


def teacher_accuracy_figure(
    accuracies: np.ndarray, title: str = "Teacher accuracy across agents", *, test_points: int | None = None
) -> Figure:
    """Top: each agent's teacher accuracy, sorted; bottom: their distribution, with the mean.

    ``test_points``: how many test points the accuracies are on (the runner's diagnostic
    sample, :data:`~fedvote.analysis.DIAGNOSTIC_TEST_SAMPLE` at most), shown in the axis
    labels; None (a run written before the sample) says only "test accuracy".
    """
    values = np.asarray(accuracies, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ConfigError("teacher_accuracies", f"must be a non-empty vector, got shape {values.shape}")
    with _style():
        figure, (left, right) = _figure(width=7.0, height=6.5, panels=2)
        order = np.argsort(values)
        left.bar(np.arange(values.size), values[order], width=1.0 if values.size > 40 else 0.8, color="C0")
        left.axhline(float(values.mean()), color="C3", linestyle="--", label=f"mean {values.mean():.3f}")
        left.set_xlabel("agents, sorted by teacher accuracy")
        measured = "test accuracy" if test_points is None else f"accuracy on {test_points} test points"
        left.set_ylabel(measured)
        left.set_ylim(0, 1)
        left.set_title(title)
        left.legend(loc="upper left", fontsize=8)
        bins = np.linspace(max(0.0, values.min() - 0.05), min(1.0, values.max() + 0.05) + 1e-9, 16)
        right.hist(values, bins=bins, color="C0", edgecolor="white")
        right.axvline(float(values.mean()), color="C3", linestyle="--")
        right.set_xlabel(f"teacher {measured}")
        right.set_ylabel("agents")
        right.set_title("Distribution")
    return figure


# --- (e) the partition ---------------------------------------------------------------------


def partition_figure(class_counts: np.ndarray, class_names: Sequence[str] | None = None) -> Figure:
    """Records per agent as bars stacked by class (the federation's partition)."""
    counts = np.asarray(class_counts)
    if counts.ndim != 2 or counts.size == 0:
        raise ConfigError("class_counts", f"must be (agents × classes), got shape {counts.shape}")
    agents, classes = counts.shape
    names = list(class_names) if class_names is not None else [str(c) for c in range(classes)]
    colors: list[Any]
    if classes <= 10:
        colors = [f"C{c}" for c in range(classes)]
    else:
        cmap = matplotlib.colormaps["tab20" if classes <= 20 else "viridis"]
        colors = [cmap(c / max(classes - 1, 1)) if classes > 20 else cmap(c) for c in range(classes)]
    with _style():
        figure, (axes,) = _figure(width=max(7.0, min(14.0, 4.0 + agents * 0.08)), height=4.2)
        x = np.arange(agents)
        bottom = np.zeros(agents)
        width = 1.0 if agents > 40 else 0.8
        for c in range(classes):
            axes.bar(
                x, counts[:, c], bottom=bottom, width=width, color=colors[c], label=names[c], linewidth=0
            )
            bottom += counts[:, c]
        axes.set_xlabel("agent")
        axes.set_ylabel("records")
        axes.set_title(f"Partition: records per agent by class ({agents} agents)")
        axes.set_xlim(-0.5 - (0.1 if width < 1 else 0), agents - 0.5)
        axes.grid(axis="x", visible=False)
        if agents <= 30:
            axes.set_xticks(x)
        ncol = 1 if classes <= 12 else math.ceil(classes / 12)
        axes.legend(title="class", loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncol=ncol)
    return figure
