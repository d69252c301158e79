"""The package's layout promises (DESIGN.md, issue 16): small top level, no import circles."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fedvote"


def test_the_top_level_holds_at_most_ten_modules() -> None:
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= 10, modules


def test_command_and_flower_modules_live_in_their_packages() -> None:
    assert not list(PACKAGE.glob("*_cli.py")), "CLI modules belong in fedvote/cli/"
    assert not list((PACKAGE / "transport").glob("flower*.py")), "Flower code belongs in fedvote/flower/"


def _modules_loaded_by(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(out.stdout.split())


def test_config_imports_nothing_from_methods() -> None:
    loaded = _modules_loaded_by("import fedvote.config")
    assert not {name for name in loaded if name.startswith("fedvote.methods")}


def test_flower_protocol_imports_neither_side() -> None:
    loaded = _modules_loaded_by("import fedvote.flower.protocol")
    assert "fedvote.flower.app" not in loaded and "fedvote.flower.transport" not in loaded
    assert not {name for name in loaded if name.startswith("flwr")}


def test_existing_flower_projects_still_find_the_apps() -> None:
    from fedvote import deploy_app
    from fedvote.flower import app

    assert deploy_app.server_app is app.server_app
    assert deploy_app.client_app is app.client_app


def test_no_source_file_exceeds_800_lines() -> None:
    """Issue 44: a module past 800 lines holds more than one idea; split it by concern."""
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 800
    }
    assert not long, long


def test_the_local_transport_is_composed_of_its_skills() -> None:
    """Issue 44: LocalTransport's module stays small; each skill lives in its own module."""
    from fedvote.transport.local import LocalTransport

    module = PACKAGE / "transport" / "local" / "core.py"
    assert LocalTransport.__module__ == "fedvote.transport.local.core"
    assert len(module.read_text(encoding="utf-8").splitlines()) <= 400
    skills = {base.__module__ for base in LocalTransport.__mro__}
    for skill in ("teachers", "knn", "weighted", "updates", "heads", "personalised", "multilabel"):
        assert f"fedvote.transport.local.{skill}" in skills, skill


def test_transports_count_communication_through_one_helper() -> None:
    """Issue 44: every transport (in process, a sweep's, Flower's) adds to its counters only by
    ``Communication.count``, the one place that writes them."""
    counter = re.compile(r"(upload_floats|download_floats|\.rounds)\s*\+=")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if counter.search(line)
    ]
    helper = PACKAGE / "transport" / "base.py"
    lines = helper.read_text(encoding="utf-8").splitlines()
    start = next(n for n, line in enumerate(lines, start=1) if "def count(" in line)
    inside = {f"transport/base.py:{n}" for n in range(start, start + 10)}  # Communication.count's body
    assert set(found) <= inside, sorted(set(found) - inside)
    assert (PACKAGE / "transport" / "reused_votes.py").read_text().count("communication.count(") >= 3
    assert (PACKAGE / "flower" / "transport.py").read_text().count("communication.count(") >= 4


# Issue 44's grep: Flower, the audit and the report read the methods' hooks (Method.flower_support,
# flower_secure_noise_refusal, audit_release, audit_secure_noise, agent_models), never a method's name
# or type.
SWITCH = re.compile(
    r"isinstance\(.*(PateFL|PrivateKnnFL|DpFedAvg|WeightedPate|FedAuxFdp)|method ==|\.name (not )?in|\"private-knn-fl\""
)


def _hook_readers() -> list[Path]:
    return [path for package in ("flower", "audit", "report") for path in sorted((PACKAGE / package).rglob("*.py"))]


def test_flower_audit_and_report_have_no_method_name_or_type_switch() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in _hook_readers()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if SWITCH.search(line)
    ]
    assert not found, found


def test_flower_audit_and_report_name_no_registered_method_or_method_class() -> None:
    """The wider net: any registered method's name quoted (but as a keyword's default), any method
    class in an ``isinstance``, ``type(method)``."""
    from fedvote.methods import METHODS

    names = "|".join(re.escape(name) for name in METHODS)
    classes = "|".join(sorted({method.__name__ for method in METHODS.values()}))
    quoted = re.compile(rf"[\"']({names})[\"']")
    default = re.compile(rf"^\s*\w+: str = \"({names})\",?$")
    typed = re.compile(rf"isinstance\(.*\b({classes})\b|type\(method\)")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in _hook_readers()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if (quoted.search(line) and not default.match(line)) or typed.search(line)
    ]
    assert not found, found
