"""Each plot renders from a small fixture to a valid PNG and SVG of non-trivial size."""

import io
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from fedvote.analysis import RunAnalysis
from fedvote.errors import ConfigError
from fedvote.report import curves, plots
from fedvote.report.loaders import RunData, load_run, tradeoff_points

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_valid_png(data: bytes, min_bytes: int = 8000):
    assert data.startswith(PNG_MAGIC)
    assert len(data) > min_bytes
    image = Image.open(io.BytesIO(data))
    image.verify()
    image = Image.open(io.BytesIO(data)).convert("L")
    assert image.size[0] >= 600 and image.size[1] >= 300
    pixels = np.asarray(image, dtype=float)
    assert pixels.std() > 10  # something was drawn, not a blank canvas


def assert_valid_svg(data: bytes, min_bytes: int = 8000):
    assert len(data) > min_bytes
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(list(root.iter("{http://www.w3.org/2000/svg}path"))) > 20


def assert_renders(figure, tmp_path, name):
    for fmt, check in (("png", assert_valid_png), ("svg", assert_valid_svg)):
        path = plots.save_figure(figure, tmp_path / f"{name}.{fmt}")
        check(path.read_bytes())


def synthetic_run(synthetic, tmp_path, histograms=True):
    analysis = RunAnalysis(
        class_counts=synthetic["class_counts"],
        teacher_accuracies=synthetic["teacher_accuracies"],
        query_indices=np.arange(synthetic["histograms"].shape[0]),
        pseudo_labels=synthetic["pseudo"],
        true_labels=synthetic["truth"],
        vote_histograms=synthetic["histograms"] if histograms else None,
    )
    result = {
        "method": "pate-fl", "agents": synthetic["agents"], "sigma": 4.0,
        "queries": int(synthetic["histograms"].shape[0]), "accuracy": 0.8,
        "privacy": {"private": True, "delta": 1e-3, "accountant": "rdp",
                    "agent": {"epsilon": 1.0, "sensitivity": 1.0},
                    "instance": {"epsilon": 2.0, "sensitivity": math.sqrt(2.0)}},
        "config": {},
    }
    return RunData(directory=tmp_path, result=result, analysis=analysis)


def test_tradeoff_plot_from_a_sweep_has_both_curves_labelled_axes_and_legend(sweep_dir, tmp_path):
    figure = plots.tradeoff_figure(tradeoff_points([sweep_dir]))
    (axes,) = figure.axes
    assert "ε" in axes.get_xlabel() and "agent" in axes.get_xlabel()
    assert axes.get_ylabel() == "test accuracy"
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["dp-fedavg", "pate-fl"]
    lines = {line.get_label(): line for line in axes.get_lines()}
    x, y = lines["pate-fl"].get_data()
    np.testing.assert_allclose(x, np.array([1, 2, 4, 8]) * 0.9995)
    np.testing.assert_allclose(y, [0.625, 0.745, 0.835, 0.885])  # mean over the two seeds
    assert_renders(figure, tmp_path, "tradeoff")


def test_tradeoff_plot_from_a_real_compare_file_marks_levels_and_the_non_private_reference(tmp_path):
    points = tradeoff_points(["experiments/results/compare_mnist_noniid.json"])
    figure = plots.tradeoff_figure(points)
    legend = {text.get_text() for text in figure.axes[0].get_legend().get_texts()}
    # DP-FedSGD protects only instances: it is plotted at its calibrated (instance) level
    assert legend == {"pate-fl (agent-level ε)", "dp-fedavg (agent-level ε)", "dp-fedsgd (instance-level ε)",
                      "fedavg (not private)"}
    assert_renders(figure, tmp_path, "compare")


def test_epsilon_curve_ends_at_the_runs_epsilon_and_draws_no_data_dependent_curve_for_sums(voting_run, tmp_path):
    run = load_run(voting_run)
    curve = curves.voting_epsilon_curve(run)
    assert curve is not None and curve.unit == "queries answered"
    assert curve.steps[0] == 1 and curve.steps[-1] == run.result["queries"]
    for level in ("agent", "instance"):
        # exact Gaussian closed form vs the run's PLD: equal up to PLD's discretisation
        assert curve.independent[level][-1] == pytest.approx(run.result["privacy"][level]["epsilon"], rel=1e-3)
        assert np.all(np.diff(curve.independent[level]) > 0)
    # the run released the noisy sums: no data-dependent figure applies (trust issue 15, defect 4)
    assert curve.dependent == {}
    figure = plots.epsilon_curve_figure(curve)
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    # the curve's accountant and the run's (issue 47: it said "(exact)" alone for a PLD run)
    assert "agent level, data-independent (exact closed form; the run's ε: pld)" in labels
    assert any(label.startswith("agent level, the run's ε ") and label.endswith("(pld)") for label in labels)
    assert not any("data-dependent" in label for label in labels)
    assert_renders(figure, tmp_path, "epsilon_curve")


@pytest.mark.slow  # a 100-round gradient run: make test-slow (CI)
def test_epsilon_curve_of_a_gradient_run_counts_rounds(gradient_run, tmp_path):
    run = load_run(gradient_run)
    curve = curves.gradient_epsilon_curve(run)
    assert curve is not None and curve.unit == "rounds" and curve.dependent == {}
    assert curve.independent["agent"][-1] == pytest.approx(run.result["privacy"]["agent"]["epsilon"], rel=1e-6)
    assert_renders(plots.epsilon_curve_figure(curve), tmp_path, "gradient_curve")


def test_margin_histogram_marks_lemma4_threshold_and_buckets_cover_every_query(synthetic, tmp_path):
    data = curves.margin_data(synthetic_run(synthetic, tmp_path))
    n, c, sigma, delta = synthetic["agents"], synthetic["classes"], 4.0, 1e-3
    # Lemma 4: C·exp(−N²γ²/(8σ²)) = δ at γ = 2σ√(2 log(C/δ))/N
    assert data.threshold == pytest.approx(2 * sigma * math.sqrt(2 * math.log(c / delta)) / n)
    assert c * math.exp(-(n * data.threshold) ** 2 / (8 * sigma**2)) == pytest.approx(delta)
    top2 = np.sort(synthetic["histograms"], axis=1)[:, -2:]
    np.testing.assert_allclose(data.margins, (top2[:, 1] - top2[:, 0]) / n)
    buckets = plots.margin_buckets(data)
    assert sum(b[2] for b in buckets) == synthetic["histograms"].shape[0]
    assert all(0 <= b[3] <= 1 and 0 <= b[4] <= 1 for b in buckets)
    figure = plots.margins_figure(data)
    assert any("Lemma 4" in t.get_text() for t in figure.axes[0].get_legend().get_texts())
    assert_renders(figure, tmp_path, "margins")


def test_no_margins_without_clean_histograms(synthetic, tmp_path):
    assert curves.margin_data(synthetic_run(synthetic, tmp_path, histograms=False)) is None


def test_teacher_accuracy_and_partition_plots_render(synthetic, tmp_path):
    figure = plots.teacher_accuracy_figure(synthetic["teacher_accuracies"])
    bars = figure.axes[0].patches
    assert len(bars) == synthetic["agents"]
    assert [bar.get_height() for bar in bars] == sorted(synthetic["teacher_accuracies"])
    assert_renders(figure, tmp_path, "teachers")
    figure = plots.partition_figure(synthetic["class_counts"])
    bars = figure.axes[0].patches
    assert len(bars) == synthetic["agents"] * synthetic["classes"]
    tops = np.zeros(synthetic["agents"])
    for bar in bars:
        tops[round(bar.get_x() + bar.get_width() / 2)] = max(tops[round(bar.get_x() + bar.get_width() / 2)],
                                                             bar.get_y() + bar.get_height())
    np.testing.assert_allclose(tops, synthetic["class_counts"].sum(axis=1))  # stacks reach each agent's size
    assert_renders(figure, tmp_path, "partition")


def test_teacher_accuracy_plot_names_the_test_points_it_read(synthetic):
    figure = plots.teacher_accuracy_figure(synthetic["teacher_accuracies"], test_points=1000)
    assert figure.axes[0].get_ylabel() == "accuracy on 1000 test points"
    assert figure.axes[1].get_xlabel() == "teacher accuracy on 1000 test points"
    assert plots.teacher_accuracy_figure(synthetic["teacher_accuracies"]).axes[0].get_ylabel() == "test accuracy"


def test_plots_refuse_bad_input_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="must end in .png or .svg"):
        plots.save_figure(plots.teacher_accuracy_figure(np.array([0.5, 0.6])), tmp_path / "x.pdf")
    with pytest.raises(ConfigError, match="class_counts"):
        plots.partition_figure(np.zeros(3))
    with pytest.raises(ConfigError, match="teacher_accuracies"):
        plots.teacher_accuracy_figure(np.array([]))


def test_the_report_never_imports_pyplot_or_switches_the_global_backend():
    import subprocess
    import sys

    code = ("import sys, numpy, matplotlib; import fedvote.report, fedvote.cli; "
            "from fedvote.report import plots; "
            "plots.figure_bytes(plots.teacher_accuracy_figure(numpy.array([0.5, 0.7])), 'png'); "
            "print('matplotlib.pyplot' in sys.modules, matplotlib.rcParams._get_backend_or_none())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "None"]
