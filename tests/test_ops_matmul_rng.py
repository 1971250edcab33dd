"""ops.einsum: float32-accumulating low-precision matmuls and their custom-VJP gradients."""

import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax import ops

# float32 gradients against float64 at 1e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

SPECS = [
    ("BTD,DF->BTF", (2, 5, 8), (8, 12)),
    ("BTD,DHK->BHTK", (2, 5, 8), (8, 3, 4)),
    ("BHTK,HKD->BTD", (2, 3, 5, 4), (3, 4, 8)),
    ("BHTK,BHSK->BHTS", (2, 3, 5, 4), (2, 3, 6, 4)),
    ("BHTS,BHSK->BHTK", (2, 3, 5, 6), (2, 3, 6, 4)),
    ("BTD,VD->BTV", (2, 5, 8), (11, 8)),
]


def _operands(shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape_a), rng.normal(size=shape_b)


@pytest.mark.parametrize("gradients", ops.GRADIENTS)
@pytest.mark.parametrize("spec,shape_a,shape_b", SPECS)
def test_bf16_forward_and_gradients_match_float64(spec, shape_a, shape_b, gradients):
    a, b = _operands(shape_a, shape_b)
    # bf16-representable inputs, so the only error left is the bf16 cast of the output
    # and of the cotangent; float32 accumulation keeps it at bf16 resolution (~0.4 %).
    a = np.asarray(jnp.asarray(a, jnp.bfloat16), np.float64)
    b = np.asarray(jnp.asarray(b, jnp.bfloat16), np.float64)
    g = np.random.default_rng(1).normal(size=np.einsum(spec, a, b).shape)
    g = np.asarray(jnp.asarray(g, jnp.bfloat16), np.float64)

    def loss(x, y):
        out = ops.einsum(spec, x, y, out_dtype=jnp.float32, gradients=gradients)
        return jnp.sum(out * jnp.asarray(g, jnp.float32))

    out = ops.einsum(spec, jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(out, np.float64), np.einsum(spec, a, b), rtol=2e-2, atol=2e-2
    )

    da, db = jax.grad(loss, argnums=(0, 1))(
        jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)
    )
    assert da.dtype == db.dtype == jnp.bfloat16
    lhs, rhs = spec.split("->")[0].split(",")
    out_idx = spec.split("->")[1]
    want_da = np.einsum(f"{out_idx},{rhs}->{lhs}", g, b)
    want_db = np.einsum(f"{lhs},{out_idx}->{rhs}", a, g)
    for got, want in ((da, want_da), (db, want_db)):
        err = np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max()
        assert err < 1e-2, (spec, err)


def _transposed_shapes(spec, a, b):
    """Shapes of the arrays the einsum gradient transposes (jaxpr `transpose` inputs)."""
    loss = lambda x, y: jnp.sum(ops.einsum(spec, x, y, gradients="custom_vjp"))  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.grad(loss, (0, 1)))(a, b)
    shapes = []

    def walk(jx):
        for eqn in jx.eqns:
            if eqn.primitive.name == "transpose":
                shapes.append(tuple(eqn.invars[0].aval.shape))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    return shapes


@pytest.mark.parametrize(
    "spec,shape_a,shape_b,allowed",
    [
        # Output projection: the activations (B, T, D) are transposed, never the large
        # (B, T, V) logits gradient.
        ("BTD,DV->BTV", (4, 6, 8), (8, 50), {(4, 6, 8)}),
        # Tied output embedding: the activations and the small (D, V) result.
        ("BTD,VD->BTV", (4, 6, 8), (50, 8), {(4, 6, 8), (8, 50)}),
        # Attention: dK transposes the score gradient, dV the weights, both (B, H, T, S).
        ("BHTK,BHSK->BHTS", (2, 3, 5, 4), (2, 3, 6, 4), {(2, 3, 5, 6)}),
        ("BHTS,BHSK->BHTK", (2, 3, 5, 6), (2, 3, 6, 4), {(2, 3, 5, 6)}),
    ],
)
def test_gradients_transpose_the_small_operand(spec, shape_a, shape_b, allowed):
    a, b = (jnp.ones(s, jnp.float32) for s in (shape_a, shape_b))
    transposed = _transposed_shapes(spec, a, b)
    assert transposed and set(transposed) <= allowed, transposed


def test_float32_forward_is_plain_einsum():
    a, b = _operands((2, 5, 8), (8, 12))
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    np.testing.assert_array_equal(ops.einsum("BTD,DF->BTF", a, b), jnp.einsum("BTD,DF->BTF", a, b))


def test_bf16_weight_gradient_under_shard_map_is_summed_over_devices():
    """A replicated weight times sharded activations inside shard_map (check_vma=True):
    the custom VJP's gradient must come back replicated, summed over the batch shards,
    as plain einsum's does (it raised a type error before `pcast`)."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("data",))
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.normal(size=(2 * len(jax.devices()), 3, 8)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(8, 5)), jnp.bfloat16)

    def local_loss(w, x, fn):
        return jax.lax.psum(jnp.sum(fn("BTD,DF->BTF", x, w).astype(jnp.float32)), "data")

    def grad_with(fn):
        mapped = jax.shard_map(
            jax.grad(lambda w, x: local_loss(w, x, fn)),
            mesh=mesh,
            in_specs=(P(), P("data")),
            out_specs=P(),
        )
        return np.asarray(jax.jit(mapped)(w, x), np.float64)

    plain = lambda s, a, b: jnp.einsum(s, a, b, preferred_element_type=jnp.float32)  # noqa: E731
    for gradients in ops.GRADIENTS:
        ours = functools.partial(ops.einsum, gradients=gradients)
        np.testing.assert_allclose(grad_with(ours), grad_with(plain), rtol=2e-2)


@pytest.mark.parametrize("gradients", ops.GRADIENTS)
@pytest.mark.parametrize("spec,shape_a,shape_b", SPECS)
def test_float32_gradients_match_float64(spec, shape_a, shape_b, gradients):
    """float32 has the same custom VJP (layouts only); gradients against float64."""
    a, b = _operands(shape_a, shape_b, seed=2)
    g = np.random.default_rng(3).normal(size=np.einsum(spec, a, b).shape)

    def loss(x, y):
        return jnp.sum(ops.einsum(spec, x, y, gradients=gradients) * jnp.asarray(g, jnp.float32))

    da, db = jax.grad(loss, argnums=(0, 1))(
        jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    )
    lhs, rhs = spec.split("->")[0].split(",")
    out_idx = spec.split("->")[1]
    np.testing.assert_allclose(da, np.einsum(f"{out_idx},{rhs}->{lhs}", g, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, np.einsum(f"{lhs},{out_idx}->{rhs}", a, g), rtol=1e-5, atol=1e-5)


def test_bf16_matmul_accumulates_in_float32():
    # 4096 products of 1 + 2^-7 each sum to 4128; a bf16 accumulator (spacing 32 at 4096)
    # could not hold it.
    a = jnp.full((1, 4096), 1 + 2**-7, jnp.bfloat16)
    b = jnp.ones((4096, 1), jnp.bfloat16)
    out = ops.einsum("MK,KN->MN", a, b, out_dtype=jnp.float32)
    assert abs(float(out[0, 0]) - 4096 * (1 + 2**-7)) < 1e-2


def test_mixed_dtypes_and_lonely_indices_are_rejected():
    with pytest.raises(TypeError, match="differ in dtype"):
        ops.einsum("MK,KN->MN", jnp.ones((2, 3)), jnp.ones((3, 4), jnp.bfloat16))
    with pytest.raises(ValueError, match="summed away"):
        ops.einsum("MKX,KN->MN", jnp.ones((2, 3, 2), jnp.bfloat16), jnp.ones((3, 4), jnp.bfloat16))


def test_hessian_vector_products_differentiate_the_custom_vjp():
    """Reverse-over-reverse through attention's custom VJPs (batched dots) and softmax's
    JVP rule equals the same through plain jnp.einsum and jax.nn.softmax."""
    rng = np.random.default_rng(7)
    a, b = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((2, 3, 5, 4), (2, 3, 6, 4)))
    v = jnp.asarray(rng.normal(size=a.shape), jnp.float32)

    def ours(x):
        w = ops.masked_softmax(ops.einsum("BHTK,BHSK->BHTS", x, b, gradients="custom_vjp"), None)
        return jnp.sum(ops.einsum("BHTS,BHSK->BHTK", w, b, gradients="custom_vjp") ** 2)

    def plain(x):
        w = jax.nn.softmax(jnp.einsum("BHTK,BHSK->BHTS", x, b))
        return jnp.sum(jnp.einsum("BHTS,BHSK->BHTK", w, b) ** 2)

    def hvp(f):
        return jax.grad(lambda x: jnp.vdot(jax.grad(f)(x), v))(a)

    np.testing.assert_allclose(hvp(ours), hvp(plain), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "spec,shape_a,shape_b,large",
    [
        # Tied output embedding (B*T = 256, V = 1000, D = 32): the weight gradient "VD" is a
        # small result; XLA must not produce it by laying out the (B*T, V) logits gradient
        # as (V, B*T).
        ("BTD,VD->BTV", (8, 32, 32), (1000, 32), (1000, 256)),
        # The FFN's second weights "FD": not the (B*T, F) activations as (F, B*T).
        ("BTF,FD->BTD", (8, 32, 512), (512, 32), (512, 256)),
    ],
)
def test_compiled_gradients_lay_out_no_large_operand_transposed(spec, shape_a, shape_b, large):
    """What XLA:CPU runs (the optimised HLO), not only the jaxpr: asked for a transposed
    result, XLA swaps the dot's operands and transposes the large one instead."""
    a, b = (jnp.ones(s, jnp.float32) for s in (shape_a, shape_b))
    loss = lambda x, y: jnp.sum(jnp.sin(ops.einsum(spec, x, y, gradients="custom_vjp")))  # noqa: E731
    hlo = jax.jit(jax.grad(loss, (0, 1))).lower(a, b).compile().as_text()
    transposed = f"f32[{large[0]},{large[1]}]"
    assert transposed not in hlo, [line for line in hlo.splitlines() if transposed in line][:3]
