import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event, pld
from dp_accounting.privacy_accountant import NeighboringRelation

from fedvote.config import PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.dp_fedsgd import DpFedSgd
from fedvote.models.local_training import DpSgdSpec, dp_sgd_steps, flat_parameters, load_flat_parameters
from fedvote.models.zoo import build_model
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, n)


def _start():
    model = build_model("logistic", (1, 8, 8), 10, generator=torch.Generator().manual_seed(0))
    return flat_parameters(model)


def _step(theta, x, y, spec, lr=1.0, steps=1, seed=0):
    model = load_flat_parameters(build_model("logistic", (1, 8, 8), 10), theta)
    dp_sgd_steps(model, x, y, steps=steps, learning_rate=lr, spec=spec, generator=torch.Generator().manual_seed(seed))
    return flat_parameters(model).astype(np.float64) - theta


def _plain_gradient(theta, x, y):
    model = load_flat_parameters(build_model("logistic", (1, 8, 8), 10), theta)
    loss = torch.nn.functional.cross_entropy(model(torch.as_tensor(x)), torch.as_tensor(y), reduction="sum")
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy().astype(np.float64)


def test_registered_and_from_config():
    assert METHODS["dp-fedsgd"] is DpFedSgd
    config = RunConfig(
        method="dp-fedsgd",
        privacy=PrivacyConfig(sigma=1.2),
        options={"rounds": 4, "local_steps": 3, "batch_sampling_rate": 0.5},
    )
    method = DpFedSgd.from_config(config, sigma=1.2, queries=1, min_responders=1)
    assert (method.sigma, method.rounds, method.local_steps, method.batch_sampling_rate) == (1.2, 4, 3, 0.5)
    assert method.sampling_rate == 1.0 and DpFedSgd.calibration_level == "instance"


def test_opacus_clips_each_record():
    """One record, full batch, no noise: the step is −η·clip(g, C), of norm exactly min(‖g‖, C)."""
    theta = _start()
    x, y = _data(1)
    g = _plain_gradient(theta, x, y)
    clip = 0.05 * np.linalg.norm(g)
    delta = _step(theta, x, y, DpSgdSpec(sampling_rate=1.0, noise_multiplier=0.0, max_grad_norm=clip))
    assert np.linalg.norm(delta) == pytest.approx(clip, rel=1e-4)
    cos = -(delta @ g) / (np.linalg.norm(delta) * np.linalg.norm(g))
    assert cos == pytest.approx(1.0, abs=1e-5)


def test_opacus_clips_per_sample_not_the_batch():
    """Many records: the step is the mean of per-record clipped gradients (norm ≤ C), not the clipped mean."""
    theta = _start()
    x, y = _data(40)
    clip = 1e-3
    delta = _step(theta, x, y, DpSgdSpec(sampling_rate=1.0, noise_multiplier=0.0, max_grad_norm=clip))
    per_record = [_plain_gradient(theta, x[i : i + 1], y[i : i + 1]) for i in range(40)]
    expected = -sum(gi * min(1.0, clip / np.linalg.norm(gi)) for gi in per_record) / 40
    np.testing.assert_allclose(delta, expected, atol=1e-7)
    assert np.linalg.norm(delta) <= clip


def test_opacus_noise_statistics():
    """Full batch of n: the step's noise is η·N(0, z²C²)/n per coordinate."""
    theta = _start()
    x, y = _data(20)
    spec0 = DpSgdSpec(sampling_rate=1.0, noise_multiplier=0.0, max_grad_norm=0.5)
    spec = DpSgdSpec(sampling_rate=1.0, noise_multiplier=3.0, max_grad_norm=0.5)
    noise = _step(theta, x, y, spec, lr=2.0) - _step(theta, x, y, spec0, lr=2.0)
    expected = 2.0 * 3.0 * 0.5 / 20
    assert noise.std() == pytest.approx(expected, rel=5.0 / math.sqrt(2 * noise.size))


def _replace_one_reference(q_b, z, steps, delta):
    """dp-accounting's REPLACE_ONE PLD of ``steps`` Poisson-subsampled Gaussian steps, built directly."""
    accountant = pld.PLDAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    return accountant.compose(dp_event.PoissonSampledDpEvent(q_b, dp_event.GaussianDpEvent(z)), steps).get_epsilon(delta)


def test_accounting_matches_dp_accounting_and_result_keys(small_federation):
    """The instance level is replace-one record (dp-accounting's REPLACE_ONE relation), like every
    other method's, not DP-SGD's add/remove-one."""
    q_b, z, rounds, steps, delta = 0.3, 1.1, 3, 2, 1e-3
    method = DpFedSgd(
        sigma=z, rounds=rounds, local_steps=steps, batch_sampling_rate=q_b, model="logistic", noise_seed=0
    )
    ledger = PrivacyLedger()
    transport = LocalTransport(small_federation, noise_seed=0)
    outcome = method.run(small_federation.server_data(), transport, ledger)
    reference = _replace_one_reference(q_b, z, rounds * steps, delta)
    assert epsilon_for(ledger.event("instance"), delta) == pytest.approx(reference, rel=0.01)
    add_remove = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(q_b, dp_event.GaussianDpEvent(z)), rounds * steps
    ).get_epsilon(delta)
    assert epsilon_for(ledger.event("instance"), delta) > 1.3 * add_remove  # the smaller figure is not reported
    assert math.isinf(epsilon_for(ledger.event("agent"), delta))  # not private at the agent level
    details = outcome.details
    assert (details["batch_sampling_rate"], details["noise_multiplier"], details["local_steps"]) == (
        q_b, z, rounds * steps
    )
    assert method.instance_adjacency is None  # the run's instance level is replace-one
    assert transport.communication.rounds == rounds


@pytest.mark.slow  # a PLD calibration: make test-slow (CI)
def test_dp_fedsgd_calibrates_the_replace_one_instance_epsilon():
    """--epsilon targets the replace-one ε: the calibrated z meets it (and is larger than the z
    an add/remove calibration would pick)."""
    from fedvote.data.federation import PublicMetadata
    from fedvote.runner import plan

    config = RunConfig(
        method="dp-fedsgd",
        privacy=PrivacyConfig(epsilon=4.0, delta=1e-3),
        options={"rounds": 20, "batch_sampling_rate": 0.25},
    )
    method = plan(config, PublicMetadata(pool_size=10, num_agents=5, num_classes=10, example_shape=(64,)))
    reached = _replace_one_reference(0.25, method.sigma, 20, 1e-3)
    assert 3.95 <= reached <= 4.0 + 1e-6
    add_remove = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(0.25, dp_event.GaussianDpEvent(method.sigma)), 20
    ).get_epsilon(1e-3)
    assert add_remove < 3.0


def test_instance_level_needs_the_pld_accountant():
    config = RunConfig(method="dp-fedsgd", privacy=PrivacyConfig(sigma=1.0, accountant="rdp"))
    with pytest.raises(ConfigError) as error:
        DpFedSgd.from_config(config, sigma=1.0, queries=1, min_responders=1)
    assert error.value.argument == "accountant"


def _public(records):
    from fedvote.data.federation import PublicMetadata

    return PublicMetadata(pool_size=10, num_agents=len(records), num_classes=10, example_shape=(1, 8, 8),
                          agent_records=tuple(records))


def test_small_agents_train_a_logistic_model_unless_the_user_gave_one():
    """The model follows the record counts (public metadata): logistic below SMALL_CLIENT_RECORDS."""
    from fedvote.methods.prifedsync import SMALL_CLIENT_RECORDS

    default = DpFedSgd.from_config(RunConfig(method="dp-fedsgd", privacy=PrivacyConfig(sigma=1.0)), sigma=1.0,
                                   queries=1, min_responders=1)
    assert (default.model, default.model_from_public, default.center_inputs) == ("mlp", True, True)
    small = default.with_public(_public([25] * 49 + [SMALL_CLIENT_RECORDS - 1]))
    assert small.model == "logistic"
    assert small.model_choice() == f"record counts: the smallest agent holds 25 < {SMALL_CLIENT_RECORDS} records"
    large = default.with_public(_public([SMALL_CLIENT_RECORDS, 600]))
    assert large.model == "mlp" and ">= 320" in large.model_choice()
    assert default.with_public(_public([])).model == "mlp"  # no record counts: unchanged
    given = RunConfig(method="dp-fedsgd", privacy=PrivacyConfig(sigma=1.0), options={"gradient_model": "mlp"})
    kept = DpFedSgd.from_config(given, sigma=1.0, queries=1, min_responders=1).with_public(_public([25] * 50))
    assert (kept.model, kept.model_choice()) == ("mlp", "given (--gradient-model)")


def test_the_model_rule_and_centring_leave_the_events_unchanged():
    """ε depends on q_b, z and T·E only: the model chosen from the records and the shift change nothing."""
    default = DpFedSgd(sigma=1.3)
    chosen = default.with_public(_public([25] * 50))
    raw = DpFedSgd(sigma=1.3, center_inputs=False, model_from_public=False)
    assert chosen.model != default.model
    assert default.planned_events() == chosen.planned_events() == raw.planned_events()


def test_the_runner_plans_the_small_agent_model_and_records_it(small_federation):
    from fedvote.runner import plan

    config = RunConfig(method="dp-fedsgd", privacy=PrivacyConfig(sigma=1.0), options={"rounds": 2})
    method = plan(config, small_federation.public_metadata())
    assert method.model == "logistic"  # digits agents hold a few dozen records
    outcome = method.run(small_federation.server_data(), LocalTransport(small_federation, noise_seed=0),
                         PrivacyLedger())
    assert outcome.details["model"] == "logistic"
    assert outcome.details["model_choice"].startswith("record counts: the smallest agent holds")
