"""Every JAX transformation through the model and the loss, on each code path and dtype.

The reference is the model and loss with `gradients="autodiff"`: plain `jnp.einsum` and
JAX's own derivatives. Forward mode (jvp, jacfwd, linearize) runs on that path and is
checked against reverse mode through the custom VJPs (`gradients="custom_vjp"`, what the
train step runs), and the other way round: two independent derivative implementations
must agree. Hessian-vector products are compared in both orders on both paths. Forward
mode on the custom-VJP path is a clear `ForwardModeError`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax import ops
from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.training.losses import weighted_loss_sums

# two derivative implementations at atol 2e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

B, S, T, V = 2, 5, 4, 7
BASE = ModelConfig(
    src_vocab_size=V,
    tgt_vocab_size=V,
    num_encoder_layers=1,
    num_decoder_layers=1,
    model_dim=8,
    num_heads=2,
    ffn_dim=16,
)
CONFIGS = {
    # post-norm, dot attention, dropout on (a fixed key): the train step's path
    "post_dot_dropout_f32": BASE,
    "pre_additive_f32": BASE.replace(
        norm_placement="pre", attention_kind="additive", deterministic=True
    ),
    "post_dot_rms_gelu_tied_f32": BASE.replace(
        norm_kind="rms", activation="gelu", tie_output=True, deterministic=True
    ),
    "post_dot_dropout_bf16": BASE.replace(dtype="bfloat16"),
}
TOL = {"float32": dict(rtol=2e-3, atol=2e-5), "bfloat16": dict(rtol=0.1, atol=2e-2)}


def _batch():
    rng = np.random.default_rng(0)
    return dict(
        src=jnp.asarray(rng.integers(1, V, (B, S)), jnp.int32),
        src_len=jnp.asarray([S, 3], jnp.int32),
        tgt_in=jnp.asarray(rng.integers(1, V, (B, T)), jnp.int32),
        tgt_out=jnp.asarray(rng.integers(1, V, (B, T)), jnp.int32),
        tgt_weight=jnp.asarray([[1, 1, 1, 1], [1, 1, 0, 0]], jnp.float32),
    )


@functools.cache
def _params(name: str):
    cfg, batch = CONFIGS[name], _batch()
    model = Transformer(cfg.replace(deterministic=True))
    params = jax.jit(model.init)(jax.random.key(1), batch["src"], batch["src_len"], batch["tgt_in"])
    # Non-zero biases and norm scales away from 1, so no derivative is trivially zero.
    leaves, tree = jax.tree.flatten(params["params"])
    keys = jax.random.split(jax.random.key(2), len(leaves))
    leaves = [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, leaves)


def _loss(name: str, gradients: str, **changes):
    """params -> the train step's objective (label-smoothed CE sum / tokens) on one batch."""
    cfg, batch = CONFIGS[name].replace(gradients=gradients, **changes), _batch()
    model = Transformer(cfg)
    rngs = None if cfg.deterministic else {"dropout": jax.random.key(3)}

    def loss(params):
        logits = model.apply(
            {"params": params}, batch["src"], batch["src_len"], batch["tgt_in"], rngs=rngs
        )
        sums = weighted_loss_sums(
            logits, batch["tgt_out"], batch["tgt_weight"], 0.1, gradients=gradients
        )
        return sums["loss"] / sums["weight"]

    return loss


def _direction(params, seed: int):
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(
        tree, [jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    )


def _vdot(x, y):
    return sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True))


def _close(actual, expected, name):
    tol = TOL[_dtype(name)]
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(e, np.float32), **tol)


def _dtype(name: str) -> str:
    return CONFIGS[name].dtype


def _scalar_close(actual, expected, name):
    # A directional derivative sums many terms: compare relative to their size.
    rtol = 2e-3 if _dtype(name) == "float32" else 0.1
    assert abs(float(actual) - float(expected)) <= rtol * max(1.0, abs(float(expected)))


@pytest.mark.parametrize("name", CONFIGS)
def test_jvp_linearize_and_grad_agree_across_the_two_paths(name):
    params = _params(name)
    plain, custom = _loss(name, "autodiff"), _loss(name, "custom_vjp")
    v = _direction(params, 4)
    # Each transformation jitted whole: one compilation instead of many eager dispatches.
    value, forward = jax.jit(lambda p, t: jax.jvp(plain, (p,), (t,)))(params, v)
    grad_custom = jax.jit(jax.grad(custom))(params)
    _scalar_close(forward, _vdot(grad_custom, v), name)  # forward mode vs custom-VJP reverse mode
    _close(jax.jit(jax.grad(plain))(params), grad_custom, name)  # plain vs custom-VJP reverse mode
    _scalar_close(jax.jit(custom)(params), value, name)  # the same forward either way

    def linearized(p, t):
        value, lin = jax.linearize(plain, p)
        return value, lin(t)

    value_lin, forward_lin = jax.jit(linearized)(params, v)
    _scalar_close(forward_lin, forward, name)
    _scalar_close(value_lin, value, name)


@pytest.mark.parametrize("name", ["post_dot_dropout_f32", "post_dot_dropout_bf16"])
def test_jacfwd_matches_jacrev_through_the_custom_vjp_path(name):
    """Jacobians of the logits and of the loss with respect to the encoder's query kernel:
    its derivative runs through the whole encoder, cross-attention, decoder and loss."""
    cfg, batch, params = CONFIGS[name], _batch(), _params(name)
    rngs = {"dropout": jax.random.key(3)}

    def with_kernel(kernel):
        enc = params["encoder"]["block_0"]
        attention = {**enc["self_attention"], "query": {**enc["self_attention"]["query"]}}
        attention["query"]["kernel"] = kernel
        block = {**enc, "self_attention": attention}
        return {**params, "encoder": {"block_0": block}}

    def logits(gradients):
        model = Transformer(cfg.replace(gradients=gradients))
        return lambda k: model.apply(
            {"params": with_kernel(k)}, batch["src"], batch["src_len"], batch["tgt_in"], rngs=rngs
        )  # (B, T, V) for a (D, H, K) kernel: a (B, T, V, D, H, K) Jacobian

    def loss(gradients):
        return lambda k: _loss(name, gradients)(with_kernel(k))

    kernel = params["encoder"]["block_0"]["self_attention"]["query"]["kernel"]
    for f in (logits, loss):
        forward = jax.jit(jax.jacfwd(f("autodiff")))(kernel)
        assert np.abs(np.asarray(forward, np.float32)).max() > 1e-4
        _close(forward, jax.jit(jax.jacrev(f("custom_vjp")))(kernel), name)


@pytest.mark.parametrize("name", ["pre_additive_f32"])
def test_hessian_vector_products_in_both_orders_on_both_paths(name):
    params = _params(name)
    v = _direction(params, 5)

    # Each product jitted whole: eagerly, the thousands of small second-order dispatches
    # took ~32 s on 2 cores; compiling the four programs takes ~14 s.
    def fwd_over_rev(loss):
        return jax.jit(lambda p, t: jax.jvp(jax.grad(loss), (p,), (t,))[1])(params, v)

    def rev_over_rev(loss):
        return jax.jit(jax.grad(lambda p, t: _vdot(jax.grad(loss)(p), t)))(params, v)

    plain, custom = _loss(name, "autodiff"), _loss(name, "custom_vjp")
    reference = fwd_over_rev(plain)
    assert max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(reference)) > 1e-3
    for hvp in (rev_over_rev(plain), fwd_over_rev(custom), rev_over_rev(custom)):
        _close(hvp, reference, name)


@pytest.mark.parametrize("name", ["post_dot_dropout_f32", "post_dot_dropout_bf16"])
def test_vmap_over_a_batch_of_parameter_sets(name):
    params = _params(name)
    stacked = jax.tree.map(lambda x, d: jnp.stack([x, x + 0.05 * d]), params, _direction(params, 6))
    plain, custom = _loss(name, "autodiff"), _loss(name, "custom_vjp")
    values = jax.jit(jax.vmap(plain))(stacked)
    grads = jax.jit(jax.vmap(jax.grad(custom)))(stacked)
    jvp = jax.jit(lambda p, t: jax.jvp(plain, (p,), (t,)))
    tangents = jax.jit(jax.vmap(lambda p: jvp(p, params)[1]))(stacked)
    grad_plain = jax.jit(jax.grad(plain))
    for i in range(2):
        one = jax.tree.map(lambda x, i=i: x[i], stacked)
        value, tangent = jvp(one, params)
        _scalar_close(values[i], value, name)
        _close(jax.tree.map(lambda x, i=i: x[i], grads), grad_plain(one), name)
        _scalar_close(tangents[i], tangent, name)


@pytest.mark.parametrize("gradients", ["autodiff", "custom_vjp"])
def test_checkpointed_layers_give_the_same_derivatives(gradients):
    name = "post_dot_dropout_f32"
    params = _params(name)
    v = _direction(params, 7)
    # nn.remat of every block (ModelConfig.remat) and jax.checkpoint of the whole loss.
    rematted = _loss(name, gradients, remat=True)
    plain = _loss(name, "autodiff")
    reference = jax.jit(jax.grad(plain))(params)
    _close(jax.jit(jax.grad(rematted))(params), reference, name)
    _close(jax.jit(jax.grad(jax.checkpoint(_loss(name, gradients))))(params), reference, name)
    if gradients == "autodiff":  # forward mode through remat
        forward = jax.jit(lambda p, t: jax.jvp(rematted, (p,), (t,))[1])(params, v)
        _scalar_close(forward, _vdot(reference, v), name)


def test_decode_step_with_the_cache_jvp_matches_the_custom_vjp():
    cfg = CONFIGS["post_dot_dropout_f32"].replace(deterministic=True)
    batch, params = _batch(), _params("post_dot_dropout_f32")
    model = Transformer(cfg.replace(decode=True))
    cache = model.init(jax.random.key(0), batch["src"], batch["src_len"], batch["tgt_in"][:, :1])[
        "cache"
    ]

    def step(gradients):
        m = Transformer(cfg.replace(decode=True, gradients=gradients))

        def f(p):  # two cached steps: the second attends to the first through the cache
            c = cache
            for t in range(2):
                logits, mutated = m.apply(
                    {"params": p, "cache": c},
                    batch["src"],
                    batch["src_len"],
                    batch["tgt_in"][:, t : t + 1],
                    mutable=["cache"],
                )
                c = mutated["cache"]
            return jnp.sum(jnp.sin(logits))

        return f

    v = _direction(params, 8)
    forward = jax.jit(lambda p, t: jax.jvp(step("autodiff"), (p,), (t,))[1])(params, v)
    backward = jax.jit(jax.grad(step("custom_vjp")))(params)
    _scalar_close(forward, _vdot(backward, v), "post_dot_dropout_f32")


def test_forward_mode_on_the_custom_vjp_path_is_a_clear_error():
    name = "post_dot_dropout_f32"
    params, custom = _params(name), _loss(name, "custom_vjp")
    with pytest.raises(ops.ForwardModeError, match='ModelConfig\\(gradients="autodiff"\\)'):
        jax.jvp(custom, (params,), (params,))
    with pytest.raises(ops.ForwardModeError, match="forward-mode"):
        jax.jit(jax.jacfwd(custom))(params)
    logits = jnp.zeros((1, 2, V))
    with pytest.raises(ops.ForwardModeError, match="token_losses"):
        jax.jvp(
            lambda z: weighted_loss_sums(
                z, jnp.zeros((1, 2), jnp.int32), jnp.ones((1, 2)), 0.1, gradients="custom_vjp"
            )["loss"],
            (logits,),
            (logits,),
        )
