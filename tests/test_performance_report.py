"""benchmarks/report.py: docs/performance.md is exactly what it renders, hand-written notes included."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402


def test_docs_performance_is_what_the_report_renders():
    """A hand edit of docs/performance.md would be lost at the next make bench: put it in benchmarks/notes/."""
    assert (ROOT / "docs" / "performance.md").read_text() == report.render()


def test_a_note_takes_the_place_of_its_results_files(tmp_path):
    results, notes = tmp_path / "results", tmp_path / "notes"
    results.mkdir()
    notes.mkdir()
    for name in ("alpha", "scale", "scale_full", "zeta"):
        (results / f"{name}.json").write_text(json.dumps({"title": f"generated {name}", "results": [{"x": 1}]}))
    (notes / "scale.md").write_text("<!-- also replaces: scale_full -->\n## Scale, by hand\n\nmeasured by `cmd`\n")
    (notes / "beta.md").write_text("## Beta, by hand\n")
    text = report.render(results, notes)
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert titles == ["## generated alpha", "## Beta, by hand", "## Scale, by hand", "## generated zeta"]
    assert "also replaces" not in text and "measured by `cmd`" in text
