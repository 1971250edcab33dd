import jax
import jax.numpy as jnp
import numpy as np

from tests import reference
from transformer_jax import ops


def test_masked_softmax_matches_float64_reference_per_sequence_lengths():
    x = np.random.default_rng(0).normal(size=(3, 2, 4, 6)).astype(np.float32)
    lens = jnp.array([6, 3, 1])
    mask = ops.valid_length_mask(lens, 6)
    got = np.asarray(ops.masked_softmax(jnp.asarray(x), mask))
    want = reference.softmax(x, np.asarray(mask))
    assert reference.rel_err(got, want) < 1e-5
    # Masked keys get exactly zero weight, rows sum to one.
    assert np.all(got[1, :, :, 3:] == 0.0) and np.all(got[2, :, :, 1:] == 0.0)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-6)


def test_masked_softmax_per_query_lengths():
    x = np.random.default_rng(1).normal(size=(2, 1, 3, 3)).astype(np.float32)
    lens = jnp.array([[1, 2, 3], [1, 1, 2]])  # (B, T)
    mask = ops.valid_length_mask(lens, 3)
    got = np.asarray(ops.masked_softmax(jnp.asarray(x), mask))
    assert reference.rel_err(got, reference.softmax(x, np.asarray(mask))) < 1e-5
    assert got[1, 0, 1, 1] == 0.0 and got[1, 0, 1, 0] == 1.0


def test_fully_masked_row_is_zero_not_nan_forward_and_backward():
    x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 1, 2, 4)), jnp.float32)
    mask = ops.valid_length_mask(jnp.array([0, 2]), 4)
    w = ops.masked_softmax(x, mask)
    assert not np.isnan(np.asarray(w)).any()
    np.testing.assert_array_equal(np.asarray(w[0]), 0.0)
    g = jax.grad(lambda s: (ops.masked_softmax(s, mask) ** 2).sum())(x)
    assert np.isfinite(np.asarray(g)).all()


def test_unmasked_softmax_reference_and_bfloat16():
    x = np.random.default_rng(3).normal(size=(4, 7)).astype(np.float32) * 10
    assert reference.rel_err(ops.softmax(jnp.asarray(x)), reference.softmax(x)) < 1e-6
    w = ops.masked_softmax(jnp.asarray(x, jnp.bfloat16), jnp.ones((4, 7), bool))
    assert w.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(w, np.float32), reference.softmax(x), atol=1e-2)


def _finite_difference_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of a float64 scalar function, one coordinate at a time."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[idx] = eps
        grad[idx] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def test_softmax_gradient_matches_float64_finite_differences_with_masks():
    """The closed-form derivative (reverse mode: w ⊙ (g − Σ g·w)) against central
    differences of the float64 reference, with per-sequence lengths including a fully
    masked row (gradient 0)."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 2, 3, 5))
    g = rng.normal(size=x.shape)
    mask = np.asarray(ops.valid_length_mask(jnp.array([5, 2, 0]), 5))

    def loss64(s):
        return float(np.sum(reference.softmax(s, mask) * g))

    want = _finite_difference_grad(loss64, x)
    got = jax.grad(lambda s: jnp.sum(ops.masked_softmax(s, mask) * jnp.asarray(g, jnp.float32)))(
        jnp.asarray(x, jnp.float32)
    )
    assert reference.rel_err(np.asarray(got), want) < 1e-5
    np.testing.assert_array_equal(np.asarray(got)[1, ..., 2:], 0.0)  # masked keys
    np.testing.assert_array_equal(np.asarray(got)[2], 0.0)  # the fully masked sequence
    # The unmasked softmax has the same rule.
    want_plain = _finite_difference_grad(lambda s: float(np.sum(reference.softmax(s) * g)), x)
    got_plain = jax.grad(lambda s: jnp.sum(ops.softmax(s) * jnp.asarray(g, jnp.float32)))(
        jnp.asarray(x, jnp.float32)
    )
    assert reference.rel_err(np.asarray(got_plain), want_plain) < 1e-5


def test_bfloat16_softmax_gradient_keeps_dtype_and_float32_statistics():
    rng = np.random.default_rng(5)
    x = np.asarray(jnp.asarray(rng.normal(size=(2, 4, 6)), jnp.bfloat16), np.float64)
    g = rng.normal(size=x.shape)
    mask = np.asarray(ops.valid_length_mask(jnp.array([6, 3]), 6))[:, 0]  # (2, 1, 6)
    d = jax.grad(lambda s: jnp.sum(ops.masked_softmax(s, mask).astype(jnp.float32) * g))(
        jnp.asarray(x, jnp.bfloat16)
    )
    assert d.dtype == jnp.bfloat16
    w = reference.softmax(x, mask)
    want = w * (g - np.sum(g * w, axis=-1, keepdims=True))
    assert reference.rel_err(np.asarray(d, np.float64), want) < 1e-2


def test_softmax_forward_mode_matches_central_differences():
    """The softmax's rule is a JVP, so forward mode (jax.jvp, jax.jacfwd) works too."""
    rng = np.random.default_rng(6)
    x, v = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
    mask = np.asarray(ops.valid_length_mask(jnp.array([5, 2]), 5))[:, 0]  # (2, 1, 5)
    _, tangent = jax.jvp(
        lambda s: ops.masked_softmax(s, mask),
        (jnp.asarray(x, jnp.float32),),
        (jnp.asarray(v, jnp.float32),),
    )
    eps = 1e-6
    want = (reference.softmax(x + eps * v, mask) - reference.softmax(x - eps * v, mask)) / (2 * eps)
    assert reference.rel_err(np.asarray(tangent), want) < 1e-5
