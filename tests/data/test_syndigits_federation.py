"""Colour and grey digit domains in one federation: mnist,syndigits -> usps."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.data.channels import light_ink, luminance
from fedvote.data.datasets import resize_images
from fedvote.data.federation import build_domain_federation
from fedvote.data.syndigits import make_syndigits
from fedvote.errors import ConfigError


@pytest.fixture(scope="module")
def federation(mnist_sample, usps_sample, usps_sample_test):
    synthetic = make_syndigits(140, 2)
    return synthetic, build_domain_federation(
        [synthetic, mnist_sample], usps_sample, num_agents=10, agents_per_source=[7, 3],
        target_test=usps_sample_test, records_per_agent=20, framing="auto", seed=0,
    )


def test_colour_domains_become_grey_light_ink_and_are_resized_not_framed(federation, mnist_sample):
    synthetic, fed = federation
    assert fed.example_shape == (1, 32, 32)  # MNIST framing at the largest side (syndigits' 32)
    assert fed.agent_domains == ("syndigits",) * 7 + ("mnist",) * 3
    assert fed.dataset_name == "mnist+syndigits->usps"
    # Every syndigits record is exactly light_ink(luminance(.)) of a generated image (32x32: no resize).
    expected = {row.tobytes() for row in light_ink(luminance(synthetic.features))}
    for agent in fed.agents[:7]:
        assert agent.features.shape[1:] == (1, 32, 32) and len(agent) == 20
        assert all(row.tobytes() in expected for row in agent.features)
    # The grey domains are still MNIST-framed (an MNIST record's ink box is 23 of 32 pixels).
    ink = fed.agents[7].features[0, 0] > 0.1 * fed.agents[7].features[0, 0].max()
    assert max(np.ptp(np.flatnonzero(ink.any(0))), np.ptp(np.flatnonzero(ink.any(1)))) + 1 == 23


def test_light_ink_inverts_dark_ink_and_stretches():
    dark_on_light = np.full((1, 1, 12, 12), 0.8, dtype=np.float32)
    dark_on_light[0, 0, 4:8, 4:8] = 0.2
    out = light_ink(dark_on_light)
    assert out[0, 0, 0, 0] == 0.0 and out[0, 0, 5, 5] == pytest.approx(1.0)
    light_on_dark = 1.0 - dark_on_light
    np.testing.assert_allclose(light_ink(light_on_dark), out, atol=1e-6)
    with pytest.raises(ConfigError):
        light_ink(np.zeros((1, 3, 12, 12), dtype=np.float32))


def test_all_colour_federations_stay_colour():
    train, test = make_syndigits(60, 0), make_syndigits(30, 1, split="test")
    other = make_syndigits(40, 5)
    other = type(other)(name="npz:other.npz", features=other.features, labels=other.labels,
                        class_names=other.class_names)
    fed = build_domain_federation([other], train, num_agents=2, target_test=test, seed=0)
    assert fed.example_shape == (3, 32, 32) and fed.agents[0].features.shape[1] == 3


def test_the_converted_domain_is_still_far_from_mnist(mnist_sample, mnist_sample_test):
    # The federation's view of syndigits (grey, light ink, resized to MNIST's 28x28) stays a
    # different domain for a model trained on MNIST: nearest-centroid accuracy drops sharply.
    centroids = np.stack([mnist_sample.features[mnist_sample.labels == c].mean(0).ravel() for c in range(10)])
    synthetic = make_syndigits(400, 7)
    grey = resize_images(light_ink(luminance(synthetic.features)), (28, 28))

    def accuracy(x, y):
        distances = ((x.reshape(len(x), -1)[:, None, :] - centroids[None]) ** 2).sum(-1)
        return float(np.mean(distances.argmin(1) == y))

    on_mnist = accuracy(mnist_sample_test.features, mnist_sample_test.labels)
    assert on_mnist - accuracy(grey, synthetic.labels) >= 0.2
