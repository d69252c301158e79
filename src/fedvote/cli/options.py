"""Command-line flags shared by ``fedvote run``, ``fedvote compare`` and ``fedvote sweep``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import click

from fedvote.data.datasets import DATA_ENV, available_datasets
from fedvote.data.framing import FRAMINGS
from fedvote.data.partition import PARTITION_SCHEMES
from fedvote.errors import ConfigError
from fedvote.methods.options import OptionSpec, option_specs
from fedvote.methods.registry import METHOD_NAMES, OPTIONS, option_names
from fedvote.models.config import INPUT_FEATURES
from fedvote.settings import FEDERATION_SETTINGS, federation_config

# Python argument names that differ from their CLI flags.
_FLAG_NAMES = {
    "num_agents": "--agents",
    "model": "--teacher-model",
    "k": "--k",
    "bound": "--knn-bound",
    "normalize": "--normalize-features",
    "with_report": "--report",
    "as_json": "--json",
    "resize_to": "--image-size",  # the data layer's resampling: asked for on the command line by --image-size
}


def flag_for(argument: str) -> str:
    """The CLI flag for a config argument name (``min_responders`` -> ``--min-responders``).

    A method option's flag is the one its field declares (``lambda_`` -> ``--lambda``). A name in
    capitals (``FEDVOTE_DATA``, an environment variable the value came from) is shown as it is.
    """
    if argument in _FLAG_NAMES:
        return _FLAG_NAMES[argument]
    if argument.isupper():  # an environment variable (FEDVOTE_DATA) or a positional argument (PATH)
        return argument
    return _OPTION_FLAGS.get(argument, "--" + argument.replace("_", "-"))


def reject_flags_besides(context: click.Context, allowed: frozenset[str] | set[str]) -> None:
    """One-line usage error when a flag outside ``allowed`` was typed with --config."""
    clashing = [
        flag_for(name)
        for name in context.params
        if name not in allowed
        and context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    if clashing:
        raise click.UsageError(f"--config cannot be combined with {', '.join(clashing)}")


def refuse_empty_out(context: click.Context, parameter: click.Parameter, value: str | None) -> str | None:
    """``--out``'s callback, for every command that takes an output directory: refuse an empty one.

    ``Path("")`` is ``.``: an empty (or blank) ``--out`` would write wherever the user stands.
    Refused as a :class:`~fedvote.errors.ConfigError` naming ``--out`` (one line, exit status 2)
    while the flags are parsed, so before anything is loaded, trained, charged or written.
    """
    if value is not None and not value.strip():
        raise ConfigError("out", "is empty; name a directory (. for the current one)")
    return value


def check_data_dir(context: click.Context, parameter: click.Parameter, value: str | None) -> str | None:
    """``--data-dir``'s callback: refuse a path that is a file, naming where the value came from.

    ``--data-dir`` defaults to ``$FEDVOTE_DATA``; a refusal of a value the environment gave
    names ``FEDVOTE_DATA`` (the user set no flag), one of a typed value ``--data-dir``. A
    :class:`~fedvote.errors.ConfigError`: one line, exit status 2, before anything is loaded.
    A path that does not exist yet passes, as before (the datasets are then missing, by name).
    """
    if value is None or not value.strip():
        return value
    path = Path(value).expanduser()
    try:
        if not path.exists() or path.is_dir():
            return value
        problem = f"{value} is a file, not a directory"
    except OSError as error:  # a name too long, a loop of links: no directory can be read there
        problem = f"{value} cannot be read as a directory ({error.strerror or error})"
    assert parameter.name is not None
    if context.get_parameter_source(parameter.name) == click.core.ParameterSource.ENVIRONMENT:
        raise ConfigError(
            DATA_ENV,
            f"{problem}; set {DATA_ENV} to the directory holding the datasets (or unset it), "
            "or give --data-dir DIR",
        )
    raise ConfigError("data_dir", f"{problem}; give the directory holding the datasets")


_FEDERATION_OPTIONS = (
    click.option("--dataset", default="digits", show_default=True,
                 help=f"The agents' data: {', '.join(available_datasets())}, npz:PATH or csv:PATH; "
                      "several, comma-separated, with --target."),
    click.option("--target", default=None,
                 help="Domain of the public pool and test set (domain shift, e.g. --dataset mnist "
                      "--target usps) [default: the same dataset]."),
    click.option("--image-size", type=int, default=None,
                 help="Resample all images to this square side (domains must share a shape) "
                      "[default: the target's]."),
    click.option("--framing", type=click.Choice(FRAMINGS), default="auto", show_default=True,
                 help="mnist: frame every digit image as MNIST's are (ink in a 20/28 box, centred by "
                      "its centre of mass); auto: so when a --target's grey images differ in size "
                      "from the sources'; none: plain resampling."),
    click.option("--input-features", type=click.Choice(INPUT_FEATURES), default="auto", show_default=True,
                 help="What every record is seen through, for every method: patch = single-layer patch "
                      "features (Coates & Ng: k-means on whitened 6x6 patches) fitted on the public pool "
                      "alone, applied by each agent to its own records, so it costs no ε; none = the "
                      "records as they are; auto: patch for cifar10 and fashion-mnist (cifar10 only for "
                      "private-knn-fl and the FedAUX family, which fit their own PCA), else none; "
                      "result.json records the kind used (input_features_used)."),
    click.option("--label-column", default="label", show_default=True,
                 help="Label column of a csv: dataset."),
    click.option("--data-dir", envvar=DATA_ENV, type=click.Path(), default=None, callback=check_data_dir,
                 help=f"Where file-based datasets live [env: {DATA_ENV}]."),
    click.option("--agents", "--clients", "agents", type=int, default=50, show_default=True,
                 help="Number of agents (clients) N."),
    click.option("--partition", type=click.Choice(PARTITION_SCHEMES), default="iid", show_default=True),
    click.option("--dirichlet-alpha", type=float, default=0.5, show_default=True,
                 help="Dirichlet concentration β for --partition dirichlet."),
    click.option("--classes-per-agent", type=int, default=2, show_default=True,
                 help="Classes each agent sees, for --partition classes."),
    click.option("--shards-per-agent", type=int, default=2, show_default=True,
                 help="Shards per agent, for --partition shards."),
    click.option("--public-fraction", type=float, default=None,
                 help="Share forming the server's public unlabelled pool: of the data (0.15), of "
                      "an official test split (0.3, as the voting paper), or of the --target's "
                      "training split (all)."),
    click.option("--test-fraction", type=float, default=0.15, show_default=True,
                 help="Share held out as the test set, for data without an official test split."),
)


def federation_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the federation flags to ``command``, which receives them as one ``federation``.

    The command's other parameters are untouched; ``federation`` is a
    :class:`~fedvote.config.FederationConfig` built (and so validated) from the flags by
    :func:`fedvote.settings.federation_config`, as :func:`fedvote.run` builds it.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {setting.name: kwargs.pop(setting.name) for setting in FEDERATION_SETTINGS}
        kwargs["federation"] = federation_config(values)
        return command(*args, **kwargs)

    for option in reversed(_FEDERATION_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def method_option_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add one flag per field of every method's options; the command gets ``method_flags``.

    ``method_flags`` maps option names to the values typed on the command line (flags
    left out are absent, so the method's defaults apply); :mod:`fedvote.cli.run_options`
    hands each method its own. Flags come from
    :func:`fedvote.methods.options.option_specs`, so a new method's settings reach the
    CLI without editing this module.
    """
    specs = _all_method_option_specs()

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {spec.name: kwargs.pop(spec.name) for spec in specs.values()}
        kwargs["method_flags"] = {name: value for name, value in given.items() if value is not None}
        return command(*args, **kwargs)

    for spec in reversed(list(specs.values())):
        owners = ", ".join(_OPTION_OWNERS[spec.name])
        help_text = f"{spec.help} ({owners})"
        if spec.default is not None:
            help_text += f" [default: {spec.default}]"
        value_type: Any = click.Choice(spec.choices) if spec.choices else spec.value_type
        if spec.value_type is bool:
            negative = "--no-" + spec.flag.removeprefix("--")
            decl = click.option(f"{spec.flag}/{negative}", spec.name, default=None, help=help_text)
        else:
            decl = click.option(spec.flag, spec.name, type=value_type, default=None, help=help_text)
        wrapper = decl(wrapper)
    return wrapper


_OPTION_OWNERS: dict[str, list[str]] = {}
_OPTION_FLAGS: dict[str, str] = {}  # option name -> its flag, for error messages


class MethodHelp(click.Command):
    """A command whose ``--help`` with ``--method M`` lists, of the methods' own options, only M's.

    ``fedvote run --method dp-fedavg --help`` shows the run and federation flags and DP-FedAvg's
    own; ``fedvote run --help`` every method's; a comma-separated list (``fedvote sweep``) the
    listed methods'. Only the help is narrowed: the flags are parsed as before, so another
    method's flag is still refused by name, in one line. :attr:`method_flag` is the flag that
    names the methods.
    """

    method_flag: ClassVar[str] = "--method"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Note the methods named on the command line (registered ones) before the flags are parsed."""
        ctx.meta[_HELP_METHOD] = _named_methods(args, self.method_flag)
        return super().parse_args(ctx, args)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The options, less the other methods' own when the methods were named."""
        methods = ctx.meta.get(_HELP_METHOD)
        if methods is None:
            super().format_options(ctx, formatter)
            return
        own = {name for method in methods for name in option_names(method)}
        records = [
            record
            for param in self.get_params(ctx)
            if (param.name not in _OPTION_OWNERS or param.name in own)
            and (record := param.get_help_record(ctx)) is not None
        ]
        with formatter.section("Options"):
            formatter.write_dl(records)
        formatter.write_paragraph()
        formatter.write_text(
            f"The options of {', '.join(methods)} only; without {self.method_flag}, every method's."
        )


class MethodsHelp(MethodHelp):
    """:class:`MethodHelp` for ``fedvote compare``, whose methods are named by ``--methods``."""

    method_flag: ClassVar[str] = "--methods"


_HELP_METHOD = "fedvote.help_methods"


def _named_methods(args: list[str], flag: str) -> list[str] | None:
    """The methods ``flag M[,M…]`` or ``flag=M[,M…]`` names in ``args`` (the last); None unless registered."""
    named = None
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == flag and index + 1 < len(args):
            named = args[index + 1]
        elif arg.startswith(f"{flag}="):
            named = arg.removeprefix(f"{flag}=")
    if named is None:
        return None
    methods = [name.strip() for name in named.split(",") if name.strip()]
    return methods if methods and all(name in METHOD_NAMES for name in methods) else None


def _all_method_option_specs() -> dict[str, OptionSpec]:
    """Every method's option specs by name; two methods may share a name of one type."""
    specs: dict[str, OptionSpec] = {}
    for method_name in METHOD_NAMES:
        options_type = OPTIONS[method_name]
        if options_type is None:
            continue
        for spec in option_specs(options_type):
            known = specs.setdefault(spec.name, spec)
            if (known.flag, known.value_type) != (spec.flag, spec.value_type):
                raise TypeError(f"methods disagree on option {spec.name!r}: {known} vs {spec}")
            _OPTION_FLAGS[spec.name] = spec.flag
            owners = _OPTION_OWNERS.setdefault(spec.name, [])
            if method_name not in owners:
                owners.append(method_name)
    return specs
