"""Issue 47: an empty ``--out`` is refused by every command that takes one, as ``fedvote run`` refuses it.

``Path("")`` is ``.``: an empty (or blank) ``--out`` would write into whatever directory the
user stands in (``fedvote compare --out ""`` wrote ./compare.json, ``fedvote data
make-syndigits --out ""`` wrote ./syndigits/). Every such command now shares one click
callback (:func:`fedvote.cli.options.refuse_empty_out`): one line naming ``--out``, exit
status 2, nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedvote.cli import main

LINE = 'fedvote: error: --out: is empty; name a directory (. for the current one)'


def _files(tmp: Path) -> list[str]:
    return sorted(str(path.relative_to(tmp)) for path in tmp.rglob("*"))


def _inputs(tmp: Path) -> dict[str, str]:
    """Files and directories the commands' other (existence-checked) options name."""
    (tmp / "run.json").write_text("{}")
    (tmp / "server.npz").write_bytes(b"")
    (tmp / "split").mkdir()
    return {"config": str(tmp / "run.json"), "data": str(tmp / "server.npz"), "dir": str(tmp / "split")}


# Each command that takes an output directory with --out, with the least it needs besides.
COMMANDS = {
    "run": lambda paths: ["run", "--agents", "2"],
    "compare": lambda paths: ["compare", "--methods", "pate-fl", "--agents", "2"],
    "sweep": lambda paths: ["sweep", "--method", "pate-fl", "--grid", "epsilon=1", "--agents", "2"],
    "data make-syndigits": lambda paths: ["data", "make-syndigits", "--count", "2"],
    "deploy split": lambda paths: ["deploy", "split", "--config", paths["config"]],
    "deploy server": lambda paths: ["deploy", "server", "--config", paths["config"], "--data", paths["data"]],
    "deploy simulate": lambda paths: ["deploy", "simulate", "--data-dir", paths["dir"]],
}


@pytest.mark.parametrize("blank", ["", "   "], ids=["empty", "blank"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_empty_out_is_refused_in_one_line_and_nothing_is_written(
    command: str, blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _inputs(tmp_path)
    monkeypatch.chdir(tmp_path)  # where an empty --out would write
    before = _files(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([*COMMANDS[command](paths), "--out", blank])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, captured.err
    assert captured.err.strip().splitlines() == [LINE]
    assert captured.out == ""
    assert _files(tmp_path) == before


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_refusal_comes_first_wherever_out_stands(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the other flags too: ``--out ""`` typed first is refused the same way."""
    paths = _inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = COMMANDS[command](paths)
    words = 2 if command.count(" ") else 1  # the command's own words, then --out, then its other flags
    with pytest.raises(SystemExit) as exit_info:
        main([*args[:words], "--out", "", *args[words:]])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [LINE]


def test_every_command_with_an_out_directory_is_covered() -> None:
    """A new command with an ``--out`` directory must use the shared callback (and be listed here)."""
    import click

    from fedvote.cli.app import cli
    from fedvote.cli.options import refuse_empty_out

    def walk(group: click.Group, prefix: tuple[str, ...]) -> list[tuple[str, click.Command]]:
        found = []
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                found += walk(command, (*prefix, name))
            else:
                found.append((" ".join((*prefix, name)), command))
        return found

    with_out_dir = {
        name
        for name, command in walk(cli, ())
        for param in command.params
        if "--out" in getattr(param, "opts", ()) and getattr(param.type, "file_okay", True) is False
    }
    assert with_out_dir == set(COMMANDS)
    for name, command in walk(cli, ()):
        if name in COMMANDS:
            (out,) = [p for p in command.params if "--out" in p.opts]
            assert out.callback is refuse_empty_out, name
