"""``fedvote report DIR`` and ``fedvote plot tradeoff FILE...`` from the command line."""

import pytest
from PIL import Image


def test_report_command_writes_the_page_and_plot_files(sweep_dir, invoke):
    code, out, err = invoke(["report", str(sweep_dir)])
    assert code == 0
    assert out.strip() == f"wrote {sweep_dir / 'report.html'}"
    assert f"wrote {sweep_dir / 'plots' / 'tradeoff.png'}" in err
    assert (sweep_dir / "report.html").stat().st_size > 10000


def test_plot_tradeoff_writes_png_and_svg(sweep_dir, tmp_path, invoke):
    png = tmp_path / "curve.png"
    code, out, _ = invoke(["plot", "tradeoff", str(sweep_dir / "sweep.json"), "--out", str(png)])
    assert code == 0
    assert out.strip() == f"wrote {png} (16 points; methods: dp-fedavg, pate-fl)"
    assert Image.open(png).size[0] >= 600
    svg = tmp_path / "curve.svg"
    code, out, _ = invoke(["plot", "tradeoff", str(sweep_dir), "experiments/results/compare_mnist_noniid.json",
                           "--level", "agent", "--title", "digits and MNIST", "--out", str(svg)])
    assert code == 0 and svg.read_text().lstrip().startswith("<?xml")
    # at the agent level DP-FedSGD (instance-only) is left out
    assert "methods: dp-fedavg, fedavg, pate-fl" in out


@pytest.mark.parametrize(("args", "expected"), [
    (["report", "{tmp}/nowhere"], "fedvote: error: Invalid value for DIRECTORY: {tmp}/nowhere is not a directory"),
    (["plot", "tradeoff", "missing.json"], "fedvote: error: Invalid value for FILES: missing.json does not exist"),
    (["plot", "tradeoff", "pyproject.toml"], "fedvote: error: Invalid value for FILES: pyproject.toml is not readable JSON"),
    (["plot", "tradeoff", "experiments/results/compare_mnist_noniid.json", "--out", "x.pdf"],
     "fedvote: error: --out: x.pdf: the file name must end in .png or .svg"),
])
def test_bad_input_is_one_line(args, expected, tmp_path, invoke):
    args = [arg.format(tmp=tmp_path) for arg in args]
    code, _, err = invoke(args)
    expected = expected.format(tmp=tmp_path)
    assert code == 2
    assert err.startswith(expected) and err.count("\n") == 1


def test_report_of_an_empty_directory_names_what_it_needs(tmp_path, invoke):
    code, _, err = invoke(["report", str(tmp_path)])
    assert code == 2
    assert "holds no result.json, sweep.json or compare.json" in err
