"""Input centring of the gradient baselines (FedAvg, DP-FedAvg, DP-FedSGD): a public constant.

The public pool's mean goes down with θ every round, every agent trains on its records minus
it, the released model applies it, the communication counts it, and no event changes. On by
default for DP-FedSGD, off for FedAvg and DP-FedAvg (docs/defaults.md).
"""

import numpy as np
import pytest
import torch

from fedvote.config import PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.methods.dp_fedavg import DpFedAvg, DpFedAvgOptions
from fedvote.methods.dp_fedsgd import DpFedSgd
from fedvote.methods.fedavg import FedAvg
from fedvote.models.shifted_input import ShiftedInput, public_mean_shift, shift_features
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


class _Watching(LocalTransport):
    """A LocalTransport that records the LocalTraining of every round it serves."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trainings = []

    def local_updates(self, global_params, agent_ids, training):
        self.trainings.append(training)
        return super().local_updates(global_params, agent_ids, training)

    def secure_update_sum(self, global_params, agent_ids, training):
        self.trainings.append(training)
        return super().secure_update_sum(global_params, agent_ids, training)


METHODS = {
    "fedavg": lambda **kw: FedAvg(rounds=2, sampling_rate=0.5, local_steps=2, model="logistic", noise_seed=1, **kw),
    "dp-fedavg": lambda **kw: DpFedAvg(sigma=1.0, rounds=2, sampling_rate=0.5, local_steps=2, model="logistic",
                                       noise_seed=1, **kw),
    "dp-fedsgd": lambda **kw: DpFedSgd(sigma=1.0, rounds=2, model="logistic", noise_seed=1, **kw),
}


DEFAULT_ON = {"fedavg": False, "dp-fedavg": False, "dp-fedsgd": True}


@pytest.mark.parametrize("name", METHODS)
def test_the_default_per_method(name):
    assert METHODS[name]().center_inputs is DEFAULT_ON[name]


@pytest.mark.parametrize("name", METHODS)
def test_centring_reaches_every_round_and_the_released_model(small_federation, name):
    method = METHODS[name](center_inputs=True)
    server = small_federation.server_data()
    shift = method.input_shift(server)
    np.testing.assert_allclose(shift, server.public_features.reshape(len(server.public_features), -1).mean(axis=0),
                               rtol=1e-6, atol=1e-9)
    transport = _Watching(small_federation, seed=0, noise_seed=1)
    outcome = method.run(server, transport, PrivacyLedger())
    assert len(transport.trainings) == 2
    assert all(training.input_shift == shift for training in transport.trainings)
    student = outcome.student
    assert isinstance(student, ShiftedInput)
    np.testing.assert_allclose(student.shift.numpy(), np.asarray(shift, np.float32))
    x = small_federation.test.features[:6]
    torch.testing.assert_close(student(torch.as_tensor(x)), student.model(torch.as_tensor(shift_features(x, shift))))
    assert outcome.details["center_inputs"] is True
    assert outcome.details["input_centring"] == "public pool mean"


@pytest.mark.parametrize("name", METHODS)
def test_no_center_inputs_trains_and_releases_raw_inputs(small_federation, name):
    method = METHODS[name](center_inputs=False)
    server = small_federation.server_data()
    assert method.input_shift(server) is None
    transport = _Watching(small_federation, seed=0, noise_seed=1)
    outcome = method.run(server, transport, PrivacyLedger())
    assert all(training.input_shift is None for training in transport.trainings)
    assert not isinstance(outcome.student, ShiftedInput)
    assert (outcome.details["center_inputs"], outcome.details["input_centring"]) == (False, None)


@pytest.mark.parametrize("name", METHODS)
def test_centring_costs_no_privacy(small_federation, name):
    """The same planned events, and the same ε charged, with and without the shift."""
    centred, raw = METHODS[name](center_inputs=True), METHODS[name](center_inputs=False)
    assert centred.planned_events() == raw.planned_events()
    assert centred.round_events() == raw.round_events()
    charged = []
    for method in (centred, raw):
        ledger = PrivacyLedger()
        method.run(small_federation.server_data(), LocalTransport(small_federation, seed=0, noise_seed=1), ledger)
        charged.append(tuple(epsilon_for(ledger.event(level), 1e-3) for level in ("agent", "instance")))
    assert charged[0] == charged[1]


def test_the_shift_goes_down_with_theta_in_the_secure_sum(small_federation):
    """DP-FedAvg's distributed noise sends θ and the shift to all N agents every round."""
    method = DpFedAvg(sigma=1.0, rounds=2, local_steps=1, model="logistic", noise_seed=1, center_inputs=True)
    transport = LocalTransport(small_federation, seed=0, noise_seed=1)
    outcome = method.run(small_federation.server_data(), transport, PrivacyLedger())
    d, n = outcome.details["model_floats"], small_federation.num_agents
    shift = int(np.prod(small_federation.example_shape))
    assert transport.communication.upload_floats == 2 * n * d
    assert transport.communication.download_floats == 2 * n * (d + shift)


@pytest.mark.parametrize("method", ["fedavg", "dp-fedavg", "dp-fedsgd"])
def test_the_flag_reaches_the_method_and_is_validated(method):
    from fedvote.methods import METHODS as REGISTRY

    cls = REGISTRY[method]
    privacy = PrivacyConfig(sigma=1.0)
    default = cls.from_config(RunConfig(method=method, privacy=privacy), sigma=1.0, queries=1, min_responders=1)
    assert default.center_inputs is DEFAULT_ON[method]
    for value in (False, True):
        given = RunConfig(method=method, privacy=privacy, options={"center_inputs": value})
        assert cls.from_config(given, sigma=1.0, queries=1, min_responders=1).center_inputs is value
        assert RunConfig.from_dict(given.to_dict()) == given
    with pytest.raises(ConfigError) as error:
        cls.from_config(RunConfig(method=method, privacy=privacy, options={"center_inputs": "yes"}), sigma=1.0,
                        queries=1, min_responders=1)
    assert error.value.argument == "center_inputs"


def test_options_refuse_a_non_boolean_and_centring_is_not_a_prifedsync_override():
    with pytest.raises(ConfigError):
        DpFedAvgOptions(center_inputs=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        FedAvg(center_inputs="no")  # type: ignore[arg-type]
    from fedvote.methods.prifedsync import PriFedSyncOptions

    assert "center_inputs" not in PriFedSyncOptions(center_inputs=False).overrides()


@pytest.mark.parametrize("flag", ["--center-inputs", "--no-center-inputs"])
def test_the_cli_flag_reaches_the_run(capsys, flag):
    import json

    from fedvote.cli import main

    args = ["run", "--method", "fedavg", "--agents", "10", "--rounds", "2", "--local-steps", "1",
            "--gradient-model", "logistic", flag, "--json"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
        raise SystemExit(0)
    assert exit_info.value.code == 0
    result = json.loads(capsys.readouterr().out)
    on = flag == "--center-inputs"
    assert (result["center_inputs"], result["input_centring"]) == (on, "public pool mean" if on else None)
    assert result["config"]["options"]["center_inputs"] is on


def test_public_mean_shift_reads_the_pool_only(small_federation):
    server = small_federation.server_data()
    assert FedAvg(center_inputs=True).input_shift(server) == public_mean_shift(server.public_features)


RUNS = {  # a few rounds of each method on the MLP, the transport's batched clients against its loop
    "fedavg": lambda: FedAvg(rounds=3, sampling_rate=0.5, local_steps=5, model="mlp", noise_seed=1),
    "dp-fedavg": lambda: DpFedAvg(sigma=1.0, rounds=3, sampling_rate=0.5, local_steps=5, model="mlp", noise_seed=1),
    "dp-fedavg server noise": lambda: DpFedAvg(sigma=1.0, rounds=3, sampling_rate=0.5, local_steps=5, model="mlp",
                                               noise="server", noise_seed=1),
    "dp-fedsgd": lambda: DpFedSgd(sigma=1.0, rounds=3, local_steps=2, model="mlp", noise_seed=1),
}


@pytest.mark.parametrize("name", RUNS)
def test_a_run_with_batched_clients_equals_the_per_agent_loop(small_federation, name):
    """Same seeds, same events: the released model of the batched run is the loop's within float32 rounding."""
    students, ledgers = [], []
    for batched in (True, False):
        ledger = PrivacyLedger()
        transport = LocalTransport(small_federation, seed=0, noise_seed=1, batched=batched)
        outcome = RUNS[name]().run(small_federation.server_data(), transport, ledger)
        students.append(torch.cat([p.detach().reshape(-1) for p in outcome.student.parameters()]).numpy())
        ledgers.append(tuple(epsilon_for(ledger.event(level), 1e-3) for level in ("agent", "instance")))
    # three rounds of float32 updates summed into θ: rtol 1e-4, atol 1e-5 (θ's entries are ~0.01-1)
    np.testing.assert_allclose(students[0], students[1], rtol=1e-4, atol=1e-5)
    assert ledgers[0] == ledgers[1]
