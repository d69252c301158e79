"""FedAUXfdp and its baselines (fedaux-fdp.txt): soft labels, heads, privacy report, refusals, a run."""

import dataclasses
import math

import numpy as np
import pytest
from dp_accounting import dp_event

from fedvote.agents.agent import Agent
from fedvote.agents.private_heads import private_heads
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.federation import LabeledData, PublicMetadata
from fedvote.data.partition import PartitionSpec, partition_indices
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.fedaux_fdp import (
    FedAuxF,
    FedAuxFdp,
    FedAuxOptions,
    FedAvgP,
    FedDP,
    certainty_weighted_soft_labels,
    mean_soft_labels,
    noise_multiplier,
)
from fedvote.methods.options import option_specs
from fedvote.models.features import fit_feature_extractor
from fedvote.models.logistic_heads import HeadRequest, public_head_features
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.calibrate import binary_logistic_sensitivity, multinomial_logistic_sensitivity
from fedvote.privacy.events import perturbed_head_events
from fedvote.runner import make_federation, run


def test_the_four_variants_are_registered():
    assert METHODS["fedaux-fdp"] is FedAuxFdp
    assert METHODS["fedaux-f"] is FedAuxF
    assert METHODS["fedd-p"] is FedDP
    assert METHODS["fedavg-p"] is FedAvgP


def test_soft_labels_follow_equation_1_by_hand():
    # two agents, one query, two classes: f = (0.8, 0.2), g₁ = (0.9, 0.1), g₂ = (0.3, 0.7)
    class_probs = np.array([[[0.9, 0.1]], [[0.3, 0.7]]])  # (N, Q, C)
    log_scores = np.log(np.array([[0.8], [0.2]]))  # (N, Q)
    by_hand = (0.8 * np.array([0.9, 0.1]) + 0.2 * np.array([0.3, 0.7])) / (0.8 + 0.2)
    np.testing.assert_allclose(certainty_weighted_soft_labels(class_probs, log_scores)[0], by_hand)
    np.testing.assert_allclose(mean_soft_labels(class_probs)[0], [0.6, 0.4])


def test_soft_labels_survive_scores_that_underflow():
    class_probs = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    log_scores = np.array([[-900.0], [-901.0]])  # f = e^-900: 0 in float64, ratio e : 1
    soft = certainty_weighted_soft_labels(class_probs, log_scores)[0]
    np.testing.assert_allclose(soft, [math.e / (1 + math.e), 1 / (1 + math.e)])


def test_head_features_have_norm_at_most_one_for_any_input():
    rng = np.random.default_rng(0)
    public = rng.normal(size=(200, 8)).astype(np.float32)
    features = public_head_features(fit_feature_extractor("pca", public, dim=4), public, clip=None)
    wild = np.vstack([rng.normal(scale=1e3, size=(50, 8)), np.zeros((1, 8))]).astype(np.float32)
    z = features.transform(wild)
    assert z.shape == (51, 5)
    assert np.linalg.norm(z, axis=1).max() <= 1.0 + 1e-12
    assert np.all(z[:, 0] == features.bias)


def test_events_take_the_worst_agent_under_parallel_composition():
    events = perturbed_head_events([2.0, 3.0], [1.0, 0.5], 10.0)
    assert events.instance == dp_event.GaussianDpEvent(2.0)  # min σᵢ/Δᵢ = 2/1
    assert events.agent == dp_event.GaussianDpEvent(0.2)  # min σᵢ/R = 2/10
    unbounded = perturbed_head_events([2.0], [1.0], None)
    assert isinstance(unbounded.agent, dp_event.NonPrivateDpEvent)
    assert isinstance(perturbed_head_events(None, [1.0], 1.0).instance, dp_event.NonPrivateDpEvent)


def test_each_head_meets_its_own_epsilon_and_the_paper_sums_them():
    method = FedAuxFdp(options=FedAuxOptions(epsilon_scores=0.1, epsilon_classes=0.5, lambda_=0.01), delta=2e-5)
    assert method.head_delta == pytest.approx(1e-5)
    score, classes = method.release_events(method.head_request(10, np.arange(1500)), [3000, 2500])
    assert epsilon_for(score.instance, 1e-5, "pld") == pytest.approx(0.1, rel=2e-3)
    assert epsilon_for(classes.instance, 1e-5, "pld") == pytest.approx(0.5, rel=2e-3)
    assert score.instance_sensitivity == pytest.approx(binary_logistic_sensitivity(0.01, 2500 + 1500))
    assert classes.instance_sensitivity == pytest.approx(2 * math.sqrt(2) / (0.01 * 2500))  # the tight Δ
    paper = FedAuxFdp(options=FedAuxOptions(gaussian="classic", epsilon_classes=0.5), delta=2e-5)
    assert paper.class_multiplier == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)  # Algorithm 1's σ/Δ
    assert noise_multiplier(0.5, 1e-5, "analytic") < paper.class_multiplier


@pytest.mark.parametrize(
    ("options", "method", "argument"),
    [
        ({"lambda_": 0.0}, "fedaux-fdp", "lambda_"),
        ({"epsilon_classes": -1.0}, "fedaux-fdp", "epsilon_classes"),
        ({"distill_fraction": 1.0}, "fedaux-fdp", "distill_fraction"),
        ({"epsilon_scores": 0.1}, "fedd-p", "epsilon_scores"),
        ({"epsilon_scores": 0.1}, "fedavg-p", "epsilon_scores"),
        ({"class_privacy": False}, "fedd-p", "class_privacy"),
        ({"gaussian": "classic", "epsilon_classes": 1.5}, "fedaux-fdp", "epsilon"),
        ({"extractor": "module"}, "fedaux-fdp", "extractor"),
        ({"head_sensitivity": "loose"}, "fedaux-fdp", "head_sensitivity"),
    ],
)
def test_bad_options_are_refused_by_name(options, method, argument):
    with pytest.raises(ConfigError) as error:
        config = RunConfig(method=method, options=options)
        METHODS[method].from_config(config, sigma=1.0, queries=1, min_responders=1)
    assert error.value.argument == argument


@pytest.mark.parametrize("privacy", [PrivacyConfig(epsilon=1.0), PrivacyConfig(sigma=2.0)])
def test_run_level_epsilon_and_sigma_are_refused(privacy):
    config = RunConfig(method="fedaux-fdp", privacy=privacy)
    with pytest.raises(ConfigError) as error:
        FedAuxFdp.from_config(config, sigma=1.0, queries=1, min_responders=1)
    assert error.value.argument in ("epsilon", "sigma")
    assert "--epsilon-scores" in str(error.value)


def class_head_noise(method: FedAuxFdp, n: int, classes: int, draws: int) -> np.ndarray:
    """``draws`` samples of the noise one agent with ``n`` records adds to its class head for ``method``."""
    rng = np.random.default_rng(1)
    data = LabeledData(rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, classes, n))
    public = rng.normal(size=(40, 6)).astype(np.float32)
    features = public_head_features(fit_feature_extractor("pca", public, dim=3), public, clip=None)
    agent = Agent(agent_id=0, data=data, public_features=public, num_classes=classes,
                  noise_rng=np.random.default_rng(2), seed=0)
    lam = method.options.lambda_
    clean = private_heads(agent, features, HeadRequest(lam, classes, None, None)).class_head
    request = method.head_request(classes, np.arange(5))
    return np.stack([private_heads(agent, features, request).class_head - clean for _ in range(draws)])


def assert_noise_std(noise: np.ndarray, expected: float) -> None:
    """The sample std is within 5 standard errors (σ/√(2·size)) of σ, and the mean near 0."""
    assert abs(noise.std() - expected) < 5 * expected / math.sqrt(2 * noise.size)
    assert abs(noise.mean()) < 5 * expected / math.sqrt(noise.size)


def test_class_head_noise_uses_the_tight_sensitivity_by_default():
    n, classes, lam = 80, 10, 0.5
    method = FedAuxFdp(options=FedAuxOptions(lambda_=lam), delta=2e-5)
    noise = class_head_noise(method, n, classes, draws=40)  # 40 × (10 × 4) = 1600 draws
    assert_noise_std(noise, method.class_multiplier * 2 * math.sqrt(2) / (lam * n))  # m·2√2/(λn)


def test_the_papers_class_head_sensitivity_stays_selectable():
    n, classes, lam = 80, 10, 0.5
    method = FedAuxFdp(options=FedAuxOptions(lambda_=lam, head_sensitivity="paper"), delta=2e-5)
    noise = class_head_noise(method, n, classes, draws=40)
    assert_noise_std(noise, method.class_multiplier * multinomial_logistic_sensitivity(classes, lam, n))


def test_the_ledger_charges_the_noise_the_agents_add_over_the_sensitivity_proven():
    sizes, classes, lam = [300, 120, 200], 10, 0.01
    for bound, delta_of in [
        ("tight", lambda n: 2 * math.sqrt(2) / (lam * n)),
        ("paper", lambda n: 2 * math.sqrt(classes) / (lam * n)),
    ]:
        method = FedAuxFdp(options=FedAuxOptions(lambda_=lam, head_sensitivity=bound), delta=2e-5)
        request = method.head_request(classes, np.arange(50))
        stds = [request.class_noise_std(n) for n in sizes]  # what each agent adds
        assert stds == pytest.approx([method.class_multiplier * delta_of(n) for n in sizes])
        _, charged = method.release_events(request, sizes)
        assert charged.instance_sensitivity == pytest.approx(delta_of(120))  # the worst agent's Δ
        assert charged.instance == dp_event.GaussianDpEvent(pytest.approx(method.class_multiplier))
        radius = math.sqrt(2 * math.log(classes) / lam)  # agent level: the smallest σᵢ over R
        assert charged.agent == dp_event.GaussianDpEvent(pytest.approx(min(stds) / radius))


def small_config(method: str, **options) -> RunConfig:
    return RunConfig(
        method=method,
        federation=FederationConfig(dataset="digits", agents=4, partition=PartitionSpec("iid")),
        privacy=PrivacyConfig(delta=2e-5, noise_seed=3),
        options={"extractor": "pca", "extractor_dim": 16, "distill_epochs": 5, "local_epochs": 2, **options},
    )


def test_head_sensitivity_is_a_cli_option_defaulting_to_tight():
    spec = next(s for s in option_specs(FedAuxOptions) if s.name == "head_sensitivity")
    assert spec.flag == "--head-sensitivity"
    assert spec.default == "tight" and spec.choices == ("tight", "paper")


def test_end_to_end_on_digits_reports_the_papers_composition_and_pld_beside_it():
    result = run(small_config("fedaux-fdp", lambda_=0.1, epsilon_classes=0.5))
    instance = result.privacy.instance
    assert instance.epsilon == pytest.approx(0.6)
    # the class head's bound is reported; the paper's Δ beside the one used
    assert instance.bound == "tight" and result.to_dict()["privacy"]["instance"]["bound"] == "tight"
    reported = result.details["fedaux"]["class_sensitivity"]
    n_min = reported["n_min"]
    assert reported["used"] == pytest.approx(2 * math.sqrt(2) / (0.1 * n_min)) == reported["tight"]
    assert reported["paper"] == pytest.approx(2 * math.sqrt(10) / (0.1 * n_min))
    assert instance.sensitivity == pytest.approx(reported["used"])  # the ledger charged the Δ used
    pld = result.privacy.statement("pld accountant, the same releases")
    assert pld is not None and pld.epsilon is not None and pld.epsilon <= instance.epsilon
    stated = [e for e in result.privacy.statements if e.headline]
    assert [e.epsilon for e in stated] == [instance.epsilon] and stated[0].level == "instance"
    assert result.privacy.agent.epsilon is not None and math.isfinite(result.privacy.agent.epsilon)
    written = {e["name"]: e for e in result.to_dict()["privacy"]["statements"]}
    assert written["pld accountant, the same releases"]["epsilon"] == pld.epsilon
    assert result.communication["rounds"] == 1
    assert result.details["fedaux"]["distillation_size"] > result.details["fedaux"]["pretraining_size"]


def test_end_to_end_without_class_noise_learns_and_is_reported_not_private():
    fdp = run(small_config("fedaux-fdp", class_privacy=False, lambda_=0.001))
    assert fdp.accuracy > 0.6  # digits, 4 iid agents: the pipeline learns
    assert fdp.privacy.instance.epsilon is None  # class heads released without noise: ε = ∞
    plus_f = run(small_config("fedaux-f"))
    assert plus_f.privacy.instance.epsilon is None and plus_f.accuracy > 0.5
    fedavg = run(small_config("fedavg-p", epsilon_classes=0.6))
    assert fedavg.privacy.instance.epsilon == pytest.approx(0.6)
    pld = fedavg.privacy.statement("pld accountant, the same releases")
    assert pld is not None and pld.epsilon == pytest.approx(0.6, rel=1e-3)  # one head: the same


def test_dirichlet_balanced_split_gives_every_agent_records_at_alpha_0_01():
    labels = np.repeat(np.arange(10), 300)
    parts = partition_indices(labels, 20, PartitionSpec("dirichlet-balanced", alpha=0.01), np.random.default_rng(0))
    sizes = [p.shape[0] for p in parts]
    assert sum(sizes) == labels.shape[0] and min(sizes) >= 100
    top = np.mean([np.bincount(labels[p], minlength=10).max() / p.shape[0] for p in parts])
    assert top > 0.8  # almost one class per agent, as the paper's Table 1 (94.5 %)


@pytest.mark.parametrize("name", ["fedaux-fdp", "fedavg-p", "fedd-p"])
def test_the_plan_from_public_metadata_is_exactly_what_the_run_charges(name, tmp_path):
    """Record counts, classes and pool size are public: the agent level is planned, not unbounded,
    so a budgeted ledger can admit the run before anything is released."""
    from fedvote.privacy.ledger import PrivacyLedger
    from fedvote.runner import execute, plan
    from fedvote.transport.local import LocalTransport

    config = RunConfig(method=name, federation=FederationConfig(dataset="digits", agents=10),
                       options={"epsilon_classes": 2.0, "lambda_": 0.01})  # the paper's λ: a small agent ε
    federation = make_federation(config)
    method = plan(config, federation.public_metadata())
    ledger = PrivacyLedger()
    execute(method, federation.server_data(), LocalTransport(federation, seed=0), ledger)
    planned = method.planned_events()
    assert planned.agent == ledger.event("agent") and planned.instance == ledger.event("instance")
    assert math.isfinite(epsilon_for(planned.agent, config.privacy.delta))
    budgeted = dataclasses.replace(
        config, privacy=dataclasses.replace(config.privacy, ledger=str(tmp_path / "l.db"), budget_epsilon=100.0)
    )
    assert run(budgeted).privacy.agent.epsilon < 100.0  # admitted by the budget, and charged


DIGITS_DEFAULTS = PublicMetadata(pool_size=270, num_agents=50, num_classes=10, example_shape=(64,),
                                 agent_records=(25,) * 50)


@pytest.mark.parametrize("name", ["fedaux-fdp", "fedavg-p", "fedd-p"])
def test_class_heads_drowned_by_their_noise_are_refused_before_anything_is_fitted(name, monkeypatch, capsys):
    """At ε_classes 0.05 even the smallest h₀ (d = 4) leaves digits' 50 clients of 25 records
    hopeless: refused in one line from public metadata, with an ε at which the noise no longer
    exceeds the signal."""
    import re

    from fedvote.cli import main
    from fedvote.methods.fedaux_fdp import EXTRACTOR_DIM_LADDER, UNLEARNABLE_NOISE_RATIO
    from fedvote.runner import plan

    def never(*args, **kwargs):
        raise AssertionError("fitted or loaded before the refusal")

    monkeypatch.setattr("fedvote.runner.execute", never)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--method", name, "--epsilon-classes", "0.05"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith("fedvote: error: --epsilon-classes: ") and "cannot learn" in err
    assert f"at d = {EXTRACTOR_DIM_LADDER[-1]}" in err and "--lambda" not in err  # λ = 1/ln C: no help
    needed = float(re.search(r"--epsilon-classes ≥ ([0-9.]+)", err).group(1))
    # the suggestion is where noise equals the optimistic signal, so it is planned, not refused
    config = RunConfig(method=name, options={"epsilon_classes": needed * 1.01})
    assert plan(config, DIGITS_DEFAULTS).options.epsilon_classes == needed * 1.01
    # the test depends on public quantities only: the same counts, the same answer
    refused = RunConfig(method=name, options={"epsilon_classes": 0.05})
    with pytest.raises(ConfigError, match="cannot learn"):
        plan(refused, DIGITS_DEFAULTS)
    assert UNLEARNABLE_NOISE_RATIO >= 1.0


@pytest.mark.parametrize("name", ["fedaux-fdp", "fedavg-p", "fedd-p"])
def test_the_papers_settings_stay_refused_on_digits_defaults(name):
    """The former defaults (λ 0.01, ε_classes 0.5, d 32) returned chance there: still refused, naming λ."""
    from fedvote.runner import plan

    options = {"epsilon_classes": 0.5, "lambda_": 0.01, "extractor_dim": 32}
    with pytest.raises(ConfigError, match=r"[67]\.[0-9]× .*at d = 32.*a larger --lambda"):
        plan(RunConfig(method=name, options=options), DIGITS_DEFAULTS)


@pytest.mark.parametrize(("name", "epsilon_classes"), [("fedaux-fdp", 3.9), ("fedavg-p", 4.0), ("fedd-p", 4.0)])
def test_the_default_budget_is_the_toolkits_epsilon_and_digits_defaults_are_planned(name, epsilon_classes):
    """No ε given: the total is DEFAULT_EPSILON (fedaux-fdp: less ε_scores 0.1); λ = 1/ln C;
    digits' 50 clients of 25 records get d = 12 from the auto rule and are not refused."""
    from fedvote.config import DEFAULT_EPSILON
    from fedvote.methods.fedaux_fdp import AUTO_DIM_RATIO
    from fedvote.runner import plan

    method = plan(RunConfig(method=name), DIGITS_DEFAULTS)
    assert method.class_epsilon == pytest.approx(epsilon_classes)
    assert sum(s.epsilon for s in method.stated_statements()) == pytest.approx(DEFAULT_EPSILON)
    assert method.regularization(10) == pytest.approx(1 / math.log(10))
    assert method.extractor_dim == 12
    records = DIGITS_DEFAULTS.agent_records
    assert method.noise_signal_ratio(records, 10, 12) <= AUTO_DIM_RATIO < method.noise_signal_ratio(records, 10, 16)


def test_the_given_class_epsilon_leaves_the_default_total_when_the_scores_take_it_all():
    with pytest.raises(ConfigError, match="--epsilon-classes") as error:
        FedAuxFdp(options=FedAuxOptions(epsilon_scores=4.0))
    assert error.value.argument == "epsilon_classes"
    assert FedAuxFdp(options=FedAuxOptions(epsilon_scores=4.0, epsilon_classes=1.0)).class_epsilon == 1.0


def federation_metadata(labels: np.ndarray, records: tuple[int, ...]) -> PublicMetadata:
    """What the runner hands the method (``Federation.public_metadata``): the labels never enter it."""
    return PublicMetadata(pool_size=270, num_agents=len(records), num_classes=10, example_shape=(64,),
                          agent_records=records)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0, 16.0])
def test_the_auto_dimension_reads_public_quantities_only(epsilon):
    """Two federations with the same record counts and different private labels get the same d,
    the largest of the ladder whose ratio meets the threshold (or the smallest)."""
    from fedvote.methods.fedaux_fdp import AUTO_DIM_RATIO, EXTRACTOR_DIM_LADDER
    from fedvote.runner import plan

    rng = np.random.default_rng(0)
    records = tuple(int(n) for n in rng.integers(15, 40, size=30))
    chosen = []
    for labels in (rng.integers(0, 10, sum(records)), np.zeros(sum(records), dtype=np.int64)):
        config = RunConfig(method="fedd-p", options={"epsilon_classes": epsilon})
        try:
            chosen.append(plan(config, federation_metadata(labels, records)).extractor_dim)
        except ConfigError:
            chosen.append(None)  # refused alike
    assert chosen[0] == chosen[1]
    method = FedDP(options=FedAuxOptions(epsilon_classes=epsilon), delta=1e-3)
    ratios = {d: method.noise_signal_ratio(records, 10, d) for d in EXTRACTOR_DIM_LADDER}
    meeting = [d for d in EXTRACTOR_DIM_LADDER if ratios[d] <= AUTO_DIM_RATIO]
    expected = meeting[0] if meeting else EXTRACTOR_DIM_LADDER[-1]
    assert method.extractor_dim_for(records, 10) == expected
    assert all(ratios[a] > ratios[b] for a, b in zip(EXTRACTOR_DIM_LADDER, EXTRACTOR_DIM_LADDER[1:], strict=False))
    if chosen[0] is not None:
        assert chosen[0] == expected


def test_a_given_dimension_is_kept_and_unnoised_heads_get_the_largest():
    records = (25,) * 50
    assert FedDP(options=FedAuxOptions(extractor_dim=20)).extractor_dim_for(records, 10) == 20
    assert FedAuxF().extractor_dim_for(records, 10) == 32
    assert FedAuxFdp(options=FedAuxOptions(class_privacy=False)).extractor_dim_for(records, 10) == 32


def test_the_signal_bound_is_the_smaller_of_the_two_head_norm_bounds():
    from fedvote.methods.fedaux_fdp import class_head_norm_ceiling
    from fedvote.models.logistic_heads import head_norm_bound

    for lam in (0.01, 0.1, 1 / math.log(10), 1.0, 10.0):
        assert class_head_norm_ceiling(10, lam) == pytest.approx(min(head_norm_bound(10, lam), math.sqrt(2) / lam))
    # λ ≥ 1/ln C: noise and signal both ∝ 1/λ, so the ratio no longer falls with λ
    ratios = [FedDP(options=FedAuxOptions(lambda_=lam)).noise_signal_ratio((25,) * 50, 10, 12) for lam in (1.0, 10.0)]
    assert ratios[0] == pytest.approx(ratios[1])


def test_run_details_record_the_chosen_dimension_and_how():
    result = run(RunConfig(
        method="fedavg-p",
        federation=FederationConfig(dataset="digits", agents=10, partition=PartitionSpec("iid")),
        privacy=PrivacyConfig(noise_seed=3),
    ))
    fedaux = result.details["fedaux"]
    choice = fedaux["extractor_dim_choice"]
    assert choice["rule"] == "auto" and choice["dim"] == fedaux["extractor_dim"]
    assert choice["noise_signal_ratio"] <= choice["threshold"]
    assert fedaux["lambda_choice"] == "default: 1/ln C" and fedaux["epsilon_classes"] == 4.0
    assert fedaux["feature_bias"] == 0.1
    given = run(small_config("fedavg-p", epsilon_classes=4.0))
    assert given.details["fedaux"]["extractor_dim_choice"]["rule"] == "given"
    assert given.details["fedaux"]["extractor_dim"] == 16


def test_an_extractor_dimension_beyond_a_million_is_refused_by_its_flag():
    """--extractor-dim 10¹⁰⁰ overflowed the learnability check's float maths (found by the fuzz)."""
    from fedvote.methods.fedaux_fdp import FedAuxOptions
    from fedvote.methods.options.fedaux import MAX_EXTRACTOR_DIM

    with pytest.raises(ConfigError, match="extractor_dim.*at most"):
        FedAuxOptions(extractor_dim=10**100)
    assert FedAuxOptions(extractor_dim=MAX_EXTRACTOR_DIM).extractor_dim == MAX_EXTRACTOR_DIM


def test_a_contrastive_h0_is_pre_trained_on_the_public_split_and_learns():
    """--extractor contrastive (SimCLR, the paper's choice of pre-training) runs the pipeline.

    Measured 0.54 on digits' 539 test images with 54 pre-training images (chance: 0.1, sd of
    a chance accuracy ≈ 0.013): 0.3 fails only a pipeline that learns nothing.
    """
    result = run(small_config("fedaux-f", extractor="contrastive", extractor_epochs=30))
    fedaux = result.details["fedaux"]
    assert (fedaux["extractor"], fedaux["extractor_dim"]) == ("contrastive", 16)
    assert result.accuracy > 0.3


def test_a_contrastive_h0_on_vectors_is_refused_by_its_option():
    method = FedAuxFdp(options=FedAuxOptions(extractor="contrastive"))
    with pytest.raises(ConfigError, match="needs image examples") as error:
        method.fit_features(np.zeros((10, 64), dtype=np.float32), 4)
    assert error.value.argument == "extractor"


@pytest.mark.parametrize("value", [1e-320, 1e-10])
def test_a_lambda_so_small_that_the_sensitivity_overflows_is_refused_naming_it(value):
    """--lambda 1e-320 (a subnormal) made the planning's ε search divide inf by inf: a traceback."""
    from fedvote.methods.options.fedaux import MIN_LAMBDA, FedAuxOptions

    with pytest.raises(ConfigError) as error:
        FedAuxOptions(lambda_=value)
    assert error.value.argument == "lambda_" and f"{MIN_LAMBDA:g}" in str(error.value)
    assert FedAuxOptions(lambda_=MIN_LAMBDA).lambda_ == MIN_LAMBDA
