"""``fedvote report DIR`` and ``fedvote plot tradeoff FILE...``: the views of finished runs."""

from __future__ import annotations

from pathlib import Path

import click

from fedvote.errors import ConfigError


@click.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--no-plot-files",
    is_flag=True,
    help="Write only report.html (its figures are inlined), not DIR/plots/*.png|svg.",
)
def report(directory: str, no_plot_files: bool) -> None:
    """Write DIR/report.html for a run (fedvote run --out DIR), a sweep or a comparison.

    The page is self-contained (figures inlined, no network): config, accuracy, ε at both
    levels with their accountants (and the data-dependent ε of simulated voting runs),
    communication, time, and the plots. Each plot is also written as PNG and SVG under
    DIR/plots/.

    Example: fedvote run --epsilon 4 --out runs/a && fedvote report runs/a
    """
    from fedvote.report import plot_paths, write_report
    from fedvote.results import check_writable

    if not Path(directory).is_dir():
        raise click.BadParameter(f"{directory} is not a directory", param_hint="DIRECTORY")
    try:
        check_writable(directory, "directory")  # before anything is drawn
        path = write_report(directory, plot_files=not no_plot_files)
    except ConfigError as error:
        if error.argument != "directory":
            raise
        raise click.BadParameter(error.detail, param_hint="DIRECTORY") from None
    if not no_plot_files:
        for plot in plot_paths(directory):
            click.echo(f"wrote {plot}", err=True)
    click.echo(f"wrote {path}")


@click.group()
def plot() -> None:
    """Single plots for papers and slides."""


@plot.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option(
    "--out",
    default="tradeoff.png",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Output file; .png or .svg.",
)
@click.option(
    "--level",
    type=click.Choice(("calibrated", "agent", "instance")),
    default="calibrated",
    show_default=True,
    help="Which ε is the x axis: each row's calibrated level, or one level for all rows.",
)
@click.option("--title", default=None, help="Plot title [default: Privacy–accuracy trade-off].")
def tradeoff(files: tuple[str, ...], out: str, level: str, title: str | None) -> None:
    """Accuracy vs ε per method from sweep.json, compare.json or result.json FILES (or their dirs).

    One line per method (mean over seeds, error bars one std); non-private methods are
    dashed reference lines. The voting paper's Figure 2.

    Example: fedvote plot tradeoff runs/sweep --out tradeoff.svg
    """
    from fedvote.report.loaders import tradeoff_points
    from fedvote.report.plots import save_figure, tradeoff_figure
    from fedvote.results import check_writable

    if Path(out).suffix.lower() not in (".png", ".svg"):
        raise ConfigError("out", f"{out}: the file name must end in .png or .svg")
    check_writable(Path(out).parent)  # before anything is read or drawn
    try:
        points = tradeoff_points(list(files), level=level)
    except ConfigError as error:
        if error.argument != "files":
            raise
        raise click.BadParameter(error.detail, param_hint="FILES") from None
    path = save_figure(tradeoff_figure(points, title=title), out)
    methods = sorted({p.method for p in points})
    click.echo(f"wrote {path} ({len(points)} points; methods: {', '.join(methods)})")
