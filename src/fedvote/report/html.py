"""``report.html``: one self-contained page per run, sweep or comparison directory.

The page inlines its figures (SVG as data URIs), uses no script and no network, and
reflows to a phone's width. Every number on it is read from the directory's JSON file
(result.json, sweep.json or compare.json) and carries the key it came from
(``data-key="privacy.agent.epsilon"``), so tests can check each one against the file.
Numbers drawn *inside* figures are the plots' own (ticks, Lemma 4's threshold).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fedvote.errors import ConfigError
from fedvote.report import curves, plots
from fedvote.report.loaders import (
    COMPARE_FILE,
    RESULT_FILE,
    SWEEP_FILE,
    RunData,
    load_run,
    read_json,
    tradeoff_points,
)
from fedvote.results import DIAGNOSTIC_NOTE, write_atomic

REPORT_FILE = "report.html"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class Panel:
    """One plot of the page: its title, what it shows, and the figure or why it is omitted."""

    name: str
    title: str
    caption: str
    figure: Figure | None = None
    omitted: str | None = None
    # A noiseless function of private data (teacher accuracies, clean votes, the partition):
    # drawn in the "Simulation diagnostics" section, under DIAGNOSTIC_NOTE.
    diagnostic: bool = False


def write_report(directory: str | Path, *, plot_files: bool = True) -> Path:
    """Write ``directory/report.html`` for the run, sweep or comparison in ``directory``.

    A run directory holds result.json (and analysis.npz); a sweep's holds sweep.json; a
    comparison's compare.json. With ``plot_files`` every figure is also written as PNG
    and SVG under ``directory/plots/``. Returns the report's path.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigError("directory", f"{folder} is not a directory")
    if (folder / SWEEP_FILE).exists():
        title, body, panels, tail = _sweep_page(folder)
    elif (folder / RESULT_FILE).exists():
        title, body, panels, tail = _run_page(load_run(folder))
    elif (folder / COMPARE_FILE).exists():
        title, body, panels, tail = _compare_page(folder)
    else:
        raise ConfigError("directory", f"{folder} holds no {RESULT_FILE}, {SWEEP_FILE} or {COMPARE_FILE}")
    if plot_files:
        for panel in panels:
            if panel.figure is not None:
                for fmt in plots.FORMATS:
                    plots.save_figure(panel.figure, folder / PLOTS_DIR / f"{panel.name}.{fmt}")
    page = _page(title, body + _panels_html(panels) + tail)
    return write_atomic(folder / REPORT_FILE, page)


def plot_paths(directory: str | Path) -> list[Path]:
    """The plot files :func:`write_report` wrote under ``directory/plots/``, sorted."""
    return sorted((Path(directory) / PLOTS_DIR).glob("*.*"))


# --- formatting: every shown number carries its JSON key --------------------------------------


def format_value(value: Any) -> str:
    """How the page shows a JSON value: 4 significant digits, integers whole, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _value(key: str, value: Any, empty: str | None = None) -> str:
    """``value`` shown in a span that names its JSON ``key`` (``empty`` replaces None)."""
    text = empty if value is None and empty is not None else format_value(value)
    raw = html.escape(json.dumps(value), quote=True)
    return f'<span class="v" data-key="{html.escape(key)}" data-value="{raw}">{html.escape(text)}</span>'


def _get(data: dict[str, Any], key: str) -> Any:
    value: Any = data
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value.get(part)
        if value is None:
            return None
    return value


def query_counts(result: dict[str, Any]) -> tuple[int, int] | None:
    """(pass bits checked, labels answered) of a label-release run, from new or old result.json; else None."""
    record = result.get("confident_gnmax")
    if result.get("queries_checked") is not None:
        return int(result["queries_checked"]), int(result.get("queries_answered", result.get("queries", 0)))
    if isinstance(record, dict) and record.get("queries_checked") is not None:
        return int(record["queries_checked"]), int(record.get("queries_answered", result.get("queries", 0)))
    return None


def _card(label: str, content: str, note: str = "") -> str:
    extra = f'<div class="note">{note}</div>' if note else ""
    return f'<div class="card"><div class="label">{label}</div><div class="big">{content}</div>{extra}</div>'


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    table = f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    return f'<div class="scroll">{table}</div>'


def _flatten(data: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(data, dict) and data:
        out: list[tuple[str, Any]] = []
        for key, value in data.items():
            out.extend(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [(prefix, data)]


def _config_table(data: dict[str, Any], root: str) -> str:
    config = _get(data, root) or {}
    rows = [
        (html.escape(key[len(root) + 1 :]), _value(key, value))
        for key, value in _flatten(config, root)
        if value is not None and value != {}
    ]
    return _table(("setting", "value"), rows, "config")


# --- a run -------------------------------------------------------------------------------------


def _run_page(run: RunData) -> tuple[str, str, list[Panel], str]:
    result = run.result
    privacy = result["privacy"]
    voting = bool(result.get("queries"))
    title = "fedvote run report"
    cards = [
        _card(
            "test accuracy" if not voting else "student test accuracy", _value("accuracy", result["accuracy"])
        ),
    ]
    if result.get("label_accuracy") is not None:
        cards.append(_card("pseudo-label accuracy", _value("label_accuracy", result["label_accuracy"])))
    for level in ("agent", "instance"):
        delta = _value("privacy.delta", privacy["delta"])
        note = f"accountant {_level_accountant(privacy, level)}, δ = {delta}"
        unbounded = "not private at this level"
        if privacy[level].get("accountant") == "none":  # nothing bounded it: ∞, not "no noise"
            unbounded = f"no finite bound computed ({_level_accountant(privacy, level)})"
        cards.append(
            _card(
                f"ε, {level} level",
                _value(f"privacy.{level}.epsilon", privacy[level]["epsilon"], "∞"),
                note if privacy[level]["epsilon"] is not None else unbounded,
            )
        )
    for level in ("agent", "instance"):
        # Only the smooth-sensitivity release is a headline card; a clean data-dependent ε
        # (files written before it, ``data_dependent_epsilon``) is not private: table only.
        if privacy[level].get("data_dependent_epsilon_released") is not None:
            cards.append(
                _card(
                    f"data-dependent ε (released), {level} level",
                    _value(
                        f"privacy.{level}.data_dependent_epsilon_released",
                        privacy[level]["data_dependent_epsilon_released"],
                    ),
                    _value(
                        f"privacy.{level}.data_dependent_label", privacy[level].get("data_dependent_label")
                    ),
                )
            )
    cards.append(_card("σ", _value("sigma", result["sigma"])))
    checked = query_counts(result)
    if checked is not None:
        cards.append(_card("queries checked (pass bits)", _value("queries_checked", checked[0])))
        cards.append(_card("queries answered (labels)", _value("queries_answered", checked[1])))
    elif voting:
        cards.append(_card("queries released", _value("queries", result["queries"])))
    comm = result.get("communication", {})
    cards.append(
        _card(
            "communication",
            f"{_value('communication.upload_floats', comm.get('upload_floats'))} floats up",
            f"{_value('communication.download_floats', comm.get('download_floats'))} down, "
            f"{_value('communication.rounds', comm.get('rounds'))} round(s)",
        )
    )
    cards.append(_card("time", f"{_value('timings.total_s', result.get('timings', {}).get('total_s'))} s"))
    subtitle = (
        f"{_value('method', result['method'])} on {_value('dataset', result.get('dataset'))} with "
        f"{_value('agents', result.get('agents'))} agents, seed {_value('seed', result.get('seed'))}; "
        f"fedvote {_value('version', result.get('version'))}"
    )
    if not privacy.get("private"):
        subtitle += ' — <strong class="warn">NOT PRIVATE: no noise protects the releases</strong>'
    body = f'<p class="sub">{subtitle}</p>'
    body += f'<section><h2>Headline</h2><div class="cards">{"".join(cards)}</div></section>'
    body += _privacy_section(privacy)
    tail = _diagnostics_section(result) + (
        f'<section><h2>Configuration</h2><p class="note">Settings left at their defaults (null) '
        f"are not listed.</p>{_config_table(result, 'config')}</section>"
    )
    return title, body, _run_panels(run), tail


def _diagnostics_section(result: dict[str, Any]) -> str:
    """result.json's ``diagnostics`` (noiseless functions of private data), apart and labelled."""
    values = {key: value for key, value in (result.get("diagnostics") or {}).items() if key != "note"}
    if not values:
        return ""
    rows = [
        (html.escape(key[len("diagnostics") + 1 :]), _value(key, value))
        for key, value in _flatten({"diagnostics": values}, "")
        if not isinstance(value, list) or len(value) <= 20
    ]
    return (
        '<section id="diagnostics"><h2>Simulation diagnostics (values)</h2>'
        f'<p class="warn">{html.escape(DIAGNOSTIC_NOTE.capitalize())}.</p>'
        f"{_table(('diagnostic', 'value'), rows, 'kv')}</section>"
    )


def _level_accountant(privacy: dict[str, Any], level: str) -> str:
    """The accountant of ``level``'s ε: the run's, or the level's own where that is another one.

    The level's own: ``exact`` (a Gaussian's closed form under ``pld``), or a fallback where the
    PLD could not be built (``rdp``, ``none``). Results written before 2026-11-28 carry only
    ``privacy.accountant`` (it computed both levels).
    """
    own = privacy[level].get("accountant")
    if own is None or own == privacy["accountant"]:  # the run's accountant computed it
        return _value("privacy.accountant", privacy["accountant"])
    shown = _value(f"privacy.{level}.accountant", own)
    if privacy[level].get("accountant_fallback") is not None:
        shown += " (upper bound: the run's accountant could not account this level)"
    return shown


def _privacy_section(privacy: dict[str, Any]) -> str:
    blocks = []
    for level in ("agent", "instance"):
        entry = privacy[level]
        rows = [
            (
                "ε (data-independent)",
                f"{_value(f'privacy.{level}.epsilon', entry['epsilon'], '∞')} — accountant "
                f"{_level_accountant(privacy, level)}",
            ),
        ]
        if entry.get("accountant_fallback") is not None:
            rows.append(
                (
                    "why not the run's accountant",
                    _value(f"privacy.{level}.accountant_fallback", entry["accountant_fallback"]),
                )
            )
        if entry.get("data_dependent_epsilon_released") is not None:
            released = entry["data_dependent_epsilon_released"]
            label = _value(f"privacy.{level}.data_dependent_label", entry.get("data_dependent_label"))
            rows.append(
                (
                    "data-dependent ε (released by smooth sensitivity)",
                    f"{_value(f'privacy.{level}.data_dependent_epsilon_released', released)} — {label}; "
                    + _value(
                        f"privacy.{level}.data_dependent_accountant", entry.get("data_dependent_accountant")
                    ),
                )
            )
        elif entry.get("data_dependent_epsilon") is not None:  # a file written before the release
            rows.append(
                (
                    "data-dependent ε (clean, not itself private)",
                    f"{_value(f'privacy.{level}.data_dependent_epsilon', entry['data_dependent_epsilon'])} — "
                    f"{_value(f'privacy.{level}.data_dependent_label', entry.get('data_dependent_label'))}; "
                    "written before fedvote released it by smooth sensitivity: "
                    "a noiseless function of the votes",
                )
            )
        elif entry.get("data_dependent_label") is not None:  # e.g. a run that released the noisy sums
            label = _value(f"privacy.{level}.data_dependent_label", entry["data_dependent_label"])
            rows.append(("data-dependent ε", label))
        else:
            rows.append(
                ("data-dependent ε", "not computed (needs the clean votes of a simulated voting run)")
            )
        rows.append(("sensitivity", _value(f"privacy.{level}.sensitivity", entry.get("sensitivity"))))
        if entry.get("bound") is not None:
            rows.append(("sensitivity bound", _value(f"privacy.{level}.bound", entry["bound"])))
        rows.append(("adjacency", _value(f"privacy.{level}.adjacency", entry.get("adjacency"))))
        blocks.append(f"<h3>{level.capitalize()} level</h3>" + _table(("", ""), rows, "kv"))
    note = (
        '<p class="note">The headline ε is data-independent. The data-dependent ε reads the '
        "clean, private votes (<cite>voting paper, Theorem 5</cite>; <cite>Papernot et al. 2018, "
        "Theorem 6</cite>), so it is itself <strong>not differentially private</strong>: it tells "
        "how much the margins of this run's votes helped, and is never the run's guarantee. "
        "It needs the clean vote histograms, which exist only in an in-process simulation.</p>"
    )
    delta = _value("privacy.delta", privacy["delta"])
    noise = _value("privacy.noise_source", privacy.get("noise_source"))
    calibrated = ""
    if privacy.get("calibrated_to_epsilon") is not None:
        calibrated = (
            " Noise calibrated to ε = "
            + _value("privacy.calibrated_to_epsilon", privacy["calibrated_to_epsilon"])
            + f" at the {_value('privacy.calibrated_level', privacy.get('calibrated_level'))} level."
        )
    return (
        f"<section><h2>Privacy</h2><p>All ε at δ = {delta}; noise from {noise}.{calibrated}</p>"
        f"{''.join(blocks)}{_statements_table(privacy.get('statements') or [])}"
        f"{_agent_groups_table(privacy.get('agent_groups') or [])}{note}</section>"
    )


def _agent_groups_table(groups: list[dict[str, Any]]) -> str:
    """``--agent-budgets``: each budget group's size, vote weight and ε (``privacy.agent_groups``)."""
    if not groups:
        return ""
    rows = []
    for index, entry in enumerate(groups):
        key = f"privacy.agent_groups.{index}"
        rows.append(
            (
                _value(f"{key}.budget", entry.get("budget")),
                _value(f"{key}.agents", entry.get("agents")),
                _value(f"{key}.weight", entry.get("weight")),
                _value(f"{key}.epsilon", entry.get("epsilon"), "∞"),
                _value(f"{key}.instance_epsilon", entry.get("instance_epsilon"), "∞"),
            )
        )
    header = ("budget ε", "agents", "vote weight", "agent-level ε", "instance-level ε")
    return (
        "<h3>Individual budgets</h3><p>Each group's ε from its own releases; the agent-level "
        "headline above is the largest over agents.</p>" + _table(header, rows)
    )


def _statements_table(statements: list[dict[str, Any]]) -> str:
    """The method's privacy statements, each with its level, kind and source (``privacy.statements``)."""
    if not statements:
        return ""
    rows = []
    for index, entry in enumerate(statements):
        key = f"privacy.statements.{index}"
        figure = _value(f"{key}.epsilon", entry.get("epsilon"), "∞")
        if entry.get("mu") is not None:
            figure = f"μ = {_value(f'{key}.mu', entry['mu'])}, ε = {figure}"
        kind = html.escape(str(entry.get("kind"))) + (" (headline)" if entry.get("headline") else "")
        rows.append(
            (
                _value(f"{key}.name", entry.get("name")),
                _value(f"{key}.level", entry.get("level")),
                figure,
                kind,
                _value(f"{key}.source", entry.get("source")),
            )
        )
    header = ("figure", "level", "value", "kind", "source")
    return "<h3>Statements beside the headline</h3>" + _table(header, rows)


def _run_panels(run: RunData) -> list[Panel]:
    result = run.result
    voting = bool(result.get("queries"))
    analysis = run.analysis
    missing = "this run directory has no analysis.npz (written by fedvote run --out since the report feature)"
    panels: list[Panel] = []

    # (a) a single run is one point: the curve needs a sweep
    panels.append(
        Panel(
            "tradeoff",
            "Privacy–accuracy trade-off",
            "Accuracy against ε, one line per method (<cite>voting paper, Figure 2</cite>).",
            omitted="a single run is one point of the curve; fedvote sweep (then fedvote report "
            "on its directory) or fedvote plot tradeoff over several result.json files "
            "draws it",
        )
    )

    # (b) ε vs queries (voting) or rounds (gradient)
    if voting:
        curve = curves.voting_epsilon_curve(run)
        note = None
        caption = (
            "ε after each number of released (or, with label release, checked) queries at both "
            "levels: the data-independent guarantee, by the run's accountant, or for a PLD run by "
            "the exact Gaussian closed form (PLD's limit; the legend names both and marks the run's "
            "own PLD ε at the last step). The data-dependent ε "
            "(not itself private) applies only to label release (Confident-GNMax) and is the "
            "single figure of the Privacy section, not a curve."
        )
    else:
        curve = curves.gradient_epsilon_curve(run)
        note = None
        caption = (
            "ε after each number of rounds at both levels, from the method's own privacy events "
            "and the run's accountant. Gradient methods have no votes, so no data-dependent ε."
        )
    if curve is None:
        reason = (
            "the run is not private: no ε to plot"
            if not result["privacy"].get("private")
            else "the run's recorded config no longer builds its method"
        )
        panels.append(Panel("epsilon_curve", "Privacy spent over the run", caption, omitted=reason))
    else:
        panels.append(
            Panel("epsilon_curve", f"ε vs {curve.unit}", caption, plots.epsilon_curve_figure(curve, note))
        )

    # (c) vote margins
    margins_caption = (
        "Histogram of the vote margin γ(x) of each released query (the top-two gap of the "
        "clean mean vote) with the threshold above which the noisy label matches the "
        "clean majority with probability at least one minus δ (<cite>voting paper, "
        "Lemma 4</cite>), and label accuracy in each margin bucket."
    )
    if not voting:
        panels.append(
            Panel(
                "margins",
                "Vote margins",
                margins_caption,
                omitted="a gradient method releases no votes, so there are no vote margins",
                diagnostic=True,
            )
        )
    else:
        data = curves.margin_data(run)
        if data is None:
            reason = (
                missing
                if analysis is None
                else (
                    "clean vote histograms exist only in an in-process simulation (LocalTransport); in a "
                    "deployment no one sees them, and this run recorded none"
                )
            )
            panels.append(Panel("margins", "Vote margins", margins_caption, omitted=reason, diagnostic=True))
        else:
            panels.append(
                Panel("margins", "Vote margins", margins_caption, plots.margins_figure(data), diagnostic=True)
            )

    # (d) teacher accuracies
    teacher_caption = (
        f"Each agent's teacher accuracy {_teacher_test_points(result)}, sorted, and their distribution "
        "(<cite>reputation-weighted PATE, Figures 2–3</cite>): a simulation diagnostic."
    )
    if not voting:
        panels.append(
            Panel(
                "teachers",
                "Teacher accuracy",
                teacher_caption,
                omitted="gradient methods train no per-agent teachers",
                diagnostic=True,
            )
        )
    elif analysis is None or analysis.teacher_accuracies is None:
        panels.append(
            Panel(
                "teachers",
                "Teacher accuracy",
                teacher_caption,
                omitted=missing if analysis is None else "this run recorded no teacher accuracies",
                diagnostic=True,
            )
        )
    else:
        kind = (result.get("diagnostics") or {}).get("teacher_kind")  # Method.agent_models
        label = f"{kind[:1].upper()}{kind[1:]} accuracy across agents" if kind else None
        points = analysis.teacher_accuracy_test_points
        figure = plots.teacher_accuracy_figure(
            analysis.teacher_accuracies,
            *(label,) if label else (),
            test_points=None if points is None else int(points),
        )
        panels.append(Panel("teachers", "Teacher accuracy", teacher_caption, figure, diagnostic=True))

    # (e) the partition
    partition_caption = (
        "Records per agent, stacked by class: the federation's partition as the "
        "simulation built it (in a deployment the server never sees it)."
    )
    if analysis is None:
        panels.append(Panel("partition", "Partition", partition_caption, omitted=missing, diagnostic=True))
    else:
        panels.append(
            Panel(
                "partition",
                "Partition",
                partition_caption,
                plots.partition_figure(analysis.class_counts),
                diagnostic=True,
            )
        )
    return panels


def _teacher_test_points(result: dict[str, Any]) -> str:
    """Which test points the teacher accuracies read, each number tagged with its JSON key.

    A seeded sample of at most :data:`~fedvote.analysis.DIAGNOSTIC_TEST_SAMPLE` (result.json's
    ``diagnostics.teacher_accuracy_test_points``); a run written before the sample has no such
    key and used the whole test set.
    """
    points = (result.get("diagnostics") or {}).get("teacher_accuracy_test_points")
    total = result.get("test_size")
    if points is None:
        return "on the test set"
    shown = _value("diagnostics.teacher_accuracy_test_points", points)
    if total is None:
        return f"on a sample of {shown} test points"
    if points >= total:
        return f"on all {shown} test points"
    return (
        f"on a seeded uniform sample of {shown} of the {_value('test_size', total)} test points, "
        "not the whole test set (the student's accuracy is on the whole test set)"
    )


# --- a sweep and a comparison ---------------------------------------------------------------

_ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seed", "seed"),
    ("sigma", "σ"),
    ("queries", "queries"),
    ("accuracy", "accuracy"),
    ("label_accuracy", "pseudo-label accuracy"),
    ("epsilon_agent", "ε agent"),
    ("epsilon_instance", "ε instance"),
    ("delta", "δ"),
    ("accountant", "accountant"),
    ("calibrated_level", "calibrated level"),
    ("time_s", "seconds"),
)


def _rows_table(data: dict[str, Any], columns: tuple[tuple[str, str], ...], axes: list[str]) -> str:
    rows = data.get("rows", [])
    present = [(key, name) for key, name in columns if any(key in row for row in rows)]
    header = ["method", *axes, *(name for _, name in present)]
    body = []
    for i, row in enumerate(rows):
        cells = [_value(f"rows.{i}.method", row.get("method"))]
        cells += [_value(f"rows.{i}.point.{axis}", (row.get("point") or {}).get(axis)) for axis in axes]
        cells += [
            _value(f"rows.{i}.{key}", row.get(key), "∞" if key.startswith("epsilon") else None)
            for key, _ in present
        ]
        body.append(cells)
    return _table(header, body, "rows")


def _tradeoff_panel(path: Path, caption: str) -> Panel:
    points = tradeoff_points([path])
    return Panel("tradeoff", "Privacy–accuracy trade-off", caption, plots.tradeoff_figure(points))


def _sweep_page(folder: Path) -> tuple[str, str, list[Panel], str]:
    data = read_json(folder / SWEEP_FILE, "directory")
    if not isinstance(data.get("rows"), list):
        raise ConfigError("directory", f"{folder / SWEEP_FILE} has no 'rows' list")
    sweep = data.get("sweep", {})
    axes = list((sweep.get("grid") or {}).keys())
    methods = ", ".join(_value(f"sweep.methods.{i}", m) for i, m in enumerate(sweep.get("methods", [])))
    grid = "; ".join(
        f"{html.escape(axis)}: "
        + ", ".join(_value(f"sweep.grid.{axis}.{j}", v) for j, v in enumerate(values))
        for axis, values in (sweep.get("grid") or {}).items()
    )
    body = f'<p class="sub">methods {methods} over the grid {grid}</p>'
    if sweep.get("command"):
        body += f'<p class="sub">command: <code>{_value("sweep.command", sweep["command"])}</code></p>'
    caption = (
        "Test accuracy against the ε each run achieved, one line per method (mean over seeds, "
        "error bars one standard deviation); non-private methods are dashed reference lines "
        "(<cite>voting paper, Figure 2</cite>)."
    )
    panels = [_tradeoff_panel(folder / SWEEP_FILE, caption)]
    tail = f"<section><h2>Runs</h2>{_rows_table(data, _ROW_COLUMNS, axes)}</section>"
    if isinstance(sweep.get("machine"), dict):
        tail += f"<section><h2>Machine</h2>{_config_table(data, 'sweep.machine')}</section>"
    tail += f"<section><h2>Base configuration</h2>{_config_table(data, 'base_config')}</section>"
    return "fedvote sweep report", body, panels, tail


_COMPARE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("accuracy", "accuracy"),
    ("epsilon_agent", "ε agent"),
    ("epsilon_instance", "ε instance"),
    ("calibrated_level", "calibrated level"),
    ("sigma", "σ"),
    ("upload_floats", "floats up"),
    ("download_floats", "floats down"),
    ("rounds", "rounds"),
    ("seconds", "seconds"),
)


def _compare_page(folder: Path) -> tuple[str, str, list[Panel], str]:
    data = read_json(folder / COMPARE_FILE, "directory")
    if not isinstance(data.get("rows"), list):
        raise ConfigError("directory", f"{folder / COMPARE_FILE} has no 'rows' list")
    body = ""
    if "target_epsilon" in data:
        body += (
            '<p class="sub">every method calibrated to ε = '
            + _value("target_epsilon", data["target_epsilon"])
            + f" at δ = {_value('delta', data.get('delta'))}"
            + f" ({_value('accountant', data.get('accountant'))})</p>"
        )
    caption = "Each method's test accuracy at the ε it achieved (<cite>voting paper, Figure 2</cite>)."
    panels = [_tradeoff_panel(folder / COMPARE_FILE, caption)]
    tail = f"<section><h2>Methods</h2>{_rows_table(data, _COMPARE_COLUMNS, [])}</section>"
    if isinstance(data.get("config"), dict):
        tail += f"<section><h2>Configuration</h2>{_config_table(data, 'config')}</section>"
    return "fedvote comparison report", body, panels, tail


# --- the page ----------------------------------------------------------------------------------

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0 auto;
max-width:1000px;padding:12px 14px 40px;color:#1b1f24;background:#fff;line-height:1.45}
h1{font-size:1.45rem;margin:.4em 0 .2em}h2{font-size:1.15rem;margin:1.4em 0 .5em;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:1em 0 .3em}.sub{color:#444;margin:.2em 0}.warn{color:#b00020}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px}
.card{border:1px solid #d8dee4;border-radius:8px;padding:8px 10px;background:#f6f8fa}
.card .label{font-size:.8rem;color:#57606a}.card .big{font-size:1.3rem;font-weight:600;word-break:break-word}
.note{font-size:.8rem;color:#57606a}.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;font-size:.85rem;min-width:100%}
table.kv thead{display:none}table.kv td:first-child{width:34%;color:#57606a}
th,td{border-bottom:1px solid #e5e8eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}table.config td:first-child{font-family:ui-monospace,monospace;white-space:nowrap}
figure{margin:0}figure img{width:100%;height:auto;border:1px solid #eee;border-radius:6px}
figcaption,.omitted{font-size:.85rem;color:#444}.omitted{border-left:4px solid #d0a000;padding:4px 10px;
background:#fffbe6}code{font-size:.85em;word-break:break-all}
cite{font-style:normal}
"""


def _panels_html(panels: list[Panel]) -> str:
    released = [panel for panel in panels if not panel.diagnostic]
    diagnostic = [panel for panel in panels if panel.diagnostic]
    page = _panel_section("Plots", "", released)
    if diagnostic:
        page += _panel_section(
            "Simulation diagnostics",
            f'<p class="warn" id="diagnostics-note">{html.escape(DIAGNOSTIC_NOTE.capitalize())}. These plots '
            "read the agents' data without noise; they exist only in a simulation.</p>",
            diagnostic,
        )
    return page


def _panel_section(heading: str, preface: str, panels: list[Panel]) -> str:
    parts = [f"<section><h2>{html.escape(heading)}</h2>{preface}"]
    for panel in panels:
        parts.append(f'<div class="panel" id="plot-{panel.name}"><h3>{html.escape(panel.title)}</h3>')
        if panel.figure is not None:
            svg = base64.b64encode(plots.figure_bytes(panel.figure, "svg")).decode("ascii")
            parts.append(
                f'<figure><img alt="{html.escape(panel.title)}" src="data:image/svg+xml;base64,{svg}">'
                f"<figcaption>{panel.caption}</figcaption></figure>"
            )
        else:
            parts.append(
                f'<p class="omitted">Omitted: {html.escape(panel.omitted or "")}.</p>'
                f'<p class="note">{panel.caption}</p>'
            )
        parts.append("</div>")
    parts.append("</section>")
    return "".join(parts)


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}"
        '<p class="note">Written by <code>fedvote report</code>; self-contained (no network).</p>'
        "</body></html>\n"
    )
