"""The contract every registered method keeps (issue 16, item 6).

In the spirit of dp-accounting's ``PrivacyAccountantTest`` and scikit-learn's
``test_common``: every method in :data:`fedvote.methods.METHODS` — a method registered
later is picked up automatically, with the voting defaults below — runs two tiny federations
in process (:class:`~fedvote.transport.local.LocalTransport`, through :func:`fedvote.runner.run`):
digits (10 agents, a few epochs, rounds and queries), and (marked slow: fitting and applying
the patch features takes seconds a run) a generated CIFAR-10 of 100 training images under the
dataset's own name, so that each method takes the path its CIFAR-10 and
Fashion-MNIST defaults take (patch features fitted on the pool, a voting method's dense vote
sums read by the regression student, a noised gradient method's logistic head). Each
must

* produce the result schema: ``RunResult.to_dict()`` has the documented keys (README,
  "result.json"), standard JSON, and privacy at both levels, each ε a finite float or an
  explicit ``None`` (unbounded);
* charge no more than it promised: the ε of everything it charged to the ledger is at most
  the ε of ``method.planned_events()`` (what calibration and the budget check saw), at each
  level, at the run's δ with the run's accountant;
* give identical results under one seed and noise seed (accuracy, pseudo-labels, privacy);
* refuse a bad option by name: a negative σ, an option it does not take, and every
  invalid choice of its own options (a :class:`~fedvote.errors.ConfigError` whose
  ``argument`` names it).

Each method's two runs on each federation are shared by the tests (module-scoped fixture).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedvote.cli import main
from fedvote.config import RunConfig
from fedvote.data.federation import PublicMetadata
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.models.config import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import LEVELS
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.results import RunResult
from fedvote.runner import input_features_kind, make_federation, plan, planned_release, prepare_public, run
from fedvote.settings import build_config

METHOD_NAMES = sorted(METHODS)
NOISE_SEED = 11

FAST = {"model": "logistic", "epochs": 2}
BASE: dict[str, Any] = {
    "federation": {"dataset": "digits", "agents": 10},
    "teacher": FAST,
    "student": FAST,
    "self_training_rounds": 0,
    "seed": 3,
}
VOTING: dict[str, Any] = {"queries": 20}
GRADIENT: dict[str, Any] = {
    "gradient": {"rounds": 2, "sampling_rate": 1.0, "local_steps": 2, "model": "logistic"}
}
FEDAUX: dict[str, Any] = {
    "options": {"extractor": "pca", "extractor_dim": 8, "distill_epochs": 2, "local_epochs": 2}
}

# Each method's smallest settings (config sections as result.json spells them); σ is
# given where a method takes one, so that nothing is calibrated. A method not listed
# runs with the voting settings and its defaults.
SMALL: dict[str, dict[str, Any]] = {
    "pate-fl": {**VOTING, "privacy": {"sigma": 4.0}},
    "private-knn-fl": {**VOTING, "knn": {"feature_dim": 8}, "privacy": {"sigma": 4.0}},
    "weighted-pate": {**VOTING, "options": {"validation_size": 40}, "privacy": {"sigma": 16.0}},
    "fedavg": GRADIENT,
    "dp-fedavg": {**GRADIENT, "privacy": {"sigma": 1.0}},
    "dp-fedsgd": {**GRADIENT, "privacy": {"sigma": 1.0}},
    "prifedsync": {
        "gradient": {"rounds": 2, "sampling_rate": 1.0, "local_steps": 2, "batch_size": 8},
        "options": {"client_test_size": 20},
        "privacy": {"sigma": 1.6},
    },
    **{name: FEDAUX for name in ("fedaux-fdp", "fedaux-f", "fedd-p", "fedavg-p")},
}


FEDERATIONS = ("digits", "photos")


def small_config(
    method: str,
    *,
    privacy: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    photos: Path | None = None,
) -> RunConfig:
    """``method``'s small config, with ``privacy`` and ``options`` entries added.

    ``photos``: a data directory holding a (generated) CIFAR-10; the run then names it, so
    ``auto`` picks what the photo datasets' defaults pick, and a voting method queries the
    whole pool (the number of queries is left to the planner, as on the CIFAR-10 command).
    """
    settings = copy.deepcopy(SMALL.get(method, VOTING))
    settings["privacy"] = {"noise_seed": NOISE_SEED, **settings.get("privacy", {}), **(privacy or {})}
    if options:
        settings["options"] = {**settings.get("options", {}), **options}
    base = copy.deepcopy(BASE)
    if photos is not None:
        base["federation"] = {**base["federation"], "dataset": "cifar10", "data_dir": str(photos)}
        settings.pop("queries", None)
    return RunConfig.from_dict({**base, "method": method, **settings})


@dataclass(frozen=True)
class Runs:
    """One method's two identical runs, what the first charged and what it promised."""

    config: RunConfig
    first: RunResult
    second: RunResult
    charges: int
    charged: dict[str, float]  # ε per level of the first run's ledger charges
    promised: dict[str, float]  # ε per level of method.planned_events()


@pytest.fixture(
    scope="module",
    params=[
        pytest.param((method, federation), marks=[pytest.mark.slow] if federation == "photos" else [])
        for method in METHOD_NAMES
        for federation in FEDERATIONS
    ],
    ids=lambda param: "-".join(param),
)
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    method, federation = request.param
    photos = request.getfixturevalue("tiny_cifar10_dir") if federation == "photos" else None
    config = small_config(method, photos=photos)
    with pytest.MonkeyPatch.context() as patch:  # decoded images cached in this session's tmp
        patch.setenv("FEDVOTE_CACHE", str(tmp_path_factory.getbasetemp() / "extractor-cache"))
        ledger = PrivacyLedger()  # the first run charges this one: we read its charges back
        first = run(config, ledger=ledger)
        second = run(config)
        planned = planned_release(config, make_federation(config))  # the run's own plan, σ and all
    delta, accountant = config.privacy.delta, config.privacy.accountant
    return Runs(
        config=config,
        first=first,
        second=second,
        charges=len(ledger.charges),
        charged={level: epsilon_for(ledger.event(level), delta, accountant) for level in LEVELS},
        promised={level: epsilon_for(planned.at(level), delta, accountant) for level in LEVELS},
    )


# --- the result schema ------------------------------------------------------------------

RESULT_KEYS = {
    "method", "private", "dataset", "agents", "seed", "accuracy", "label_accuracy", "queries", "sigma",
    "privacy", "communication", "timings", "config", "version", "public_pool", "test_size", "agent_records",
    "input_features_used",
}  # fmt: skip
PRIVACY_KEYS = {
    "private", "delta", "accountant", "agent", "instance", "noise_source", "calibrated_to_epsilon",
    "calibrated_level",
}  # fmt: skip
LEVEL_KEYS = {"epsilon", "sensitivity", "adjacency"}
COMMUNICATION_KEYS = {"upload_floats", "download_floats", "rounds"}


def test_result_has_the_documented_schema(runs: Runs):
    data = runs.first.to_dict()
    json.dumps(data, allow_nan=False)  # standard JSON: no NaN or ∞ anywhere
    assert RESULT_KEYS <= set(data), RESULT_KEYS - set(data)
    assert data["method"] == runs.config.method and data["agents"] == 10 and data["seed"] == runs.config.seed
    assert data["input_features_used"] == input_features_kind(runs.config) in ("none", "patch")
    if runs.config.federation.dataset == "cifar10" and METHODS[runs.config.method].auto_patch_datasets:
        assert data["input_features_used"] == "patch"  # the photo path, as the federation meant
    assert 0.0 <= data["accuracy"] <= 1.0
    assert data["label_accuracy"] is None or 0.0 <= data["label_accuracy"] <= 1.0
    assert isinstance(data["queries"], int) and data["queries"] >= 0
    assert COMMUNICATION_KEYS <= set(data["communication"])
    assert "total_s" in data["timings"]
    timings = data["timings"]  # the ledger's accounting is timed, as part of the evaluation
    assert 0.0 <= timings["accounting_s"] <= timings["evaluation_s"] <= timings["total_s"]
    assert RunConfig.from_dict(data["config"]) == runs.config  # the run can be rerun from it
    privacy = data["privacy"]
    assert PRIVACY_KEYS <= set(privacy), PRIVACY_KEYS - set(privacy)
    assert privacy["delta"] == runs.config.privacy.delta
    assert privacy["accountant"] == runs.config.privacy.accountant
    epsilons = []
    for level in LEVELS:
        entry = privacy[level]
        assert LEVEL_KEYS <= set(entry), (level, LEVEL_KEYS - set(entry))
        epsilon = entry["epsilon"]  # present at both levels: a finite float, or None = unbounded
        assert epsilon is None or (isinstance(epsilon, float) and math.isfinite(epsilon) and epsilon >= 0), (
            level, epsilon
        )  # fmt: skip
        epsilons.append(epsilon)
    assert data["private"] == privacy["private"] == any(e is not None for e in epsilons)


# --- charges never exceed the plan ------------------------------------------------------


def test_charged_epsilon_never_exceeds_the_planned_events(runs: Runs):
    """ε(composition of the ledger's charges) ≤ ε(planned_events()) at each level."""
    for level in LEVELS:
        charged, promised = runs.charged[level], runs.promised[level]
        assert charged <= promised * (1 + 1e-9) + 1e-9, (
            f"{runs.config.method} charged ε = {charged} at the {level} level, "
            f"planned_events() promised {promised} (δ = {runs.config.privacy.delta})"
        )
    if runs.first.private:  # a private run released something, so it was charged
        assert runs.charges > 0


# --- one seed, one result ----------------------------------------------------------------


def test_identical_results_under_one_seed_and_noise_seed(runs: Runs):
    first, second = runs.first, runs.second
    assert first.accuracy == second.accuracy and first.label_accuracy == second.label_accuracy
    assert first.sigma == second.sigma and first.privacy == second.privacy
    assert first.communication == second.communication
    arrays = (first.analysis.arrays(), second.analysis.arrays()) if first.analysis is not None else ({}, {})
    assert arrays[0].keys() == arrays[1].keys()
    for name in arrays[0]:  # pseudo-labels, query indices, vote histograms, …
        np.testing.assert_array_equal(arrays[0][name], arrays[1][name], err_msg=name)
    without_timings = [{k: v for k, v in r.to_dict().items() if k != "timings"} for r in (first, second)]
    assert without_timings[0] == without_timings[1]


# --- bad options are refused by name -----------------------------------------------------


def _refused(config: dict[str, Any]) -> ConfigError:
    """The ConfigError that building and running ``small_config(**config)`` raises."""
    with pytest.raises(ConfigError) as error:
        run(small_config(**config))
    return error.value


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_a_negative_sigma_is_refused_by_name(method: str):
    error = _refused({"method": method, "privacy": {"sigma": -1.0}})
    assert error.argument == "config" and error.detail.startswith("privacy.sigma: ")  # the config's key


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_an_option_the_method_does_not_take_is_refused_by_name(method: str):
    assert _refused({"method": method, "options": {"no_such_option": 1}}).argument == "no_such_option"


def _choice_options() -> list[tuple[str, str]]:
    """(method, option) for every option of a method's ``options_type`` with fixed choices."""
    cases = []
    for name in METHOD_NAMES:
        options_type = METHODS[name].options_type
        for field in dataclasses.fields(options_type) if options_type is not None else ():
            if field.metadata.get("choices"):
                cases.append((name, field.name))
    return cases


@pytest.mark.parametrize(("method", "option"), _choice_options())
def test_an_invalid_choice_of_an_own_option_is_refused_by_name(method: str, option: str):
    assert _refused({"method": method, "options": {option: "no-such-choice"}}).argument == option


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_planned_on_its_defaults_a_method_leaves_no_training_unplanned(method: str):
    """``fedvote run --method M``'s plan: every training config it holds has its epochs set.

    The teachers' model and epochs are left to the planner by default
    (:func:`fedvote.models.config.teacher_training`); a method that kept them unset would
    fail at its first epoch, after the budget check.
    """
    config = build_config(method)
    planned = plan(config, prepare_public(config, make_federation(config)).public_metadata())
    trainings = [getattr(planned, f.name) for f in dataclasses.fields(planned)]
    for training in (t for t in trainings if isinstance(t, TrainingConfig)):
        assert training.planned_epochs >= 1
        assert training.model != "auto" or training is getattr(planned, "student", None)


# --- what a voting method's student learns from (issue 43) -------------------------------

WIDE_VECTORS = PublicMetadata(
    pool_size=3_000, num_agents=100, num_classes=10, example_shape=(1_600,), agent_records=(500,) * 100
)
IMAGES = dataclasses.replace(WIDE_VECTORS, example_shape=(1, 28, 28))


def _takes_student_targets(method: str) -> bool:
    options = METHODS[method].options_type
    return options is not None and "student_targets" in {f.name for f in dataclasses.fields(options)}


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_a_method_whose_server_receives_vote_sums_offers_the_regression_student(method: str):
    """Every method voting through one-hot teacher votes or kNN votes takes ``--student-targets``,
    and on its defaults plans from the example shape alone: on wide vectors (CIFAR-10's patch
    features) a student fitted to every sum of the whole pool, on images label targets."""
    from fedvote.transport.capabilities import KnnVotes, TeacherVotes

    declared = METHODS[method]
    receives_vote_sums = bool({TeacherVotes, KnnVotes} & set(declared.requires))
    assert _takes_student_targets(method) == receives_vote_sums
    if not receives_vote_sums:
        return
    privacy = {} if declared.calibration_level is None else {"epsilon": 4.0}
    wide = plan(build_config(method, **privacy), WIDE_VECTORS)
    assert wide.planned_details()["student_targets"] == "vote-sums"
    assert wide.queries == WIDE_VECTORS.pool_size
    images = plan(build_config(method, **privacy), IMAGES)
    assert images.planned_details()["student_targets"] == "labels"
    assert images.queries < IMAGES.pool_size
    forced = plan(build_config(method, student_targets="labels", **privacy), WIDE_VECTORS)
    assert forced.planned_details()["student_targets"] == "labels"
    assert forced.queries < WIDE_VECTORS.pool_size


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_a_noised_gradient_method_trains_a_linear_head_on_wide_feature_vectors(method: str):
    """Every gradient method that noises its updates plans the logistic model on wide vectors
    (public features such as CIFAR-10's and Fashion-MNIST's patch features) and keeps its
    configured model on images; a --gradient-model given is never replaced; FedAvg, which adds
    no noise, keeps the MLP; the events (hence ε) are the same whichever model is planned."""
    from fedvote.methods.gradient import GradientMethod

    declared = METHODS[method]
    if not issubclass(declared, GradientMethod):
        return
    privacy = {} if declared.calibration_level is None else {"epsilon": 4.0}
    wide = plan(build_config(method, **privacy), WIDE_VECTORS)
    images = plan(build_config(method, **privacy), dataclasses.replace(IMAGES, agent_records=(600,) * 100))
    assert isinstance(wide, GradientMethod) and isinstance(images, GradientMethod)
    if declared.calibration_level is None:
        assert wide.model == images.model == "mlp"
        return
    assert wide.model == "logistic" and "1600 >= 1024 features" in wide.model_choice()
    assert images.model == "mlp"
    assert wide.with_sigma(1.0).planned_events() == images.with_sigma(1.0).planned_events()
    given = plan(build_config(method, gradient_model="mlp", **privacy), WIDE_VECTORS)
    assert isinstance(given, GradientMethod)
    assert (given.model, given.model_choice()) == ("mlp", "given (--gradient-model)")


# --- the hooks Flower, the audit and the report read (issue 44) ---------------------------


def _audited_through() -> dict[str, tuple[type, ...]]:
    """Each audit release (``Method.audit_release``) and the capabilities its mechanism comes through."""
    from fedvote.transport import capabilities as c

    return {
        "teacher-votes": (c.TeacherVotes,),
        "knn-votes": (c.KnnVotes,),
        "weighted-votes": (c.WeightedVotes,),
        "heads": (c.PrivateHeads,),
        "fedavg-run": (c.LocalUpdates,),
        "trainer-run": (c.LocalUpdates, c.PersonalisedModels),
    }


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_the_hooks_flower_audit_and_report_read_say_what_the_method_does(method: str):
    """Flower, the audit and the report switch on these, never on a method's name or type.

    The audit release is one the audit reproduces, through a capability the method uses;
    a method Flower runs needs only what :class:`FlowerTransport` serves and carries a
    voting method's settings; a secure-noise refusal or audit needs the support it qualifies.
    """
    from fedvote.audit.api import audit_releases
    from fedvote.flower.transport import FlowerTransport

    declared = METHODS[method]
    config = small_config(method)
    planned = plan(config, prepare_public(config, make_federation(config)).public_metadata())
    requirements = set(planned.requirements())
    if declared.audit_release is not None:
        assert declared.audit_release in audit_releases()
        assert requirements & set(_audited_through()[declared.audit_release]), declared.audit_release
    assert not declared.audit_secure_noise or declared.audit_release is not None
    if declared.flower_support:
        assert all(issubclass(FlowerTransport, need) for need in requirements), requirements
        for setting in ("sigma", "queries", "min_responders", "query_batch_size"):
            assert hasattr(planned, setting), setting
    else:
        assert declared.flower_secure_noise_refusal is None
    assert isinstance(declared.agent_models, str) and declared.agent_models


def test_the_report_names_the_agents_models_by_the_hook(runs: Runs):
    diagnostics = runs.first.diagnostics
    if "teacher_accuracy" in diagnostics:
        assert diagnostics["teacher_kind"] == METHODS[runs.config.method].agent_models
    else:
        assert "teacher_kind" not in diagnostics


# --- --min-responders t: refused, or every noise share carries the total over √t ---------

T_OF_TEN = 5  # half the contract federation's 10 agents are honest
FALSE_ALARM = 1e-6  # per share kind and method: the F test's one-sided level


def _shares_drawn(config: RunConfig, monkeypatch: pytest.MonkeyPatch) -> dict[tuple[Any, ...], np.ndarray]:
    """Every noise share the run's agents drew, by the kind of release it was added to.

    Spies on :meth:`Agent.release`, the one exit through which every share leaves (votes,
    DP-FedAvg's updates and lone shares, heads): the share is what came out less what went
    in. Kinds (the release's expected output and shape) are kept apart: one run may draw
    shares of different stds (weighted PATE's votes and accuracy summary).
    """
    from fedvote.agents.agent import Agent

    original = Agent.release
    drawn: dict[tuple[Any, ...], list[np.ndarray]] = {}

    def spy(self: Agent, values: np.ndarray, noise_std: float, expected: Any) -> np.ndarray:
        out = original(self, values, noise_std, expected)
        share = out - np.asarray(values, dtype=np.float64).reshape(out.shape)
        drawn.setdefault((type(expected).__name__, out.shape[1:]), []).append(share.ravel())
        return out

    monkeypatch.setattr(Agent, "release", spy)
    try:
        run(config)
    finally:
        monkeypatch.setattr(Agent, "release", original)
    return {kind: np.concatenate(shares) for kind, shares in drawn.items()}


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_min_responders_is_refused_or_every_share_has_the_total_std_over_root_t(
    method: str, monkeypatch: pytest.MonkeyPatch
):
    """Issue 42, defect 4: t honest shares must carry the noise the accounting assumes.

    Either ``--min-responders t`` is refused by name, or the shares the agents actually
    draw have std ≥ (total std)/√t. The total is measured, not read from a setting: at the
    default t = N the N shares add up to the total noise (σ² for votes, σ²S² for DP-FedAvg:
    ``tests/aggregation/test_voting.py``, ``tests/methods/test_dp_fedavg.py``), so the
    share's variance at t must be at least N/t times its variance at t = N. Sample
    variances of n and m Gaussian draws have the ratio (s_t²/s_N²)·F(n, m); the bound is
    the F quantile at :data:`FALSE_ALARM`, from the numbers of draws. Before the fix,
    DP-FedAvg drew σS/√N whatever t (ratio 1, not ≥ 2), and DP-FedSGD, PriFedSync and the
    FedAUX family accepted t with noise no share of which depends on it.
    """
    from scipy import stats

    config = small_config(method, privacy={"min_responders": T_OF_TEN})
    try:
        plan(config, prepare_public(config, make_federation(config)).public_metadata())
    except ConfigError as error:
        assert error.argument == "min_responders", error
        return
    every = _shares_drawn(small_config(method), monkeypatch)  # t = N = 10
    honest = _shares_drawn(config, monkeypatch)
    assert every.keys() == honest.keys()
    noisy = {kind for kind, shares in every.items() if np.any(shares != 0)}
    if not noisy:  # nothing noised: only a non-private method may accept t
        result = run(small_config(method))
        assert not result.private, f"{method} is private, accepts t and draws no noise share"
        return
    for kind in noisy:
        n, m = honest[kind].size, every[kind].size
        ratio = float(np.mean(honest[kind] ** 2) / np.mean(every[kind] ** 2))  # zero-mean shares
        floor = (10 / T_OF_TEN) * stats.f.ppf(FALSE_ALARM, n, m)
        assert ratio >= floor, (
            f"{method}, {kind}: share variance at t = {T_OF_TEN} is {ratio:.3f}× that at t = N, "
            f"needs ≥ N/t = {10 / T_OF_TEN:g} (≥ {floor:.3f} at {n} and {m} draws)"
        )


def test_the_suite_covers_every_method_of_fedvote_run_help(capsys: pytest.CaptureFixture[str]):
    try:
        main(["run", "--help"])
    except SystemExit as exit_info:
        assert exit_info.code in (0, None)
    help_text = capsys.readouterr().out
    listed = re.search(r"--method\s+\[([^\]]+)\]", help_text)
    if listed is not None:
        assert set(listed.group(1).replace(" ", "").replace("\n", "").split("|")) == set(METHOD_NAMES)
    else:
        assert all(name in help_text for name in METHOD_NAMES)
