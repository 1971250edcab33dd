import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import reference
from tests.helpers import float32_matmuls
from transformer_jax import ops

# float64 references at 1e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)


def _qkv(seed, b=2, h=3, t=4, s=5, k=8):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=shape).astype(np.float32)
        for shape in [(b, h, t, k), (b, h, s, k), (b, h, s, k)]
    )


def test_scaled_dot_product_matches_reference():
    q, k, v = _qkv(0)
    mask = ops.valid_length_mask(jnp.array([5, 2]), 5)
    out, w = ops.scaled_dot_product_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), mask)
    want_out, want_w = reference.dot_attention(q, k, v, np.asarray(mask))
    assert out.shape == (2, 3, 4, 8) and w.shape == (2, 3, 4, 5)
    assert reference.rel_err(out, want_out) < 1e-5
    assert reference.rel_err(w, want_w) < 1e-5


def test_book_example_d2l_10_3():
    # d2l §10.3.2: queries (2,1,2), keys ones (2,10,2), values arange(40)/(2,10,4),
    # valid_lens [2, 6]: each output is the mean of the first valid values.
    q = jnp.ones((2, 1, 1, 2))
    k = jnp.ones((2, 1, 10, 2))
    v = jnp.tile(jnp.arange(40, dtype=jnp.float32).reshape(1, 10, 4), (2, 1, 1))[:, None]
    mask = ops.valid_length_mask(jnp.array([2, 6]), 10)
    out, _ = ops.scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_allclose(np.asarray(out[:, 0, 0]), [[2, 3, 4, 5], [10, 11, 12, 13]])


def test_additive_scores_match_reference():
    rng = np.random.default_rng(1)
    qf = rng.normal(size=(2, 3, 4, 6)).astype(np.float32)
    kf = rng.normal(size=(2, 3, 5, 6)).astype(np.float32)
    for w_v in (rng.normal(size=(3, 6)), rng.normal(size=(6,))):
        w_v = w_v.astype(np.float32)
        got = ops.additive_scores(jnp.asarray(qf), jnp.asarray(kf), jnp.asarray(w_v))
        assert reference.rel_err(got, reference.additive_scores(qf, kf, w_v)) < 1e-5


def test_attention_dropout_needs_rng_and_is_deterministic_when_asked():
    q, k, v = (jnp.asarray(a) for a in _qkv(2))
    det, _ = ops.scaled_dot_product_attention(q, k, v, None, dropout_rate=0.5, deterministic=True)
    ref, _ = ops.scaled_dot_product_attention(q, k, v, None)
    np.testing.assert_array_equal(np.asarray(det), np.asarray(ref))
    with pytest.raises(ValueError, match="needs an rng"):
        ops.scaled_dot_product_attention(q, k, v, None, dropout_rate=0.5, deterministic=False)
    drop, w = ops.scaled_dot_product_attention(
        q, k, v, None, dropout_rate=0.5, dropout_rng=jax.random.key(0), deterministic=False
    )
    assert not np.allclose(np.asarray(drop), np.asarray(ref))
    # Weights are returned before dropout (for visualisation): still a distribution.
    np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, rtol=1e-6)


def test_dropout_keeps_expectation():
    x = jnp.ones((200, 200))
    y = ops.dropout(x, 0.3, jax.random.key(0), deterministic=False)
    frac_zero = float((y == 0).mean())
    assert abs(frac_zero - 0.3) < 0.01
    assert abs(float(y.mean()) - 1.0) < 0.02


def test_dropout_mask_is_the_keys_bernoulli_draw_for_typed_and_raw_keys():
    """The key is materialised before the mask (an optimization barrier against XLA
    recomputing its derivation per element); the draw itself must not change."""
    x = jnp.arange(1.0, 61.0).reshape(3, 4, 5)

    @jax.jit
    def both(seed):
        key = jax.random.fold_in(jax.random.key(7), seed)  # a derived key, as in training
        want = jnp.where(jax.random.bernoulli(key, 0.75, x.shape), x / 0.75, 0.0)
        return ops.dropout(x, 0.25, key, deterministic=False), want

    got, want = both(3)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    raw = jax.random.PRNGKey(5)  # legacy uint32 keys still work
    np.testing.assert_array_equal(
        np.asarray(ops.dropout(x, 0.25, raw, deterministic=False)),
        np.asarray(jnp.where(jax.random.bernoulli(raw, 0.75, x.shape), x / 0.75, 0.0)),
    )
