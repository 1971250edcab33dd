import jax.numpy as jnp
import numpy as np
import pytest

from tests import reference
from tests.helpers import float32_matmuls
from transformer_jax import ops

# the FFN against float64 at 1e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)


def test_layer_norm_matches_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(2, 5, 7)).astype(np.float32)
    scale, bias = rng.normal(size=7).astype(np.float32), rng.normal(size=7).astype(np.float32)
    got = ops.layer_norm(jnp.asarray(x), jnp.asarray(scale), jnp.asarray(bias), 1e-5)
    assert reference.rel_err(got, reference.layer_norm(x, scale, bias, 1e-5)) < 1e-5


def test_rms_norm_matches_reference():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4, 6)).astype(np.float32)
    scale = rng.normal(size=6).astype(np.float32)
    got = ops.rms_norm(jnp.asarray(x), jnp.asarray(scale), 1e-6)
    assert reference.rel_err(got, reference.rms_norm(x, scale, 1e-6)) < 1e-5


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_ffn_matches_reference(activation):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 8)).astype(np.float32)
    w1, b1 = rng.normal(size=(8, 16)).astype(np.float32), rng.normal(size=16).astype(np.float32)
    w2, b2 = rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32)
    args = [jnp.asarray(a) for a in (x, w1, b1, w2, b2)]
    got = ops.position_wise_ffn(*args, activation=activation)
    want = reference.ffn(x, w1, b1, w2, b2, activation)
    assert reference.rel_err(got, want) < 1e-5


def test_ffn_rejects_unknown_activation():
    x = jnp.ones((1, 1, 2))
    with pytest.raises(ValueError, match="choose one of"):
        ops.position_wise_ffn(x, jnp.ones((2, 2)), None, jnp.ones((2, 2)), None, activation="tanh")


@pytest.mark.parametrize("dim", [32, 7, 1])
def test_sinusoidal_table_matches_formula_for_even_and_odd_d(dim):
    got = ops.sinusoidal_table(60, dim)
    assert got.shape == (60, dim) and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), reference.sinusoidal(60, dim), atol=1e-6)
    assert reference.rel_err(got, reference.sinusoidal(60, dim)) < 1e-5


@pytest.mark.parametrize("dim", [16, 7])
def test_sinusoidal_rows_match_the_float64_formula_at_any_position(dim):
    """Rows computed on the fly, for positions far beyond any table, and at an offset."""
    positions = jnp.array([0, 1, 5, 63, 200, 1000, 1999], jnp.int32)
    got = np.asarray(ops.sinusoidal_rows(positions, dim))
    want = reference.sinusoidal(2000, dim)[np.asarray(positions)]
    np.testing.assert_allclose(got[:5], want[:5], atol=1e-5)  # i·ω exact-ish in float32
    np.testing.assert_allclose(got, want, atol=2e-4)  # float32 rounding of i·ω up to 2000
    np.testing.assert_array_equal(
        np.asarray(ops.sinusoidal_rows(jnp.arange(3, 7), dim)),
        np.asarray(ops.sinusoidal_rows(jnp.arange(10), dim))[3:7],
    )  # an offset sees the same rows: cached decoding equals full recomputation
