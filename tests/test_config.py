import pytest

from fedvote.config import DEFAULT_EPSILON, FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.models.training import TrainingConfig


def test_config_round_trips_through_its_dict():
    config = RunConfig(
        federation=FederationConfig(agents=7, partition=PartitionSpec("dirichlet", alpha=0.3)),
        privacy=PrivacyConfig(sigma=3.0, delta=1e-5, accountant="rdp", min_responders=5),
        teacher=TrainingConfig(model="cnn", epochs=3),
        queries=20,
        seed=9,
    )
    assert RunConfig.from_dict(config.to_dict()) == config


def test_default_privacy_is_calibrated_to_the_default_epsilon():
    assert PrivacyConfig().target_epsilon == DEFAULT_EPSILON
    assert PrivacyConfig(epsilon=2.0).target_epsilon == 2.0
    assert PrivacyConfig(sigma=0.0).target_epsilon is None


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: PrivacyConfig(accountant="moments"), "accountant"),
        (lambda: PrivacyConfig(min_responders=0), "min_responders"),
        (lambda: RunConfig(method="dp-magic"), "method"),
        (lambda: RunConfig(queries=0), "queries"),
        (lambda: TrainingConfig(model="resnet"), "model"),
        (lambda: TrainingConfig(epochs=0), "epochs"),
        (lambda: TrainingConfig(learning_rate=0.0), "learning_rate"),
    ],
)
def test_bad_configs_name_the_argument(make, argument):
    with pytest.raises(ConfigError) as error:
        make()
    assert error.value.argument == argument
