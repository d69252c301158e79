"""PriFedSync (federated-f-dp-prifedsync.txt, Algorithm 1) with Poisson DP-SGD and proven accounting."""

import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.client_holdout import client_test_indices
from fedvote.data.federation import LabeledData
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, check_method
from fedvote.methods.prifedsync import PriFedSync, PriFedSyncOptions, helper_models
from fedvote.models.batched_dp_sgd import clipped_gradient_sum, perceptron_layer_sizes
from fedvote.models.local_training import flat_parameters
from fedvote.models.zoo import build_model
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.fdp import prifedsync_mu
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import make_federation, prepare_public, run
from fedvote.transport.local import LocalTransport

SIZES = (64, 16, 10)


def _models(m, seed=0):
    models = [build_model("mlp", (1, 8, 8), 10, hidden=16, generator=torch.Generator().manual_seed(seed + i)) for i in range(m)]
    return models, torch.as_tensor(np.stack([flat_parameters(model) for model in models]))


def _opacus_clipped_sum(model, x, y, clip):
    """Σ clip(vₗ, C) by Opacus: GradSampleModule + DPOptimizer with no noise, lr 1, one step."""
    wrapped = GradSampleModule(model, loss_reduction="sum")
    optimizer = DPOptimizer(
        torch.optim.SGD(wrapped.parameters(), lr=1.0),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=None,
        loss_reduction="sum",
    )
    before = torch.cat([p.detach().reshape(-1).clone() for p in wrapped.parameters()])
    optimizer.zero_grad()
    with warnings.catch_warnings():  # Opacus's hook note about inputs that need no gradient
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        torch.nn.functional.cross_entropy(wrapped(x), y, reduction="sum").backward()
    optimizer.step()
    after = torch.cat([p.detach().reshape(-1) for p in wrapped.parameters()])
    return before - after


@pytest.mark.parametrize("clip", [0.05, 1.0, 100.0])
def test_batched_clipped_sum_equals_opacus(clip):
    """Three clients with their own models and records: each clipped sum is Opacus's."""
    models, params = _models(3)
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.random((3, 12, 64)), dtype=torch.float32)
    y = torch.as_tensor(rng.integers(0, 10, (3, 12)))
    summed, norms = clipped_gradient_sum(params, SIZES, x, y, clip)
    for j, model in enumerate(models):
        reference = _opacus_clipped_sum(model, x[j].reshape(12, 1, 8, 8), y[j], clip)
        np.testing.assert_allclose(summed[j].numpy(), reference.numpy(), rtol=1e-4, atol=1e-6)
    # the per-sample norms are those of the materialised per-sample gradients
    model = _models(1)[0][0]
    loss = torch.nn.functional.cross_entropy(model(x[0, :1].reshape(1, 1, 8, 8)), y[0, :1], reduction="sum")
    grads = torch.autograd.grad(loss, list(model.parameters()))
    assert norms[0, 0].item() == pytest.approx(torch.sqrt(sum(g.pow(2).sum() for g in grads)).item(), rel=1e-5)


def test_perceptron_layer_sizes_and_refusals():
    assert perceptron_layer_sizes(build_model("mlp", (1, 28, 28), 10)) == (784, 128, 10)
    assert perceptron_layer_sizes(build_model("logistic", (1, 8, 8), 10)) == (64, 10)
    with pytest.raises(ConfigError, match="perceptron"):
        perceptron_layer_sizes(build_model("cnn", (1, 8, 8), 10))


def test_helper_interpolation_eq_2_1():
    local = np.array([[1.0, 2.0], [3.0, 5.0]], dtype=np.float32)
    global_model = np.array([10.0, 20.0], dtype=np.float32)
    np.testing.assert_allclose(
        helper_models(local, global_model, "interpolate", 0.1), 0.9 * local + 0.1 * global_model, rtol=1e-6
    )
    np.testing.assert_array_equal(helper_models(local, global_model, "identity", 0.1), np.tile(global_model, (2, 1)))
    np.testing.assert_array_equal(helper_models(local, global_model, "interpolate", 1.0), np.tile(global_model, (2, 1)))


def test_client_test_sets_hold_only_the_clients_labels():
    rng = np.random.default_rng(0)
    test_labels = rng.integers(0, 10, 2000)
    train = [np.array([1, 1, 1, 3]), np.array([7, 8, 9] * 5)]
    index = client_test_indices(train, test_labels, 200, rng)
    assert index.shape == (2, 200)
    assert set(test_labels[index[0]]) <= {1, 3} and set(test_labels[index[1]]) <= {7, 8, 9}
    assert np.sum(test_labels[index[0]] == 1) > 100  # proportions follow training (3/4 of label 1)
    assert len(set(index[1].tolist())) == 200  # without replacement when the pool allows


def test_registered_options_and_refusals():
    assert METHODS["prifedsync"] is PriFedSync
    config = RunConfig(
        method="prifedsync",
        privacy=PrivacyConfig(sigma=0.75),
        options={"rounds": 7, "sampling_rate": 1.0, "local_steps": 5, "batch_size": 8,
                 "helper": "identity", "alpha": 0.3, "target_accuracy": 0.9},
    )
    method = PriFedSync.from_config(config, sigma=0.75, queries=1, min_responders=1)
    assert (method.rounds, method.sampling_rate, method.local_steps, method.batch_size) == (7, 1.0, 5, 8)
    assert method.options == PriFedSyncOptions(
        rounds=7, sampling_rate=1.0, local_steps=5, batch_size=8, helper="identity", alpha=0.3, target_accuracy=0.9
    )
    with pytest.raises(ConfigError, match="helper"):
        check_method(RunConfig(method="prifedsync", options={"helper": "mean"}))
    with pytest.raises(ConfigError, match="alpha"):
        PriFedSyncOptions(alpha=1.5)
    for foreign in ("clip_norm", "lr_decay", "batch_sampling_rate", "noise"):  # gradient settings it does not use
        with pytest.raises(ConfigError, match=foreign):
            PriFedSync.from_config(
                RunConfig(method="prifedsync", options={foreign: 1.0}), sigma=1.0, queries=1, min_responders=1
            )
    with pytest.raises(ConfigError, match="batch_size"):
        PriFedSync(batch_size=50).with_agent_records(np.array([40, 60]))
    # the stop rule reads only the released global model on public data: no private target model
    with pytest.raises(ConfigError, match="target_model"):
        check_method(RunConfig(method="prifedsync", options={"target_model": "personalised"}))
    with pytest.raises(ConfigError, match="validation_size"):
        PriFedSyncOptions(validation_size=0)


def _by_name(statements):
    return {entry.name if hasattr(entry, "name") else entry["name"]: entry for entry in statements}


WEAK_AND_STRONG = "weak and strong federated DP (configured rounds)"
CLT_WEAK = "Theorem 2 (CLT), weak federated f-DP"
CLT_STRONG = "Theorem 2 (CLT), strong federated f-DP"


def test_record_statements_are_the_proven_bound_with_the_clt_beside_it():
    method = PriFedSync(sigma=2.0, batch_size=16, local_steps=38, rounds=194, delta=1e-5)
    stated = _by_name(method.record_statements(194, np.full(100, 600)))
    proven = epsilon_for(method.with_agent_records(np.full(100, 600)).planned_events().instance, 1e-5)
    bound = stated[WEAK_AND_STRONG]
    assert bound.kind == "bound" and bound.epsilon == pytest.approx(proven, rel=1e-12) and bound.mu is None
    assert not any(entry.kind == "ex post" for entry in stated.values())  # every configured round ran
    # the paper's σ = 1 is our σ = 2 (the same std 2C): Table 1, p = 0.5, σ = 1 gives μ = 3.92
    weak, strong = stated[CLT_WEAK], stated[CLT_STRONG]
    assert weak.kind == strong.kind == "approximation" and round(weak.mu, 2) == 3.92
    assert "asymptotic (CLT), not a bound" in weak.source
    assert strong.mu == pytest.approx(math.sqrt(99) * weak.mu)
    assert method.record_mechanism(194, np.full(100, 600))["paper_sigma"] == 1.0
    # the smallest client sets the bound
    uneven = _by_name(method.record_statements(10, np.array([600, 300, 900])))
    mechanism = method.record_mechanism(10, np.array([600, 300, 900]))
    assert mechanism["min_client_records"] == 300 and mechanism["batch_rate"] == 16 / 300
    assert uneven[CLT_WEAK].mu == pytest.approx(prifedsync_mu(1.0, 16, 300, 38, 194))
    ex_post = uneven["ε of the 10 rounds run"]
    assert ex_post.kind == "ex post" and ex_post.epsilon < uneven[WEAK_AND_STRONG].epsilon
    silent = _by_name(PriFedSync(sigma=0.0).record_statements(3, np.full(4, 50)))
    assert silent[WEAK_AND_STRONG].epsilon is None and silent[CLT_WEAK].mu is None


def test_planned_events_are_replace_one_poisson_dp_sgd_of_the_smallest_client():
    from fedvote.privacy.events import ReplaceOneDpEvent

    method = PriFedSync(sigma=0.9, rounds=176, batch_size=16, local_steps=38).with_agent_records(np.array([600, 400]))
    event = method.planned_events().instance
    assert event == ReplaceOneDpEvent(
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(16 / 400, dp_event.GaussianDpEvent(0.9)), 38 * 176)
    )
    assert isinstance(method.planned_events().agent, dp_event.NonPrivateDpEvent)


def test_accountants_that_cannot_price_replace_one_poisson_are_refused_up_front():
    for kind in ("rdp", "exact", "classic"):
        with pytest.raises(ConfigError, match="accountant"):
            PriFedSync(accountant=kind)


def _digits_config(**options):
    return RunConfig(
        method="prifedsync",
        federation=FederationConfig(dataset="digits", agents=6, partition=PartitionSpec("shards", shards_per_agent=3)),
        privacy=PrivacyConfig(sigma=1.6, noise_seed=0),
        options={"rounds": 12, "sampling_rate": 1.0, "local_steps": 8, "batch_size": 8, "learning_rate": 0.02,
                 "client_test_size": 40, **options},
    )


def test_end_to_end_on_digits():
    result = run(_digits_config()).to_dict()
    stated = _by_name(result["privacy"]["statements"])
    headline = result["privacy"]["instance"]["epsilon"]
    assert headline == pytest.approx(stated[WEAK_AND_STRONG]["epsilon"], rel=1e-9)
    assert result["privacy"]["agent"]["epsilon"] is None
    n_min = min(result["agent_records"])
    assert stated[CLT_WEAK]["mu"] == pytest.approx(prifedsync_mu(0.8, 8, n_min, 8, 12))
    assert stated[CLT_WEAK]["kind"] == "approximation" and not stated[CLT_WEAK]["headline"]
    history = result["accuracy_history"]
    assert len(history) == 12 and result["rounds"] == 12
    assert set(history[0]) == {"round", "sampled", "global"}  # nothing private beside the public accuracy
    assert result["validation_size"] == result["public_pool"]  # the whole public pool, never queried
    diagnostics = result["diagnostics"]
    assert "not private" in diagnostics["note"] and "private label frequencies" in diagnostics["client_test_sets"]
    assert diagnostics["client_accuracies"]["personalised"] > 0.5  # learns: 6 clients of ~3 digits
    assert len(diagnostics["client_accuracy_history"]) == 12


def test_prifedsync_clt_mu_is_labelled_asymptotic_and_never_charged():
    """The CLT is the paper's figure only: labelled, and neither headline, nor target, nor ledger charge."""
    config = _digits_config()
    federation = make_federation(config)
    federation = prepare_public(config, federation)
    method = PriFedSync.from_config(config, sigma=1.6, queries=1, min_responders=1)
    method = method.with_public(federation.public_metadata())
    ledger = PrivacyLedger()
    outcome = method.run(federation.server_data(), LocalTransport(federation, seed=0, noise_seed=0), ledger)
    stated = _by_name(outcome.statements)
    assert "asymptotic (CLT), not a bound" in stated[CLT_WEAK].source
    assert stated[WEAK_AND_STRONG].mu is None  # no GDP μ is claimed as proven
    assert not any(entry.headline for entry in outcome.statements)
    # one charge, the whole proven plan; no Gaussian(1/μ_CLT) anywhere
    assert ledger.charges == (method.planned_events(),)
    charged = epsilon_for(ledger.event("instance"), config.privacy.delta)
    assert charged == pytest.approx(stated[WEAK_AND_STRONG].epsilon, rel=1e-9)
    assert charged != pytest.approx(stated[CLT_WEAK].epsilon, rel=0.05)
    # --epsilon calibrates σ to the proven bound, not to the CLT
    calibrated = dataclasses.replace(config, privacy=PrivacyConfig(epsilon=3.0, delta=1e-3, noise_seed=0))
    calibrated = dataclasses.replace(calibrated, options={**calibrated.options, "rounds": 2})
    result = run(calibrated).to_dict()
    assert result["privacy"]["calibrated_level"] == "instance"
    assert result["privacy"]["instance"]["epsilon"] == pytest.approx(3.0, rel=0.01)
    assert result["privacy"]["instance"]["epsilon"] <= 3.0
    clt_epsilon = _by_name(result["privacy"]["statements"])[CLT_WEAK]["epsilon"]
    assert clt_epsilon != pytest.approx(3.0, rel=0.05)


def test_target_accuracy_runs_report_the_epsilon_of_the_configured_rounds():
    """A run that stops at round r < R reports the ε of R (the ε of r only as ex post)."""
    full = run(_digits_config()).to_dict()
    history = full["accuracy_history"]
    target = max(h["global"] for h in history[:5])  # reached by round 5 at the latest
    first = next(h["round"] for h in history if h["global"] >= target)
    stopped = run(_digits_config(target_accuracy=target)).to_dict()
    assert stopped["rounds"] < 12
    assert stopped["privacy"]["instance"]["epsilon"] == pytest.approx(full["privacy"]["instance"]["epsilon"], rel=1e-9)
    assert stopped["round_reached"] == first == stopped["rounds"]
    mechanism = stopped["privacy_mechanism"]
    assert mechanism["rounds"] == 12 and mechanism["rounds_run"] == first
    ex_post = _by_name(stopped["privacy"]["statements"])[f"ε of the {first} rounds run"]
    assert ex_post["kind"] == "ex post" and "ex post, not a guarantee" in ex_post["source"]
    assert ex_post["epsilon"] < stopped["privacy"]["instance"]["epsilon"]


def _never_sampled_client(seed, clients, rate, rounds):
    """A client the server's Poisson client sampling (noise seed ``seed``) never picks in ``rounds``."""
    from fedvote.methods.prifedsync import client_sampling_generator

    rng = client_sampling_generator(seed)  # the stream PriFedSync.run draws from
    sampled = np.zeros(clients, dtype=bool)
    for _ in range(rounds):
        sampled |= rng.random(clients) < rate
    unsampled = np.flatnonzero(~sampled)
    return int(unsampled[0]) if unsampled.size else None


def _replace_one_record(federation, client, new_label):
    """The federation with client ``client``'s first record replaced by another client's record of ``new_label``."""
    donor = next(a for i, a in enumerate(federation.agents) if i != client and new_label in a.labels)
    row = int(np.flatnonzero(donor.labels == new_label)[0])
    data = federation.agents[client]
    features, labels = data.features.copy(), data.labels.copy()
    features[0], labels[0] = donor.features[row], new_label
    agents = list(federation.agents)
    agents[client] = LabeledData(features, labels)
    return dataclasses.replace(federation, agents=tuple(agents))


def test_prifedsync_stop_rule_reads_no_private_data():
    """Replacing one private record changes nothing the stop rule reads, nor the round it stops at.

    The replaced record belongs to a client the server never samples, so every released
    model is the same in both federations; the record brings a label the client lacked, so
    that client's private-label test set (a diagnostic) does change.
    """
    rounds, rate = 8, 0.3
    seed = next(s for s in range(100) if _never_sampled_client(s, 6, rate, rounds) is not None)
    client = _never_sampled_client(seed, 6, rate, rounds)
    config = _digits_config()
    config = dataclasses.replace(
        config,
        privacy=PrivacyConfig(sigma=1.6, noise_seed=seed),
        options={**config.options, "rounds": rounds, "sampling_rate": rate},
    )
    federation = make_federation(config)
    missing = next(c for c in range(10) if c not in federation.agents[client].labels)
    neighbour = _replace_one_record(federation, client, missing)
    free = run(config, federation=federation).to_dict()
    target = max(h["global"] for h in free["accuracy_history"][: rounds // 2])
    stopping = dataclasses.replace(config, options={**config.options, "target_accuracy": target})
    a = run(stopping, federation=federation).to_dict()
    b = run(stopping, federation=neighbour).to_dict()
    assert a["accuracy_history"] == b["accuracy_history"]  # everything the stop rule reads
    assert a["round_reached"] == b["round_reached"] is not None
    assert a["rounds"] == b["rounds"] <= rounds // 2
    # the private diagnostics do move with the record: the test can see a private read
    private_a = a["diagnostics"]["client_accuracy_history"]
    private_b = b["diagnostics"]["client_accuracy_history"]
    assert private_a != private_b


def _planned(records: tuple[int, ...], **options):
    from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
    from fedvote.data.federation import PublicMetadata
    from fedvote.runner import plan

    config = RunConfig(
        method="prifedsync",
        federation=FederationConfig(agents=len(records)),
        privacy=PrivacyConfig(epsilon=4.0),
        options=options,
    )
    public = PublicMetadata(pool_size=270, num_agents=len(records), num_classes=10, example_shape=(64,),
                            agent_records=records)
    return plan(config, public)


def test_small_clients_train_full_batch_by_default_from_their_record_counts_alone():
    """digits' 50 clients of 25 records: the paper's B = 16 over 7,600 steps learnt nothing (0.11)."""
    from fedvote.methods.prifedsync import SMALL_CLIENT_RECORDS

    small = _planned((25,) * 49 + (26,))
    assert (small.batch_size, small.local_steps, small.rounds) == (25, 1, 100)
    assert (small.sampling_rate, small.model, small.optimizer, small.learning_rate) == (1.0, "logistic", "sgd", 0.3)
    # the smallest client's rate is 1: its 100 steps compose as plain Gaussians (no sampling)
    assert small.batch_size / min(small.agent_records) == 1.0
    # a setting the user gives is kept; the others still follow the clients' size
    given = _planned((25,) * 50, rounds=40, gradient_model="mlp", optimizer="adam")
    assert (given.rounds, given.model, given.optimizer, given.batch_size) == (40, "mlp", "adam", 25)
    # a learning rate the user gives keeps the optimizer it was chosen for
    stepped = _planned((25,) * 50, learning_rate=0.003)
    assert (stepped.optimizer, stepped.learning_rate, stepped.batch_size) == ("adam", 0.003, 25)
    # clients of the paper's size keep the paper's settings
    large = _planned((SMALL_CLIENT_RECORDS,) * 10)
    assert (large.batch_size, large.local_steps, large.rounds, large.model, large.optimizer) == (
        16, 38, 200, "mlp", "adam")


def test_the_small_client_plan_is_calibrated_to_the_target_at_its_own_settings():
    from fedvote.privacy.accountant import epsilon_for

    method = _planned((25,) * 50)
    epsilon = epsilon_for(method.planned_events().instance, method.delta, "pld")
    assert 3.99 < epsilon <= 4.0


def test_inputs_are_centred_by_the_public_pool_mean_in_training_and_in_the_released_model():
    """A public constant (the pool's mean): on digits it lifted the default run from 0.47 to 0.66-0.76."""
    import torch

    from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
    from fedvote.models.shifted_input import ShiftedInput
    from fedvote.runner import make_federation, make_method, run

    config = RunConfig(method="prifedsync", federation=FederationConfig(agents=10),
                       privacy=PrivacyConfig(sigma=1.0, noise_seed=0), options={"rounds": 3})
    federation = make_federation(config)
    method = make_method(config, federation)
    server = federation.server_data()
    shift = method.input_shift(server)
    pool = server.public_features.reshape(len(server.public_features), -1)
    np.testing.assert_allclose(shift, pool.mean(axis=0), rtol=1e-6, atol=1e-9)
    assert method.options.center_inputs
    result = run(config)
    assert result.details["input_centring"] == "public pool mean"
    # the released model subtracts the same constant before its perceptron
    model = torch.nn.Linear(len(shift), 10)
    wrapped = ShiftedInput(shift, model)
    x = torch.as_tensor(pool[:5], dtype=torch.float32)
    torch.testing.assert_close(wrapped(x), model(x - torch.tensor(shift, dtype=torch.float32)))
    raw = dataclasses.replace(config, options={"rounds": 3, "center_inputs": False})
    assert make_method(raw, federation).input_shift(server) is None
