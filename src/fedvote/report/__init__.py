"""Plots and the HTML report of runs, sweeps and comparisons.

``write_report(directory)`` writes ``directory/report.html`` (and the plots as PNG and
SVG under ``directory/plots/``); :mod:`fedvote.report.plots` draws each figure with
matplotlib's Agg canvas, never touching pyplot's global state.
"""

from fedvote.report.html import REPORT_FILE, plot_paths, write_report
from fedvote.report.loaders import RunData, TradeoffPoint, load_run, tradeoff_points

__all__ = [
    "REPORT_FILE",
    "RunData",
    "TradeoffPoint",
    "load_run",
    "plot_paths",
    "tradeoff_points",
    "write_report",
]
