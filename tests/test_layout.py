"""The package's layout promises (DESIGN.md, issue 16): small top level, no import circles."""

from __future__ import annotations

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
