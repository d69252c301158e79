"""``fedvote run --method M --help`` lists, of the methods' own options, only M's (issue 44 item 2);
``sweep --method M,N`` and ``compare --methods M,N`` the listed methods'."""

import pytest

from fedvote.cli import main
from fedvote.methods.options import option_specs
from fedvote.methods.registry import METHOD_NAMES, OPTIONS


def help_text(args, capsys, command: str = "run") -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([command, *args])
        raise SystemExit(0)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def flags_of(method: str) -> set[str]:
    options = OPTIONS[method]
    return set() if options is None else {spec.flag for spec in option_specs(options)}


def every_method_flag() -> set[str]:
    return set().union(*(flags_of(method) for method in METHOD_NAMES))


def listed(text: str, flag: str) -> bool:
    """Whether an option line (two spaces, then its flags) declares ``flag``; help text runs deeper."""
    return any(line.startswith(tuple(f"  {flag}{end}" for end in " ,/")) for line in text.splitlines())


@pytest.mark.parametrize("method", ["pate-fl", "private-knn-fl", "dp-fedavg", "fedaux-fdp"])
@pytest.mark.parametrize("spelling", ["separate", "joined", "after"])
def test_the_help_of_one_method_lists_its_own_options_and_no_other_methods(method, spelling, capsys):
    args = {"separate": ["--method", method, "--help"], "joined": [f"--method={method}", "--help"],
            "after": ["--agents", "5", "--method", method, "-h"]}[spelling]  # fmt: skip
    text = help_text(args, capsys)
    own = flags_of(method)
    assert all(listed(text, flag) for flag in own), own
    others = every_method_flag() - own
    assert others and not [flag for flag in others if listed(text, flag)]
    for shared in ("--agents", "--sigma", "--epsilon", "--ledger", "--out", "--json"):
        assert listed(text, shared), shared
    assert f"The options of {method} only" in text


def test_without_a_method_the_help_lists_every_methods_options(capsys):
    text = help_text(["--help"], capsys)
    assert all(listed(text, flag) for flag in every_method_flag())
    assert "only; without --method" not in text


def test_another_methods_flag_is_still_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", "pate-fl", "--k", "3"])
        raise SystemExit(0)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "fedvote: error: --k: is not an option of method 'pate-fl'"


@pytest.mark.parametrize(("command", "flag"), [("sweep", "--method"), ("compare", "--methods")])
def test_sweep_and_compare_list_the_options_of_the_methods_they_name(command, flag, capsys):
    text = help_text([flag, "private-knn-fl,dp-fedavg", "--help"], capsys, command)
    own = flags_of("private-knn-fl") | flags_of("dp-fedavg")
    assert all(listed(text, option) for option in own), own
    assert not [option for option in every_method_flag() - own if listed(text, option)]
    assert f"without {flag}, every method's" in " ".join(text.split())
    everything = help_text(["--help"], capsys, command)
    assert all(listed(everything, option) for option in every_method_flag())
