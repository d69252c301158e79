"""An agent's local update with the public input shift: the shift reaches its training, nothing else changes."""

import numpy as np
import pytest
import torch

from fedvote.agents.agent import Agent
from fedvote.agents.local_updates import local_update
from fedvote.data.federation import LabeledData
from fedvote.models.local_training import DpSgdSpec, LocalTraining, flat_parameters
from fedvote.models.shifted_input import public_mean_shift, shift_features
from fedvote.models.zoo import build_model

TRAININGS = {
    "sgd (fedavg)": {"steps": 3, "learning_rate": 0.5, "batch_size": 8},
    "clipped and noised (dp-fedavg)": {"steps": 3, "learning_rate": 0.5, "batch_size": 8, "clip_norm": 0.05,
                                       "noise_std": 0.01},
    "dp-sgd (dp-fedsgd)": {"steps": 2, "learning_rate": 1.0,
                           "dp_sgd": DpSgdSpec(sampling_rate=0.5, noise_multiplier=1.0, max_grad_norm=1.0)},
}


def _agent(data, num_classes):
    return Agent(agent_id=3, data=data, public_features=np.zeros((0, 1, 8, 8), np.float32),
                 num_classes=num_classes, noise_rng=np.random.default_rng(7), seed=5)


@pytest.mark.parametrize("settings", TRAININGS.values(), ids=TRAININGS.keys())
def test_an_update_with_the_shift_equals_one_on_pre_shifted_records(small_federation, settings):
    """Agent-side centring is exactly training on x − shift: same update, same noise, same clipping."""
    data = small_federation.agents[3]
    classes = small_federation.num_classes
    shift = public_mean_shift(small_federation.public.features)
    model = build_model("logistic", small_federation.example_shape, classes, generator=torch.Generator().manual_seed(0))
    theta = flat_parameters(model)
    shifted = LocalTraining(model="logistic", input_shift=shift, **settings)
    raw = LocalTraining(model="logistic", **settings)
    pre_shifted = LabeledData(shift_features(data.features, shift), data.labels)
    with_shift = local_update(_agent(data, classes), theta, shifted)
    on_pre_shifted = local_update(_agent(pre_shifted, classes), theta, raw)
    np.testing.assert_array_equal(with_shift, on_pre_shifted)
    without = local_update(_agent(data, classes), theta, raw)
    assert not np.allclose(with_shift, without)  # the shift did reach the training
    if shifted.clip_norm is not None:
        assert np.linalg.norm(with_shift - np.random.default_rng(7).normal(0, 0.01, theta.shape)) <= 0.05 + 1e-6


def test_the_agents_records_are_left_as_they_were(small_federation):
    data = small_federation.agents[2]
    before = data.features.copy()
    shift = public_mean_shift(small_federation.public.features)
    model = build_model("logistic", small_federation.example_shape, 10, generator=torch.Generator().manual_seed(0))
    local_update(_agent(data, 10), flat_parameters(model),
                 LocalTraining(model="logistic", steps=1, learning_rate=0.1, input_shift=shift))
    np.testing.assert_array_equal(data.features, before)


def test_a_non_finite_shift_is_refused():
    from fedvote.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        LocalTraining(model="logistic", steps=1, learning_rate=0.1, input_shift=(0.0, float("nan")))
    assert error.value.argument == "input_shift"
    assert LocalTraining(model="logistic", steps=1, learning_rate=0.1, input_shift=(0.0, 1.0)).shift_floats == 2
    assert LocalTraining(model="logistic", steps=1, learning_rate=0.1).shift_floats == 0
