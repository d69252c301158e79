"""The method-options seam: dataclass fields become typed CLI flags and validated config."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fedvote.errors import ConfigError
from fedvote.methods.options import build_options, method_option, option_specs


@dataclass(frozen=True)
class _ExampleOptions:
    helper: str = method_option("identity", "How helper models are made.", choices=("identity", "mix"))
    mix_weight: float | None = method_option(None, "Interpolation weight.", flag="--alpha")
    rounds: int = method_option(3, "Rounds.")
    adaptive: bool = method_option(False, "Adapt.")

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ConfigError("rounds", f"must be at least 1, got {self.rounds}")


def test_specs_carry_flag_type_choices_and_default() -> None:
    specs = {spec.name: spec for spec in option_specs(_ExampleOptions)}
    assert list(specs) == ["helper", "mix_weight", "rounds", "adaptive"]
    assert specs["helper"].choices == ("identity", "mix")
    assert specs["helper"].flag == "--helper"
    assert specs["mix_weight"].flag == "--alpha"
    assert specs["mix_weight"].value_type is float
    assert specs["rounds"].value_type is int and specs["rounds"].default == 3
    assert specs["adaptive"].value_type is bool


def test_build_options_validates_and_refuses_foreign_keys() -> None:
    assert build_options("m", _ExampleOptions, {"rounds": 5}).rounds == 5
    with pytest.raises(ConfigError) as error:
        build_options("m", _ExampleOptions, {"epochs": 5})
    assert error.value.argument == "epochs"
    with pytest.raises(ConfigError) as error:
        build_options("m", _ExampleOptions, {"rounds": 0})
    assert error.value.argument == "rounds"
    with pytest.raises(ConfigError):
        build_options("m", None, {"rounds": 5})
    assert build_options("m", None, {}) is None
