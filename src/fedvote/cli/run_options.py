"""The flags of ``fedvote run`` (and ``fedvote sweep``), turned into RunConfigs.

One list of flags, one function from flags to :class:`~fedvote.config.RunConfig`
(:func:`fedvote.settings.configs_from_settings`, the path :func:`fedvote.run` takes too):
the commands that run methods share both, and every method's own options
(``Method.options_type``: the kNN settings ``--k``, …, the gradient settings ``--rounds``,
…, and the newer methods' own) are added by :func:`~fedvote.cli.options.method_option_flags`.
A method option given to a method that does not take it is refused by name.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import click

from fedvote.cli.options import federation_options, method_option_flags
from fedvote.config import DEFAULT_EPSILON
from fedvote.data.query_selection import QUERY_SELECTIONS
from fedvote.methods.registry import METHOD_NAMES
from fedvote.models.config import MODEL_NAMES, PRECISIONS, STUDENT_TRAINING
from fedvote.privacy.config import ACCOUNTANTS
from fedvote.settings import RUN_SETTINGS, configs_from_settings


@dataclasses.dataclass(frozen=True)
class _Flag:
    """One run flag's declaration (click's ``option`` arguments), kept so that commands share it."""

    decls: tuple[str, ...]
    attrs: dict[str, Any]

    @classmethod
    def of(cls, *decls: str, **attrs: Any) -> _Flag:
        return cls(decls, attrs)

    @property
    def name(self) -> str:
        """The Python name: ``--secure-sum/--no-secure-sum`` -> ``secure_sum``."""
        return self.decls[0].split("/")[0].removeprefix("--").replace("-", "_")

    def option(self, **changes: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """The click option, with ``changes`` (a command's own default or help) applied."""
        return click.option(*self.decls, **{**self.attrs, **changes})


_RUN_OPTIONS = (
    _Flag.of("--sigma", type=float, default=None,
                  help="Std σ of the total noise on each vote sum; 0 = non-private reference."),
    _Flag.of("--epsilon", type=float, default=None,
                  help=f"Target agent-level ε; σ is calibrated to it [default: {DEFAULT_EPSILON:g} "
                       "when --sigma is not given]."),
    _Flag.of("--delta", type=float, default=1e-3, show_default=True),
    _Flag.of("--accountant", type=click.Choice(ACCOUNTANTS), default="pld", show_default=True),
    _Flag.of("--calibrate-level", type=click.Choice(["agent", "instance"]), default=None,
                  help="The level whose ε --epsilon targets [default: the method's own: agent for "
                       "voting and DP-FedAvg, instance for DP-FedSGD]."),
    _Flag.of("--queries", type=int, default=None,
                  help="Public queries Q to label "
                       "[default: one per 15 pool points, 100 to 200, at most the pool; 100 where "
                       "a small --epsilon would make σ exceed N/4]."),
    _Flag.of("--query-selection", type=click.Choice(QUERY_SELECTIONS), default="auto",
                  show_default=True,
                  help="Which pool points to label: 'typical' = the most typical point of each of Q "
                       "k-means clusters of the pool (TypiClust), 'random' = a seeded random subset; "
                       "'auto': typical with at least 10 pool points per query, else random. "
                       "Public: costs no ε."),
    _Flag.of("--min-responders", type=int, default=None,
                  help="t: minimum honest responders; each agent adds N(0, σ²/t) [default: N]."),
    _Flag.of("--teacher-model", type=click.Choice(MODEL_NAMES), default="auto", show_default=True,
                  help="'auto': the small CNN for images of at least 16x16 when every agent holds at "
                       "least 320 records, logistic for vectors of at least 1024 features (patch "
                       "features), else an MLP (public metadata only); cifar-cnn and resnet8 "
                       "(with crop-and-flip) by name, for RGB photos."),
    _Flag.of("--student-model", type=click.Choice(MODEL_NAMES), default="auto", show_default=True,
                  help="'auto': a small CNN for image data, else an MLP; cifar-cnn and resnet8 by name."),
    _Flag.of("--epochs", type=int, default=None,
                  help="Training epochs (teachers and student) [default: student 40; teachers 40, a CNN "
                       "teacher ⌈9000/n⌉ for the smallest agent's n, 5 to 40]."),
    _Flag.of("--student-epochs", type=int, default=None,
                  help="Student epochs [default: --epochs, else 40]."),
    _Flag.of("--augment-shift", type=int, default=0, show_default=True,
                  help="Student: shift each image batch by up to this many pixels (augmentation)."),
    _Flag.of("--semi-supervised", type=click.Choice(STUDENT_TRAINING), default="auto", show_default=True,
                  help="Student: how it learns from the unlabelled public pool. 'auto': fixmatch for images "
                       "of at least 16x16, else vat; self-training; supervised = the released labels alone."),
    _Flag.of("--student-precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
                  help="Student: the arithmetic of its training steps. 'auto': bfloat16 products (float32 "
                       "weights) for images of at least 16x16 where the CPU has native bfloat16 "
                       "(AVX512-BF16, AMX), else float32."),
    _Flag.of("--self-training-rounds", type=int, default=2, show_default=True,
                  help="Student, --semi-supervised self-training: rounds of self-training."),
    _Flag.of("--seed", type=int, default=0, show_default=True,
                  help="Seeds data split, training and query choice (not the privacy noise)."),
    _Flag.of("--noise-seed", type=int, default=None,
                  help="Seed the privacy noise for a reproducible simulation; never in deployment "
                       "[default: OS entropy]."),
    _Flag.of("--ledger", type=click.Path(dir_okay=False), default=None,
                  help="SQLite privacy ledger: every release is charged here before it happens, "
                       "accumulating across runs on the same federation."),
    _Flag.of("--budget-epsilon", type=float, default=None,
                  help="Agent-level ε budget of the federation in --ledger; a run that would exceed "
                       "it stops before releasing anything."),
    _Flag.of("--secure-sum/--no-secure-sum", default=False, show_default=True,
                  help="Sum the agents' noisy votes by the pairwise-mask secure-sum protocol "
                       "(the simulated server sees only masked vectors and the total)."),
    _Flag.of("--secure-noise", is_flag=True, default=False,
                  help="Deployment-grade noise: exact discrete Gaussian on integer votes from the OS "
                       "CSPRNG (pate-fl), CSPRNG-seeded Gaussians (dp-fedavg, dp-fedsgd); not with "
                       "--noise-seed. Needs fedvote[secure]."),
)


def run_config_options(
    *, several_methods: bool = False, exclude: frozenset[str] = frozenset()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add ``--method``, the federation flags and every run flag; pass ``configs``.

    The command receives ``configs``: one validated RunConfig per method named by
    ``--method`` (a comma-separated list when ``several_methods``), and the raw flag
    values stay out of its signature. A method option given for none of the methods is
    refused by name. ``exclude`` names run flags (Python names, e.g. ``"queries"``) the
    command does not offer, so that it may use the flag for something else; the config
    takes their defaults.
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        omitted: dict[str, Any] = {}  # excluded flag -> its default

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            names = [name.strip() for name in kwargs.pop("method").split(",") if name.strip()]
            flags = {name: omitted[name] if name in omitted else kwargs.pop(name) for name in _RUN_PARAMS}
            federation = kwargs.pop("federation")
            method_flags = kwargs.pop("method_flags")
            kwargs["configs"] = configs_from_settings(names, federation, flags, method_flags)
            return command(*args, **kwargs)

        wrapped = method_option_flags(wrapper)
        for flag in reversed(_RUN_OPTIONS):
            wrapped = flag.option()(wrapped)
        params = getattr(wrapped, "__click_params__", [])
        omitted.update({param.name: param.default for param in params if param.name in exclude})
        params[:] = [param for param in params if param.name not in exclude]
        wrapped = federation_options(wrapped)
        if several_methods:
            method_option = click.option(
                "--method", default="pate-fl", show_default=True,
                help=f"One method or several, comma-separated: {', '.join(METHOD_NAMES)}.",
            )
        else:
            method_option = click.option(
                "--method", type=click.Choice(METHOD_NAMES), default="pate-fl", show_default=True
            )
        return method_option(wrapped)

    return decorate


# The run flags' Python names: the run settings (fedvote.settings.RUN_SETTINGS).
_RUN_PARAMS = tuple(setting.name for setting in RUN_SETTINGS)


def run_flags(*names: str, **changes: dict[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the run flags ``names`` (Python names) as ``fedvote run`` declares them: one declaration.

    For a command that takes some run flags but builds its configs itself (``fedvote compare``);
    ``changes`` maps a name to what the command declares otherwise (its default, its help).
    """
    flags = {flag.name: flag for flag in _RUN_OPTIONS}
    unknown = set(names) - set(flags) or set(changes) - set(names)
    if unknown:
        raise TypeError(f"not run flags of this call: {sorted(unknown)}")

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
            command = flags[name].option(**changes.get(name, {}))(command)
        return command

    return decorate
