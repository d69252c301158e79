"""SimCLR's pieces (Chen, Kornblith, Norouzi, Hinton 2020): the NT-Xent loss and the encoder's shapes."""

import math

import pytest
import torch

from fedvote.models.contrastive import ContrastiveConfig, build_encoder, nt_xent_loss


def _nt_xent_by_hand(z1, z2, tau):
    """Eq. (1) of SimCLR, summed over all 2N views as its Algorithm 1 writes it, by loops."""
    z = torch.cat([z1, z2])
    n = z1.shape[0]
    sim = [[float(torch.dot(a, b) / (a.norm() * b.norm())) for b in z] for a in z]
    total = 0.0
    for i in range(2 * n):
        j = (i + n) % (2 * n)
        denominator = sum(math.exp(sim[i][k] / tau) for k in range(2 * n) if k != i)
        total += -math.log(math.exp(sim[i][j] / tau) / denominator)
    return total / (2 * n)


@pytest.mark.parametrize(("n", "tau"), [(1, 0.5), (3, 0.5), (5, 0.1)])
def test_nt_xent_matches_equation_1_by_hand(n, tau):
    generator = torch.Generator().manual_seed(n)
    z1, z2 = torch.randn(n, 4, generator=generator), torch.randn(n, 4, generator=generator)
    assert float(nt_xent_loss(z1, z2, tau)) == pytest.approx(_nt_xent_by_hand(z1, z2, tau), rel=1e-5)


def test_nt_xent_is_smaller_for_matching_views_than_for_mismatched_ones():
    z = torch.eye(6)  # six orthogonal directions
    matched = nt_xent_loss(z, z, 0.5)
    mismatched = nt_xent_loss(z, z.roll(1, dims=0), 0.5)
    assert float(matched) < float(mismatched)


@pytest.mark.parametrize(("shape", "grid"), [((1, 8, 8), 2), ((1, 28, 28), 4), ((3, 32, 20), (4, 3))])
def test_the_encoder_maps_images_to_the_asked_dimension_over_a_coarse_grid(shape, grid):
    encoder = build_encoder(shape, 7, ContrastiveConfig())
    pooled = encoder[-3](encoder[:-3](torch.zeros(2, *shape)))  # (2, 128, gh, gw)
    expected = grid if isinstance(grid, tuple) else (grid, grid)
    assert tuple(pooled.shape[2:]) == expected
    assert encoder(torch.zeros(2, *shape)).shape == (2, 7)
