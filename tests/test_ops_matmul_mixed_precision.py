"""ops.einsum's derivatives of bfloat16 matmuls: bfloat16 x bfloat16 dots accumulated in
float32 on both gradient rules (autodiff's JVP rule, the custom VJP), as mixed-precision
training computes them. JAX's plain rule ran every backward matmul of a bfloat16 train step
in float32 (TF32 on a GPU); the speed job of benchmarks.accelerator_check found it."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import ops

SPECS = [
    ("BTD,DHK->BHTK", (2, 5, 8), (8, 3, 4)),
    ("BHTK,BHSK->BHTS", (2, 3, 5, 4), (2, 3, 6, 4)),
    ("BTD,VD->BTV", (2, 5, 8), (11, 8)),
]


def _dot_operand_types(fn, *args) -> list[tuple[str, str]]:
    """The operand element types of every dot_general in `fn`'s lowered program."""
    text = jax.jit(fn).lower(*args).as_text()
    pattern = r"stablehlo\.dot_general[^\n]*: \(tensor<[^>]*x(\w+)>, tensor<[^>]*x(\w+)>\)"
    return re.findall(pattern, text)


@pytest.mark.parametrize("out_dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("gradients", ops.GRADIENTS)
@pytest.mark.parametrize("spec,shape_a,shape_b", SPECS)
def test_backward_matmuls_of_bf16_operands_are_bf16(spec, shape_a, shape_b, gradients, out_dtype):
    a = jnp.ones(shape_a, jnp.bfloat16)
    b = jnp.ones(shape_b, jnp.bfloat16)

    def loss(x, y):
        out = ops.einsum(spec, x, y, out_dtype=out_dtype, gradients=gradients)
        return jnp.sum(jnp.sin(out.astype(jnp.float32)))

    types = _dot_operand_types(jax.grad(loss, argnums=(0, 1)), a, b)
    assert len(types) == 3  # the forward and the two gradients
    assert set(types) == {("bf16", "bf16")}, types


@pytest.mark.parametrize("gradients", ops.GRADIENTS)
def test_bf16_forward_mode_and_hvp_dots_stay_bf16(gradients):
    a = jnp.ones((4, 8), jnp.bfloat16)
    b = jnp.ones((8, 6), jnp.bfloat16)
    f = lambda x: jnp.sum(ops.einsum("MK,KN->MN", x, b, out_dtype=jnp.float32) ** 2)  # noqa: E731
    if gradients == "autodiff":  # forward mode: the custom VJP is reverse mode only
        tangent = lambda x: jax.jvp(f, (x,), (jnp.ones_like(x),))[1]  # noqa: E731
        assert set(_dot_operand_types(tangent, a)) == {("bf16", "bf16")}
    # d/dx of <grad f(x), 1>: a Hessian-vector product, reverse over reverse (the sum, not a
    # vdot: that would add a dot of its own).
    hvp = lambda x: jax.grad(lambda y: jnp.sum(jax.grad(f)(y).astype(jnp.float32)))(x)  # noqa: E731
    assert set(_dot_operand_types(hvp, a)) == {("bf16", "bf16")}


@pytest.mark.parametrize("gradients", ops.GRADIENTS)
def test_bf16_gradient_matmuls_accumulate_in_float32(gradients):
    # da = g · bᵀ sums 4096 products of 1 + 2^-7: 4128, a bfloat16 number (spacing 32 at
    # 4096); a bfloat16 accumulator would stall at 256 (spacing 2 there).
    n = 4096
    a = jnp.ones((1, 1), jnp.bfloat16)
    b = jnp.ones((1, n), jnp.bfloat16)
    g = jnp.full((1, n), 1 + 2**-7, jnp.float32)

    def loss(x, y):
        return jnp.sum(
            ops.einsum("MK,KN->MN", x, y, out_dtype=jnp.float32, gradients=gradients) * g
        )

    da, db = jax.grad(loss, argnums=(0, 1))(a, b)
    assert da.dtype == jnp.bfloat16 and float(da[0, 0]) == n * (1 + 2**-7)
    np.testing.assert_array_equal(np.asarray(db, np.float32), np.full((1, n), 1 + 2**-7))


def test_float32_operands_keep_jax_own_rule():
    a, b = jnp.ones((2, 3)), jnp.ones((3, 4))
    loss = lambda x, y: jnp.sum(ops.einsum("MK,KN->MN", x, y) ** 2)  # noqa: E731
    assert set(_dot_operand_types(jax.grad(loss, argnums=(0, 1)), a, b)) == {("f32", "f32")}


@pytest.mark.parametrize("attention_kind", ["dot", "additive"])
@pytest.mark.parametrize("gradients", ops.GRADIENTS)
def test_a_bf16_train_step_has_no_float32_matmul(gradients, attention_kind):
    """The whole train step of a bfloat16 model, forward and backward, lowered: every matmul
    takes bfloat16 operands (so none bypasses ops.einsum, and none is upcast by a rule)."""
    from configs import model as model_configs
    from transformer_jax.training import build, training_defaults

    config = training_defaults()
    config.model = model_configs.get_config("tiny")
    config.model.dtype, config.model.attention_kind = "bfloat16", attention_kind
    config.gradients, config.num_train_steps = gradients, 10
    built = build(config, src_vocab_size=11, tgt_vocab_size=13)
    rng = np.random.default_rng(0)
    rows, width = built.parallel.num_local_devices * 2, 6
    tokens = lambda: rng.integers(4, 11, size=(rows, width)).astype(np.int32)  # noqa: E731
    batch = {
        "src": tokens(),
        "src_len": np.full((rows,), width, np.int32),
        "tgt_in": tokens(),
        "tgt_out": tokens(),
        "tgt_weight": np.ones((rows, width), np.float32),
    }
    state = built.parallel.put_replicated(built.init_state())
    text = built.train_step.lower(state, built.parallel.put_batch(batch)).as_text()
    pattern = r"stablehlo\.dot_general[^\n]*: \(tensor<[^>]*x(\w+)>, tensor<[^>]*x(\w+)>\)"
    types = re.findall(pattern, text)
    assert len(types) > 20 and set(types) == {("bf16", "bf16")}, sorted(set(types))
