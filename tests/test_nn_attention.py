import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import reference
from tests.helpers import float32_matmuls
from transformer_jax import ops
from transformer_jax.nn import MultiHeadAttention
from transformer_jax.testing import tiny_config

# a float64 reference and Flax's attention at 1e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)


def _cfg(**kw):
    return tiny_config(10, 10, **{"model_dim": 24, "ffn_dim": 8, **kw})


def _inputs(seed=0, b=2, t=5, s=7, d=24):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32), jnp.asarray(
        rng.normal(size=(b, s, d)), jnp.float32
    )


def test_equals_flax_multi_head_dot_product_attention_with_same_weights():
    x_q, x_kv = _inputs()
    mask = ops.valid_length_mask(jnp.array([7, 3]), 7)  # (B, 1, 1, S)
    ours = MultiHeadAttention(_cfg())
    params = ours.init(jax.random.key(0), x_q, x_kv, mask)["params"]
    theirs = nn.MultiHeadDotProductAttention(
        num_heads=4, qkv_features=24, out_features=24, deterministic=True, dropout_rate=0.0
    )
    # Same parameter tree: query/key/value (D, H, K) + (H, K), out (H, K, D) + (D,).
    flax_shapes = jax.tree.map(jnp.shape, theirs.init(jax.random.key(1), x_q, x_kv, x_kv)["params"])
    assert jax.tree.map(jnp.shape, params) == flax_shapes
    got = ours.apply({"params": params}, x_q, x_kv, mask)
    want = theirs.apply({"params": params}, x_q, x_kv, x_kv, mask=mask)
    assert reference.rel_err(got, want) < 1e-5


def test_matches_float64_reference_with_heads_as_chunks_of_projections():
    x_q, x_kv = _inputs(1)
    mha = MultiHeadAttention(_cfg())
    p = mha.init(jax.random.key(0), x_q, x_kv)["params"]
    p = jax.tree.map(lambda a: a + 0.1 * np.random.default_rng(2).normal(size=a.shape), p)
    p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), p)
    got = mha.apply({"params": p}, x_q, x_kv)

    # The book's recipe: full (D, D) projections, then split features into H chunks.
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    d, h, k = 24, 4, 6

    def project(x, name):
        w = f64(p[name]["kernel"]).reshape(d, h * k)
        y = f64(x) @ w + f64(p[name]["bias"]).reshape(h * k)  # (B, T, D)
        return y.reshape(*y.shape[:2], h, k).transpose(0, 2, 1, 3)  # (B, H, T, K)

    out, _ = reference.dot_attention(
        project(x_q, "query"), project(x_kv, "key"), project(x_kv, "value")
    )
    concat = out.transpose(0, 2, 1, 3).reshape(2, 5, d)  # (B, T, D)
    want = concat @ f64(p["out"]["kernel"]).reshape(d, d) + f64(p["out"]["bias"])
    assert reference.rel_err(got, want) < 1e-5


def test_rejects_model_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"model_dim=24 is not divisible by model.num_heads=5"):
        _cfg(num_heads=5)


def test_attention_weights_are_sown_for_visualisation():
    x_q, x_kv = _inputs(3)
    mha = MultiHeadAttention(_cfg())
    variables = mha.init(jax.random.key(0), x_q, x_kv)
    mask = ops.valid_length_mask(jnp.array([7, 2]), 7)
    _, state = mha.apply(variables, x_q, x_kv, mask, mutable=["intermediates"])
    (w,) = state["intermediates"]["attention_weights"]
    assert w.shape == (2, 4, 5, 7)
    np.testing.assert_array_equal(np.asarray(w[1, :, :, 2:]), 0.0)
    np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, rtol=1e-5)


def test_additive_scorer_runs_and_respects_mask():
    x_q, x_kv = _inputs(4)
    mha = MultiHeadAttention(_cfg(attention_kind="additive", additive_dim=5))
    variables = mha.init(jax.random.key(0), x_q, x_kv)
    assert variables["params"]["additive_query"].shape == (4, 6, 5)
    mask = ops.valid_length_mask(jnp.array([7, 2]), 7)
    x_kv2 = x_kv.at[1, 2:].set(100.0)  # only masked positions change
    a = mha.apply(variables, x_q, x_kv, mask)
    b = mha.apply(variables, x_q, x_kv2, mask)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


@pytest.mark.parametrize("attention_kind", ["dot", "additive"])
def test_queries_sharing_a_memory_row_equal_a_tiled_memory(attention_kind):
    """Beam search keeps one memory row per sentence for its W hypotheses: B·W query rows
    against B memory rows must give what B·W rows against a W-times tiled memory give,
    outputs and the sown weights alike."""
    b, w, s = 2, 3, 7
    x_q, memory = _inputs(seed=5, b=b * w, t=1, s=s)
    memory = memory[:b]  # (B, S, D)
    src_len = jnp.array([7, 4])
    cfg = _cfg(attention_kind=attention_kind)
    params = MultiHeadAttention(cfg).init(jax.random.key(1), x_q[:b], memory)["params"]
    tiled = jnp.repeat(memory, w, axis=0)  # (B·W, S, D): rows b·W … b·W + W − 1
    mask_tiled = ops.valid_length_mask(jnp.repeat(src_len, w), s)
    want, want_vars = MultiHeadAttention(cfg).apply(
        {"params": params}, x_q, tiled, mask_tiled, mutable=["intermediates"]
    )
    got, got_vars = MultiHeadAttention(cfg).apply(
        {"params": params},
        x_q,
        memory,
        ops.valid_length_mask(src_len, s),
        mutable=["intermediates"],
    )
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    (w_got,) = got_vars["intermediates"]["attention_weights"]
    (w_want,) = want_vars["intermediates"]["attention_weights"]
    assert w_got.shape == (b * w, 4, 1, s)
    np.testing.assert_allclose(np.asarray(w_got), np.asarray(w_want), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="do not share"):
        MultiHeadAttention(cfg).apply({"params": params}, x_q[:5], memory)
