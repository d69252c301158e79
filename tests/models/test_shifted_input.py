"""The public input shift: computed from the pool alone, subtracted in any input shape, carried by the model."""

import numpy as np
import pytest
import torch

from fedvote.models.shifted_input import ShiftedInput, public_mean_shift, shift_features
from fedvote.models.zoo import build_model


def test_public_mean_shift_is_the_flattened_pool_mean():
    rng = np.random.default_rng(0)
    pool = rng.random((30, 1, 4, 4)).astype(np.float32)
    shift = public_mean_shift(pool)
    assert isinstance(shift, tuple) and len(shift) == 16
    np.testing.assert_allclose(shift, pool.reshape(30, -1).astype(np.float64).mean(axis=0), rtol=0, atol=1e-12)
    assert public_mean_shift(np.zeros((0, 1, 4, 4), np.float32)) is None


def test_shift_features_keeps_shape_and_dtype_and_refuses_a_wrong_length():
    x = np.arange(2 * 1 * 2 * 3, dtype=np.float32).reshape(2, 1, 2, 3)
    shift = tuple(float(v) for v in range(6))
    shifted = shift_features(x, shift)
    assert shifted.shape == x.shape and shifted.dtype == np.float32
    np.testing.assert_array_equal(shifted.reshape(2, -1), x.reshape(2, -1) - np.arange(6))
    assert shift_features(x, None) is x
    with pytest.raises(ValueError, match="5 entries"):
        shift_features(x, shift[:5])


@pytest.mark.parametrize("name", ["logistic", "mlp", "cnn"])
def test_the_released_model_sees_what_the_agents_trained_on(name):
    """ShiftedInput(shift, m)(x) = m(x − shift) for every architecture, whatever shape x comes in."""
    shape = (1, 8, 8)
    model = build_model(name, shape, 10, generator=torch.Generator().manual_seed(0)).eval()
    rng = np.random.default_rng(1)
    x = rng.random((5, *shape)).astype(np.float32)
    shift = tuple(float(v) for v in rng.random(64))
    wrapped = ShiftedInput(shift, model).eval()
    expected = model(torch.as_tensor(shift_features(x, shift)))
    torch.testing.assert_close(wrapped(torch.as_tensor(x)), expected)
    assert not torch.allclose(wrapped(torch.as_tensor(x)), model(torch.as_tensor(x)))  # the shift is applied
    if name != "cnn":  # perceptrons also take flattened records
        torch.testing.assert_close(wrapped(torch.as_tensor(x.reshape(5, -1))), expected)
    assert [n for n, _ in wrapped.named_parameters()] == [f"model.{n}" for n, _ in model.named_parameters()]
