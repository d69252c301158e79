"""``fedvote data``: which datasets fedvote can load, and where it looked for them.

Register with ``cli.add_command(data)``. ``fedvote data list`` tries every registered
dataset in the data directory (``--data-dir``, default ``$FEDVOTE_DATA``) and prints,
for each, whether it is available, where fedvote looked, and its splits' sizes and
shapes; ``--json`` prints the same as a JSON object. Missing files (``missing``) and
files present but unreadable (``corrupt: <reason>``) are reported, not raised: the
command always exits 0.

``fedvote data make-syndigits --out DIR --count N`` writes the synthetic digits domain
(:mod:`fedvote.data.syndigits`) to ``DIR/syndigits/train.npz`` (N images, ``--seed``) and
``test.npz`` (``--test-count`` images, seed + 1), where ``--data-dir DIR`` then finds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from fedvote.cli.options import check_data_dir, refuse_empty_out
from fedvote.data.datasets import (
    DATA_ENV,
    DatasetStatus,
    available_datasets,
    dataset_status,
    resolve_data_dir,
)

_PATTERNS = {
    "npz:PATH": "a NumPy archive with arrays x, y (and optionally x_test, y_test)",
    "csv:PATH": "a CSV file with a header row; the label column is named by the user (default 'label')",
}


@click.group()
def data() -> None:
    """Datasets: what is available and where fedvote looks for it."""


@data.command("list")
@click.option(
    "--data-dir",
    type=click.Path(),
    envvar=DATA_ENV,
    default=None,
    callback=check_data_dir,
    help=f"Directory holding mnist/, fashion-mnist/, cifar10/ and usps/ (default: ${DATA_ENV}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def list_command(data_dir: str | None, as_json: bool) -> None:
    """List the datasets, whether each is available, and where fedvote looked."""
    root = resolve_data_dir(data_dir)
    statuses = [dataset_status(name, root) for name in available_datasets()]
    if as_json:
        payload = {
            "data_dir": str(root) if root is not None else None,
            "datasets": [s.as_dict() for s in statuses],
            "patterns": _PATTERNS,
        }
        click.echo(json.dumps(payload, indent=2))
        return
    if root is None:
        click.echo(f"data directory: none (give --data-dir DIR or set {DATA_ENV})")
    else:
        missing = "" if root.is_dir() else "  (does not exist)"
        click.echo(f"data directory: {root}{missing}")
    for status in statuses:
        click.echo(_describe(status))
    click.echo("also accepted as --dataset:")
    for pattern, text in _PATTERNS.items():
        click.echo(f"  {pattern:<9} {text}")


_NAME_WIDTH = 7  # longer names (fashion-mnist, multidigit-mnist) push their line's state right
_INDENT = " " * 10


def _describe(status: DatasetStatus) -> str:
    title = f"\n{_INDENT}{status.description}" if status.description else ""
    if status.state == "corrupt":  # present but unreadable: say why, not "missing"
        return f"{status.name:<{_NAME_WIDTH}} corrupt: {status.error}{title}"
    head = f"{status.name:<{_NAME_WIDTH}} {'available' if status.available else 'missing':<9}"
    if not status.available:
        looked = " or ".join(status.searched) if status.searched else "nowhere (no data directory)"
        return f"{head} looked in {looked}{title}\n{_INDENT}{status.error}"
    parts = [f"{split} {info['count']} x {tuple(info['shape'])}" for split, info in status.splits.items()]
    first = next(iter(status.splits.values()))
    labels = f"{first['classes']} classes"
    if first.get("attributes"):  # multi-label: its label sets are not classes
        labels = f"{first['attributes']} binary attributes (multi-label: {first['classes']} label sets)"
    files = [f for info in status.splits.values() for f in info["files"]]
    where = f"files in {Path(files[0]).parent}" if files else status.where_to_get
    return f"{head} {', '.join(parts)}, {labels}{title}\n{_INDENT}{where}"


@data.command("make-syndigits")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, callback=refuse_empty_out,
              help="Data directory: writes OUT/syndigits/train.npz and test.npz.")
@click.option("--count", type=str, required=True, help="Training images N (a positive integer).")
@click.option("--seed", type=str, default="0", show_default=True,
              help="Seed of the training part; the test part uses seed + 1.")
@click.option("--test-count", type=str, default=None, help="Test images (default N/4, at least 1).")
def make_syndigits_command(out_dir: str, count: str, seed: str, test_count: str | None) -> None:
    """Render the SynDigits-style synthetic digits domain from the installed fonts."""
    from fedvote.data import syndigits  # lazy: numpy and Pillow stay out of fedvote --help
    from fedvote.errors import ConfigError

    def whole(argument: str, text: str, minimum: int, maximum: int | None = None) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise ConfigError(argument, f"must be an integer {bounds}, got {text!r}")
        return value

    train_count = whole("count", count, 1, syndigits.MAX_COUNT)
    train_seed = whole("seed", seed, 0)
    tests = (
        whole("test_count", test_count, 1, syndigits.MAX_COUNT)
        if test_count is not None
        else max(1, train_count // 4)
    )

    target = Path(out_dir).expanduser() / "syndigits"
    for split, number, split_seed in (("train", train_count, train_seed), ("test", tests, train_seed + 1)):
        click.echo(f"syndigits: rendering {number} {split} images (seed {split_seed})", err=True)
        dataset = syndigits.make_syndigits(number, split_seed, split=split, progress=number >= 5000)
        path = target / syndigits.SPLIT_FILES[split]
        try:
            syndigits.write_split(path, dataset, split_seed)
        except OSError as error:
            raise ConfigError("out", f"cannot write {path} ({error.strerror or error})") from error
        click.echo(str(path))
