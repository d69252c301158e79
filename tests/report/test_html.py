"""report.html: self-contained, every number equal to the JSON's, and it renders in Chromium."""

import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedvote.report import write_report

NUMBER = re.compile(r"\d")
# Elements whose text is not shown, or cites a paper ("Lemma 4"), rather than a value.
NOT_VALUES = {"style", "title", "cite", "script"}


class ShownValues(HTMLParser):
    """Collects (data-key, data-value, shown text) of value spans and all other visible text."""

    def __init__(self):
        super().__init__()
        self.stack = []  # (tag, attrs) of open elements
        self.values = []  # [key, raw json, text]
        self.free_text = []
        self.images = []
        self.links = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        for name in ("href", "src"):
            if name in attrs:
                self.links.append(attrs[name])
        if tag in ("img", "meta", "br", "link", "input"):
            return
        self.stack.append((tag, attrs))
        if "data-key" in attrs:
            self.values.append([attrs["data-key"], attrs["data-value"], ""])

    def handle_endtag(self, tag):
        while self.stack:
            open_tag, _ = self.stack.pop()
            if open_tag == tag:
                break

    def handle_data(self, data):
        inside_value = any("data-key" in attrs for _, attrs in self.stack)
        if inside_value:
            self.values[-1][2] += data
        elif not any(tag in NOT_VALUES for tag, _ in self.stack):
            self.free_text.append(data)


def parse(path: Path) -> ShownValues:
    parser = ShownValues()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def lookup(data, key):
    """The value at a dotted key in the JSON (list indices as numbers); KeyError if absent."""
    value = data
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def assert_shown_equals(shown: str, value, key: str):
    if value is None:
        assert not NUMBER.search(shown), f"{key}: null shown as {shown!r}"
    elif isinstance(value, bool):
        assert shown == ("yes" if value else "no"), key
    elif isinstance(value, int):
        assert int(shown) == value, key
    elif isinstance(value, float):
        # shown to 4 significant digits: within half a unit of the last one
        assert float(shown) == pytest.approx(value, rel=5e-4, abs=1e-12), f"{key}: {shown} vs {value}"
    elif isinstance(value, str):
        assert shown == value, key
    else:
        assert json.loads(shown) == value, key


def assert_every_number_comes_from(report: Path, source: Path, required: set[str]):
    data = json.loads(source.read_text())
    page = parse(report)
    assert page.values, "no values shown"
    for key, raw, shown in page.values:
        value = lookup(data, key)  # every key exists in the JSON file
        assert json.loads(raw) == value, key
        assert_shown_equals(shown.strip(), value, key)
    free = " ".join(page.free_text)
    assert not NUMBER.search(free), f"a number outside any value: {NUMBER.findall(free)} in {free!r}"
    assert required <= {key for key, _, _ in page.values}
    return page


def assert_self_contained(page: ShownValues, report: Path):
    text = report.read_text(encoding="utf-8")
    assert "<script" not in text.lower()
    assert all(link.startswith("data:") or link.startswith("#") for link in page.links), page.links
    assert all(src.startswith("data:image/svg+xml;base64,") for src in page.images)
    assert 'name="viewport"' in text and "width=device-width" in text  # readable on a phone
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text


RUN_HEADLINE = {
    "accuracy", "label_accuracy", "diagnostics.teacher_accuracy", "sigma", "queries", "privacy.delta", "privacy.accountant",
    "privacy.agent.epsilon", "privacy.instance.epsilon",
    # the run released the noisy sums: no data-dependent ε, and the page says why at both levels
    "privacy.agent.data_dependent_label", "privacy.instance.data_dependent_label", "communication.upload_floats", "communication.download_floats",
    "communication.rounds", "timings.total_s", "config.federation.agents",
}


def test_run_report_shows_each_number_of_result_json(voting_run):
    report = write_report(voting_run)
    assert report == voting_run / "report.html"
    page = assert_every_number_comes_from(report, voting_run / "result.json", RUN_HEADLINE)
    assert_self_contained(page, report)
    # the plots: (a) needs several runs, (b)-(e) drawn; each also as PNG and SVG files
    assert len(page.images) == 4
    for name in ("epsilon_curve", "margins", "teachers", "partition"):
        assert (voting_run / "plots" / f"{name}.png").stat().st_size > 8000
        assert (voting_run / "plots" / f"{name}.svg").stat().st_size > 8000
    text = report.read_text()
    assert "not itself private" in text and "not differentially private" in text


def test_gradient_run_report_omits_the_vote_plots_and_says_why(gradient_run):
    report = write_report(gradient_run, plot_files=False)
    page = assert_every_number_comes_from(
        report, gradient_run / "result.json",
        {"accuracy", "privacy.agent.epsilon", "privacy.instance.epsilon", "communication.rounds"})
    assert_self_contained(page, report)
    text = report.read_text()
    assert "a gradient method releases no votes" in text
    assert "gradient methods train no per-agent teachers" in text
    assert len(page.images) == 2  # ε vs rounds, partition
    assert not (gradient_run / "plots").exists()


def test_sweep_report_shows_each_number_of_sweep_json(sweep_dir):
    report = write_report(sweep_dir)
    page = assert_every_number_comes_from(
        report, sweep_dir / "sweep.json",
        {"rows.0.accuracy", "rows.0.epsilon_agent", "rows.0.point.epsilon", "sweep.grid.epsilon.3",
         "base_config.federation.agents", "sweep.command"})
    assert_self_contained(page, report)
    assert len(page.images) == 1 and (sweep_dir / "plots" / "tradeoff.svg").exists()


def test_compare_report_shows_each_number_of_compare_json(tmp_path):
    folder = tmp_path / "compare"
    folder.mkdir()
    shutil.copy("experiments/results/compare_mnist_noniid.json", folder / "compare.json")
    report = write_report(folder, plot_files=False)
    assert_every_number_comes_from(report, folder / "compare.json", {"rows.0.accuracy", "rows.3.epsilon_instance"})


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Chromium is missing: `make test` installs it (apt-get install -y chromium)"
    return path


def screenshot(report: Path, out: Path, width: int, height: int, profile: Path) -> np.ndarray:
    profile.mkdir()
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={profile}", f"--window-size={width},{height}", f"--screenshot={out}",
        report.resolve().as_uri(),
    ]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]
    image = Image.open(out).convert("RGB")
    assert image.size == (width, height)
    return np.asarray(image, dtype=float)


def test_run_report_renders_in_headless_chromium_on_a_phone_screen(voting_run, tmp_path):
    report = write_report(voting_run, plot_files=False)
    pixels = screenshot(report, tmp_path / "phone.png", 412, 5000, tmp_path / "profile")
    gray = pixels.mean(axis=2)
    assert gray.std() > 20  # not blank
    assert (gray < 200).mean() > 0.02  # text and plots, not an empty page
    colour = pixels.max(axis=2) - pixels.min(axis=2)
    assert (colour > 80).mean() > 0.005  # the inlined plots' coloured marks were drawn
    # nothing wider than the screen: the rightmost column is page background
    assert np.all(gray[:, -3:] > 240)


def test_sweep_report_renders_in_headless_chromium(sweep_dir, tmp_path):
    report = write_report(sweep_dir, plot_files=False)
    pixels = screenshot(report, tmp_path / "desktop.png", 1000, 1400, tmp_path / "profile")
    assert pixels.mean(axis=2).std() > 20
    assert ((pixels.max(axis=2) - pixels.min(axis=2)) > 80).mean() > 0.003


def test_values_are_rounded_not_invented():
    # the number formatting the page uses, pinned: 4 significant digits, integers whole
    from fedvote.report.html import format_value

    assert format_value(3.99948953669122) == "3.999"
    assert format_value(0.001) == "0.001"
    assert format_value(951390) == "951390"
    assert format_value(None) == "—"
    assert format_value(True) == "yes"
    assert not math.isnan(float(format_value(1e-5)))


def test_private_diagnostics_are_drawn_apart_and_labelled(voting_run):
    text = write_report(voting_run).read_text(encoding="utf-8")
    released, _, diagnostics = text.partition("<h2>Simulation diagnostics</h2>")
    assert "not private; a deployment never releases it" in diagnostics
    for plot in ("plot-teachers", "plot-partition", "plot-margins"):  # noiseless views of private data
        assert plot in diagnostics and plot not in released
    assert "plot-epsilon_curve" in released
    assert "mean teacher accuracy" not in released
    assert 'id="diagnostics"' in diagnostics  # the scalar diagnostics of result.json, apart too


def _teacher_caption(folder: Path) -> str:
    text = write_report(folder, plot_files=False).read_text(encoding="utf-8")
    panel = text[text.index('id="plot-teachers"'):]
    return panel[: panel.index("</figcaption>")]


def test_the_teacher_caption_states_the_test_points_the_accuracies_read(voting_run, tmp_path):
    # digits' test set is below the diagnostic sample: all of it, the count keyed to result.json
    caption = _teacher_caption(voting_run)
    assert "on all" in caption and 'data-key="diagnostics.teacher_accuracy_test_points"' in caption
    # a run whose result.json states a sample smaller than its test set says so
    sampled = tmp_path / "sampled"
    shutil.copytree(voting_run, sampled)
    result = json.loads((sampled / "result.json").read_text())
    result["diagnostics"]["teacher_accuracy_test_points"] = result["test_size"] - 10
    (sampled / "result.json").write_text(json.dumps(result))
    caption = _teacher_caption(sampled)
    assert "seeded uniform sample of" in caption and "not the whole test set" in caption
    assert 'data-key="test_size"' in caption
    assert_every_number_comes_from(sampled / "report.html", sampled / "result.json", RUN_HEADLINE)
    # a result.json written before the sample (whole test set) names no count
    del result["diagnostics"]["teacher_accuracy_test_points"]
    (sampled / "result.json").write_text(json.dumps(result))
    caption = _teacher_caption(sampled)
    assert "on the test set" in caption and "teacher_accuracy_test_points" not in caption
