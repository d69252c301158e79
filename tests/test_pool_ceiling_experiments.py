"""experiments/fashion_mnist_ceiling.py and experiments/query_selection.py (issue 43): their sections
say what the measured rows say, and a partial rerun keeps the other data sets' rows with their run."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def ceiling(load_experiment):
    return load_experiment("fashion_mnist_ceiling")


@pytest.fixture(scope="module")
def query_selection(load_experiment):
    return load_experiment("query_selection")


def _ceiling_row(what: str, accuracy: float, right: float = 1.0) -> dict:
    return {"what": what, "accuracy": accuracy, "right_labels": right, "labelled": 200, "seconds": 90.0}


def _record(rows: list[dict]) -> dict:
    return {"date": "2026-11-28", "machine": "here", "rows": rows, "wall_seconds": 400.0, "load_after": 2.0}


def test_the_ceiling_section_says_below_the_bar_from_the_noiseless_rows_only(ceiling):
    rows = [
        _ceiling_row("default student, 1,000 pool images with their true labels", 0.8316),
        # a noisy row above the bar must not count as what the noiseless pool allows
        _ceiling_row("ε 4.3: random queries (Q = 200, σ 10.99), noisy gap ≥ 0σ kept (200)", 0.90, 0.79),
    ]
    text = ceiling.section(_record(rows))
    assert "The best of these noiseless cases is 0.8316: below the Bar's 0.85" in text
    assert "| default student, 1,000 pool images with their true labels | 0.8316 | 1.000 | 90 |" in text


def test_the_ceiling_section_says_at_or_above_when_a_noiseless_row_reaches_the_bar(ceiling):
    text = ceiling.section(_record([_ceiling_row("default student, 3,000 pool images", 0.86)]))
    assert "0.8600: at or above the Bar's 0.85" in text and "limited by its labels" in text


def _selection_row(data: str, selection: str, accuracies: list[float], **extra) -> dict:
    runs = [{"seed": s, "accuracy": a, "pseudo_label_accuracy": 0.8, "epsilon_agent": 4.2997, "seconds": 100.0}
            for s, a in enumerate(accuracies)]  # fmt: skip
    return {"data": data, "selection": selection, "runs": runs, **extra}


def test_a_partial_query_selection_rerun_keeps_the_other_data_sets_with_their_run(
    query_selection, tmp_path, monkeypatch
):
    saved = tmp_path / "query_selection.json"
    old = [_selection_row("mnist", "random", [0.979, 0.971, 0.971]), _selection_row("mnist", "typical", [0.98] * 3)]
    saved.write_text(json.dumps({"date": "2026-11-26", "machine": "old host", "rows": old}))
    written = {}
    monkeypatch.setattr(query_selection, "SAVED", saved)
    monkeypatch.setattr(query_selection, "machine", lambda: "new host")
    monkeypatch.setattr(query_selection, "measure", lambda data: [
        _selection_row(data, "random", [0.77, 0.78, 0.79], date="2026-11-28", machine="new host")])
    monkeypatch.setattr(query_selection, "save_results", lambda name, record, text: written.update(record=record,
                                                                                                    text=text))
    query_selection.main(["fashion-mnist"])
    rows = written["record"]["rows"]
    assert [(r["data"], r["selection"]) for r in rows] == [
        ("mnist", "random"), ("mnist", "typical"), ("fashion-mnist", "random")
    ]
    assert rows[0]["machine"] == "old host" and rows[0]["date"] == "2026-11-26"
    text = written["text"]
    assert "mnist: ran 2026-11-26 on old host." in text and "fashion-mnist: ran 2026-11-28 on new host." in text
    assert "| fashion-mnist | random | 0.770, 0.780, 0.790 | 0.780 ± 0.010 |" in text


def test_query_selection_refuses_an_unknown_data_set(query_selection):
    with pytest.raises(SystemExit, match="unknown data cifar; choose from digits, mnist, fashion-mnist"):
        query_selection.main(["cifar"])


def test_the_student_capacity_section_names_each_knob_and_its_command(ceiling):
    record = {"date": "2026-11-28", "machine": "here", "labelled": 200, "epochs": 40, "wall_seconds": 600.0,
              "load_after": 1.0, "rows": [{"what": what, "accuracy": 0.8 + i / 100, "seconds": 100.0}
                                          for i, (what, _, _) in enumerate(ceiling.STUDENT_VARIANTS)]}  # fmt: skip
    text = ceiling.capacity_section(record)
    assert "fashion_mnist_ceiling.py --part student" in text and "200 random pool images" in text
    assert "| default student | 0.8000 | 100 |" in text
    assert "| twice the steps (epochs x2, step cap x2) | 0.8100 | 100 |" in text
    # each variant changes one knob against the defaults (the step knob: the epochs and the cap together)
    (_, factor, default), *others = ceiling.STUDENT_VARIANTS
    assert factor == 1 and default == ceiling.ConsistencySettings()
    changed = [
        (factor, {f for f in default.__dataclass_fields__ if getattr(settings, f) != getattr(default, f)})
        for _, factor, settings in others
    ]
    assert changed == [(2, {"max_steps"}), (1, {"relabel_cnn_widths"})]
