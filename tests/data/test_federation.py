import numpy as np
import pytest

from fedvote.data.datasets import available_datasets, load_dataset
from fedvote.data.federation import build_federation
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError


def test_digits_is_bundled_and_image_shaped(digits):
    assert "digits" in available_datasets()
    assert len(digits) == 1797
    assert digits.example_shape == (1, 8, 8)
    assert digits.num_classes == 10
    assert digits.features.dtype == np.float32
    assert 0.0 <= digits.features.min() and digits.features.max() <= 1.0


def test_unknown_dataset_names_the_argument():
    with pytest.raises(ConfigError) as error:
        load_dataset("imagenet")
    assert error.value.argument == "dataset"


def test_federation_splits_are_disjoint_and_sized_by_fractions(digits):
    fed = build_federation(digits, num_agents=7, partition=PartitionSpec(), public_fraction=0.2, test_fraction=0.1)
    n = len(digits)
    assert len(fed.public) == round(0.2 * n)
    assert len(fed.test) == round(0.1 * n)
    assert sum(len(a) for a in fed.agents) == n - len(fed.public) - len(fed.test)
    # Disjoint: no image appears in two parts (digits has a few exact duplicates, so
    # compare the multiset of rows against the dataset's).
    rows = np.concatenate([fed.public.features, fed.test.features] + [a.features for a in fed.agents])
    assert rows.shape[0] == n
    assert np.array_equal(np.sort(rows.reshape(n, -1), axis=0), np.sort(digits.features.reshape(n, -1), axis=0))


def test_server_data_carries_no_pool_labels(small_federation):
    server = small_federation.server_data()
    assert not hasattr(server, "public_labels")
    assert server.public_features.shape[0] == len(small_federation.public)
    assert server.num_classes == 10


def test_federation_is_deterministic_under_a_seed(digits):
    a = build_federation(digits, num_agents=5, partition=PartitionSpec("dirichlet"), seed=3)
    b = build_federation(digits, num_agents=5, partition=PartitionSpec("dirichlet"), seed=3)
    assert np.array_equal(a.public.labels, b.public.labels)
    assert all(np.array_equal(x.labels, y.labels) for x, y in zip(a.agents, b.agents, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"public_fraction": 0.0}, "public_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"public_fraction": 0.6, "test_fraction": 0.3, "agent_fraction": 0.3}, "public_fraction"),
        ({"public_fraction": 0.6, "test_fraction": 0.5}, "agent_fraction"),
        ({"num_agents": 5000}, "agents"),
    ],
)
def test_impossible_federations_name_the_argument(digits, kwargs, argument):
    arguments = {"num_agents": 5, "partition": PartitionSpec()} | kwargs
    with pytest.raises(ConfigError) as error:
        build_federation(digits, **arguments)
    assert error.value.argument == argument


@pytest.mark.parametrize("fraction", [1.5, -1.0, 0.0, float("nan")])
@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist", "digits"])
def test_a_bad_test_fraction_is_refused_before_loading_even_where_it_is_unused(dataset, fraction):
    """Datasets with an official test split ignore test_fraction, yet a plainly invalid value is refused."""
    from fedvote.config import FederationConfig, RunConfig
    from fedvote.runner import make_federation

    config = RunConfig(federation=FederationConfig(dataset=dataset, data_dir="/nonexistent", test_fraction=fraction))
    with pytest.raises(ConfigError, match=r"^test_fraction: must lie in \(0, 1\)"):
        make_federation(config)
