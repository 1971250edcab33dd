"""nn.Einsum and ops.dense: the one matmul with a weight (cast, float32 accumulation, bias),
against float64 formulas; the initialisation and the parameter tree checkpoints hold."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from tests import reference
from transformer_jax import ops
from transformer_jax.nn import Einsum, ModelConfig, MultiHeadAttention, Transformer


@pytest.fixture(autouse=True)
def _float32_matmuls():
    """Compared with float64 at 1e-5: float32 matmuls on every backend (TF32 on GPUs)."""
    with jax.default_matmul_precision("float32"):
        yield


# spec, x shape, kernel shape, the bias as the output broadcasts it
CASES = [
    ("BTD,DHK->BHTK", (2, 5, 6), (6, 3, 4), (1, 3, 1, 4)),  # a head projection
    ("BHTK,HKD->BTD", (2, 3, 5, 4), (3, 4, 6), (1, 1, 6)),  # heads back to D
    ("BTD,DV->BTV", (2, 5, 6), (6, 7), (1, 1, 7)),  # the untied output
]


# A model with every kind of weight: biases, the additive scorer, an untied output.
ADDITIVE = ModelConfig(
    src_vocab_size=11,
    tgt_vocab_size=13,
    num_encoder_layers=1,
    num_decoder_layers=1,
    model_dim=8,
    num_heads=2,
    ffn_dim=16,
    attention_kind="additive",
    additive_dim=3,
)


def _random(shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("spec,x_shape,w_shape,bias_view", CASES)
def test_einsum_is_the_einsum_plus_bias_of_float64(spec, x_shape, w_shape, bias_view):
    layer = Einsum(spec, w_shape, jnp.float32, use_bias=True)
    x = _random(x_shape, 0)
    params = layer.init(jax.random.key(0), x)["params"]
    assert {k: v.shape for k, v in params.items()} == {
        "kernel": w_shape,
        "bias": tuple(n for n in bias_view if n > 1),
    }
    kernel, bias = _random(w_shape, 1), _random(params["bias"].shape, 2)  # bias: not zeros
    got = layer.apply({"params": {"kernel": kernel, "bias": bias}}, x)
    want = np.einsum(spec, x.astype(np.float64), kernel.astype(np.float64))
    want = want + bias.reshape(bias_view)
    assert got.dtype == jnp.float32 and reference.rel_err(got, want) < 1e-5


@pytest.mark.parametrize(
    "spec,shape,glorot",
    [
        ("BTD,DHK->BHTK", (6, 3, 4), nn.initializers.xavier_uniform(in_axis=0, out_axis=(1, 2))),
        ("BHTK,HKD->BTD", (3, 4, 6), nn.initializers.xavier_uniform(in_axis=(0, 1), out_axis=2)),
        ("BTD,DV->BTV", (6, 7), nn.initializers.xavier_uniform()),
    ],
)
def test_default_init_is_glorot_over_the_contracted_and_output_axes(spec, shape, glorot):
    """The same draw as the projections' explicit initialisers had: a seed keeps its model."""

    class Explicit(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.param("kernel", glorot, shape, jnp.float32)

    x = jnp.ones((2, 5, 6) if spec.startswith("BTD") else (2, 3, 5, 4))
    key = jax.random.key(3)
    got = Einsum(spec, shape, jnp.float32).init(key, x)["params"]["kernel"]
    np.testing.assert_array_equal(got, Explicit().init(key, x)["params"]["kernel"])


def test_bfloat16_rounds_the_operands_and_accumulates_in_float32():
    """x and the float32 kernel are cast to bfloat16; the products are summed in float32 (a
    bfloat16 sum of 256 terms would be off by ~1e-2 relative) and the bias added before the
    one rounding."""
    x, w, b = _random((2, 3, 256), 4), _random((256, 5), 5), _random((5,), 6)
    bf16 = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16), np.float64)  # noqa: E731
    want = np.einsum("BTD,DV->BTV", bf16(x), bf16(w)) + b
    f32 = ops.dense("BTD,DV->BTV", x, w, b, dtype=jnp.bfloat16, out_dtype=jnp.float32)
    assert f32.dtype == jnp.float32 and reference.rel_err(f32, want) < 1e-6
    rounded = ops.dense("BTD,DV->BTV", x, w, b, dtype=jnp.bfloat16)
    assert rounded.dtype == jnp.bfloat16
    np.testing.assert_array_equal(rounded, jnp.asarray(f32, jnp.bfloat16))


def test_custom_vjp_gradients_equal_autodiff():
    x = _random((2, 5, 6), 7)

    def grads(gradients):
        layer = Einsum("BTD,DHK->BHTK", (6, 3, 4), jnp.float32, gradients, use_bias=True)
        params = layer.init(jax.random.key(0), x)

        def loss(params, x):
            return jnp.sum(jnp.sin(layer.apply(params, x)))

        return jax.grad(loss, argnums=(0, 1))(params, x)

    custom, autodiff = grads("custom_vjp"), grads("autodiff")
    for a, b in zip(jax.tree.leaves(custom), jax.tree.leaves(autodiff), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _attention(prefix: str, d: int, h: int, k: int, a: int) -> dict[str, tuple[int, ...]]:
    tree = {f"{prefix}/{n}/kernel": (d, h, k) for n in ("query", "key", "value")}
    tree |= {f"{prefix}/{n}/bias": (h, k) for n in ("query", "key", "value")}
    tree |= {f"{prefix}/out/kernel": (h, k, d), f"{prefix}/out/bias": (d,)}
    tree |= {f"{prefix}/additive_{n}": (h, k, a) for n in ("query", "key")}
    return tree | {f"{prefix}/additive_v": (h, a)}


def _block(prefix: str, sublayers: tuple[str, ...], d: int, f: int) -> dict[str, tuple[int, ...]]:
    tree = {f"{prefix}/ffn/w1": (d, f), f"{prefix}/ffn/b1": (f,)}
    tree |= {f"{prefix}/ffn/w2": (f, d), f"{prefix}/ffn/b2": (d,)}
    return tree | {
        f"{prefix}/{n}_residual/norm/{p}": (d,) for n in sublayers for p in ("scale", "bias")
    }


def test_parameter_tree_is_the_one_checkpoints_hold():
    """Names and shapes of every parameter (D 8, H 2 of K 4, F 16, additive A 3, V 11/13)."""
    want = {"src_embed/embedding": (11, 8), "tgt_embed/embedding": (13, 8)}
    want |= {"output/dense/kernel": (8, 13), "output/dense/bias": (13,)}
    want |= _attention("encoder/block_0/self_attention", 8, 2, 4, 3)
    want |= _attention("decoder/block_0/self_attention", 8, 2, 4, 3)
    want |= _attention("decoder/block_0/cross_attention", 8, 2, 4, 3)
    want |= _block("encoder/block_0", ("self_attention", "ffn"), 8, 16)
    want |= _block("decoder/block_0", ("self_attention", "cross_attention", "ffn"), 8, 16)
    src, tgt = jnp.ones((2, 5), jnp.int32), jnp.ones((2, 4), jnp.int32)
    shapes = jax.eval_shape(
        Transformer(ADDITIVE).init, jax.random.key(0), src, jnp.array([5, 3]), tgt
    )
    got = traverse_util.flatten_dict(shapes["params"], sep="/")
    assert {k: v.shape for k, v in got.items()} == want
    assert {v.dtype for v in got.values()} == {jnp.dtype(jnp.float32)}


@pytest.mark.parametrize("gradients", ["autodiff", "custom_vjp"])
def test_additive_scorer_runs_in_bfloat16_close_to_float32(gradients):
    """Its per-head projections go through `ops.dense` too: float32 accumulation of bfloat16
    operands, which XLA:CPU runs only in the heads-first order (nn/attention.py)."""
    cfg = ADDITIVE.replace(deterministic=True, gradients=gradients)
    x_q, x_kv = _random((2, 5, 8), 8), _random((2, 7, 8), 9)
    params = MultiHeadAttention(cfg).init(jax.random.key(0), x_q, x_kv)

    def loss(params, dtype):
        out = MultiHeadAttention(cfg.replace(dtype=dtype)).apply(params, x_q, x_kv)
        return jnp.sum(out.astype(jnp.float32) ** 2), out

    (_, out16), g16 = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)(
        params, "bfloat16"
    )
    (_, out32), g32 = jax.value_and_grad(loss, has_aux=True)(params, "float32")
    assert out16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out16, np.float32), out32, rtol=0.05, atol=0.05)
    for a, b in zip(jax.tree.leaves(g16), jax.tree.leaves(g32), strict=True):
        assert reference.rel_err(a, b) < 0.05
