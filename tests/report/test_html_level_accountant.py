"""report.html names the accountant of each level's ε: its own, a fallback (RDP's bound, or none), or the run's.

``privacy.<level>.accountant`` / ``accountant_fallback`` (``fedvote.privacy.accountant.bounded_epsilon``):
a level whose PLD could not be built shows RDP's upper bound and why, or ∞ as "no finite bound
computed" — never "not private". Results written before the keys existed show ``privacy.accountant``.
"""

import importlib.util
import json
import shutil
from pathlib import Path

from fedvote.report import write_report

# test_html's checks of a page (every value span equals its JSON key), loaded by path
_SPEC = importlib.util.spec_from_file_location("report_test_html", Path(__file__).with_name("test_html.py"))
assert _SPEC is not None and _SPEC.loader is not None
_TEST_HTML = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_TEST_HTML)
assert_every_number_comes_from, parse = _TEST_HTML.assert_every_number_comes_from, _TEST_HTML.parse


def _copy_run(voting_run, tmp_path, edit):
    out = tmp_path / "run"
    shutil.copytree(voting_run, out, ignore=shutil.ignore_patterns("report.html", "plots"))
    result = json.loads((out / "result.json").read_text())
    edit(result["privacy"])
    (out / "result.json").write_text(json.dumps(result))
    return out


def _shown(page, key):
    return [shown.strip() for shown_key, _, shown in page.values if shown_key == key]


def test_each_level_shows_its_own_accountant_and_why_it_fell_back(voting_run, tmp_path):
    reason = "pld: so little noise that the privacy loss cannot be accounted (its PLD would need 2.9e+10 points)"

    def fall_back(privacy):
        privacy["agent"].update(accountant="none", epsilon=None, accountant_fallback=reason + "; rdp: refused")
        privacy["instance"].update(accountant="rdp", accountant_fallback=reason)

    out = _copy_run(voting_run, tmp_path, fall_back)
    report = write_report(out, plot_files=False)
    page = assert_every_number_comes_from(report, out / "result.json", set())
    assert _shown(page, "privacy.instance.accountant") and set(_shown(page, "privacy.instance.accountant")) == {"rdp"}
    assert _shown(page, "privacy.instance.accountant_fallback") == [reason]
    assert "privacy.accountant" not in {key for key, _, _ in page.values}  # each level says its own
    free = " ".join(page.free_text)
    assert "upper bound: the run's accountant could not account this level" in free
    assert "no finite bound computed" in free


def test_a_result_without_level_accountants_shows_the_runs(voting_run, tmp_path):
    def old_format(privacy):
        for level in ("agent", "instance"):
            privacy[level].pop("accountant", None)
            privacy[level].pop("accountant_fallback", None)

    out = _copy_run(voting_run, tmp_path, old_format)
    page = parse(write_report(out, plot_files=False))
    assert set(_shown(page, "privacy.accountant")) == {json.loads((out / "result.json").read_text())["privacy"]["accountant"]}
    assert not _shown(page, "privacy.agent.accountant")
