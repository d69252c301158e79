"""Method-specific options: one frozen dataclass per method, its fields become CLI flags.

A method with settings of its own declares them as a frozen dataclass whose fields are
made with :func:`method_option`, in a module of this package (:mod:`.voting`,
:mod:`.gradient`, :mod:`.fedaux`: light, no torch, since ``fedvote run --help`` builds
its flags from them), and names it in ``Method.options_type`` and in
:mod:`fedvote.methods.registry`. Nothing else has to change:
:class:`~fedvote.config.RunConfig` stores them under ``options`` (validated by building
the dataclass where the method is resolved, :func:`fedvote.methods.check_method`), and
``fedvote run`` / ``fedvote sweep`` offer one flag per field (``--field-name``; help and
choices from the field's metadata); a flag given to a method whose dataclass lacks the
field is refused by name. Every method's settings go through this seam, the kNN
(``--k``, …) and gradient (``--rounds``, …) settings included. This is the seam that
keeps "a new method is one file in ``methods/``" (with its options here) true.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from fedvote.errors import ConfigError


def method_option(
    default: Any, help: str, *, choices: Sequence[str] | None = None, flag: str | None = None
) -> Any:
    """A dataclass field that is also a CLI flag (``--name`` unless ``flag`` is given)."""
    metadata = {"help": help, "choices": tuple(choices) if choices else None, "flag": flag}
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One method option as the CLI sees it: name, flag, value type, help."""

    name: str
    flag: str
    value_type: type
    help: str
    choices: tuple[str, ...] | None
    default: Any


def option_specs(options_type: type) -> list[OptionSpec]:
    """The CLI view of every field of a method's options dataclass, in field order."""
    hints = typing.get_type_hints(options_type)
    specs = []
    for field in dataclasses.fields(options_type):
        metadata = field.metadata
        specs.append(
            OptionSpec(
                name=field.name,
                flag=metadata.get("flag") or "--" + field.name.replace("_", "-"),
                value_type=_scalar_type(hints[field.name]),
                help=metadata.get("help", ""),
                choices=metadata.get("choices"),
                default=field.default,
            )
        )
    return specs


def build_options(method: str, options_type: type | None, values: Mapping[str, Any]) -> Any:
    """``options_type(**values)``, refusing keys the method does not have (one line, by name)."""
    if options_type is None:
        if values:
            name = next(iter(values))
            raise ConfigError(name, f"is not an option of method {method!r}")
        return None
    known = {field.name for field in dataclasses.fields(options_type)}
    for name in values:
        if name not in known:
            raise ConfigError(name, f"is not an option of method {method!r}")
    return options_type(**values)


def _scalar_type(annotation: Any) -> type:
    """``int`` for ``int | None`` and the like; the CLI parses values of this type."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return _scalar_type(members[0])
    if typing.get_origin(annotation) is typing.Literal:
        return str
    if annotation in (int, float, str, bool):
        return typing.cast(type, annotation)
    raise TypeError(f"method options must be int, float, str or bool (or None), got {annotation}")
