"""The formulas of the residual placements, the final norm and the embeddings, each pinned
against an independent float64 numpy computation with the module's own parameters.

post-norm: norm(x + f(x)); pre-norm: x + f(norm(x)) and the stack ends with a final norm;
ReZero: x + α·f(x), the identity at initialisation (α = 0); embeddings: E[ids]·√D + P.
Swapping any of these lines in `transformer_jax/nn` fails a test here.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import reference
from tests.helpers import float32_matmuls
from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.nn.residual import Residual
from transformer_jax.testing import random_params, tiny_config

# float64 references at atol 2e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

B, T, D = 2, 3, 8
EPS = 1e-5
ATOL = 2e-5

_rng = np.random.default_rng(0)
X = 2.0 * _rng.normal(size=(B, T, D)) + 0.5  # (B, T, D): not zero-mean, not unit-variance
W = _rng.normal(size=(D, D)) / np.sqrt(D)  # (D, D) the known sublayer's weight
SCALE = 1.0 + 0.5 * _rng.normal(size=(D,))  # (D,) norm scale, far from the init value 1
BIAS = 0.3 * _rng.normal(size=(D,))  # (D,) norm bias, far from the init value 0
ALPHA = 0.7


def f_numpy(h: np.ndarray) -> np.ndarray:
    """The known sublayer in float64: nonlinear and not shift-invariant, so
    norm(x + f(x)), x + f(norm(x)) and x + α·f(x) all give different results."""
    return np.tanh(h @ W) + 0.25


def f_jax(h: jnp.ndarray) -> jnp.ndarray:
    return jnp.tanh(h @ jnp.asarray(W, jnp.float32)) + 0.25


def _config(**kw) -> ModelConfig:
    return tiny_config(1, 1, **{"model_dim": D, "num_heads": 1, "norm_eps": EPS, **kw})


def _norm_numpy(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "rms":
        return reference.rms_norm(x, SCALE, EPS)
    return reference.layer_norm(x, SCALE, BIAS, EPS)


def _residual(cfg: ModelConfig, params: dict) -> np.ndarray:
    out = Residual(cfg).apply({"params": params}, jnp.asarray(X, jnp.float32), f_jax)
    return np.asarray(out, np.float64)


def _norm_params(kind: str) -> dict:
    params = {"scale": jnp.asarray(SCALE, jnp.float32)}
    if kind == "layer":
        params["bias"] = jnp.asarray(BIAS, jnp.float32)
    return params


def _init_params(cfg: ModelConfig) -> dict:
    return Residual(cfg).init(jax.random.key(0), jnp.asarray(X, jnp.float32), f_jax)["params"]


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_post_norm_is_norm_of_x_plus_f_x(kind):
    cfg = _config(norm_placement="post", norm_kind=kind)
    params = {"norm": _norm_params(kind)}
    # The module owns exactly these parameters, so the numpy formula sees all of them.
    assert jax.tree.structure(_init_params(cfg)) == jax.tree.structure(params)
    expected = _norm_numpy(X + f_numpy(X), kind)
    np.testing.assert_allclose(_residual(cfg, params), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_pre_norm_is_x_plus_f_of_norm_x(kind):
    cfg = _config(norm_placement="pre", norm_kind=kind)
    params = {"norm": _norm_params(kind)}
    assert jax.tree.structure(_init_params(cfg)) == jax.tree.structure(params)
    expected = X + f_numpy(_norm_numpy(X, kind))
    np.testing.assert_allclose(_residual(cfg, params), expected, atol=ATOL, rtol=0)


def test_rezero_is_x_plus_alpha_f_x():
    cfg = _config(norm_placement="rezero")
    params = {"alpha": jnp.asarray(ALPHA, jnp.float32)}
    assert jax.tree.structure(_init_params(cfg)) == jax.tree.structure(params)  # no norm
    expected = X + ALPHA * f_numpy(X)
    np.testing.assert_allclose(_residual(cfg, params), expected, atol=ATOL, rtol=0)


def test_rezero_is_the_identity_at_initialisation():
    cfg = _config(norm_placement="rezero")
    params = _init_params(cfg)
    assert float(params["alpha"]) == 0.0
    # Exactly x, although f(x) is far from zero: every block starts as the identity.
    assert np.abs(f_numpy(X)).mean() > 0.1
    np.testing.assert_array_equal(_residual(cfg, params), np.asarray(X, np.float32))


# --- the stacks: embeddings, positions and the final norm -------------------------------

V, S_LEN, T_LEN, DM = 23, 5, 4, 16


def _norm_to_alpha(tree: dict) -> dict:
    """Post-norm parameters -> ReZero's: each residual's {"norm": ...} becomes {"alpha": 0}."""
    return {
        key: {"alpha": jnp.zeros((), jnp.float32)}
        if key.endswith("_residual")
        else (_norm_to_alpha(value) if isinstance(value, dict) else value)
        for key, value in tree.items()
    }


@functools.cache
def _model_run(placement: str, positional: str = "sinusoidal"):
    """Teacher-forced apply of a 2+2 model with every module's output captured."""
    cfg = tiny_config(
        V,
        V + 2,
        model_dim=DM,
        num_heads=2,
        ffn_dim=32,
        norm_placement=placement,
        norm_eps=EPS,
        positional=positional,
        max_len=8,
    )
    rng = np.random.default_rng(2)
    if placement == "rezero":  # the same tree as post-norm's, each residual's norm -> α
        params = _norm_to_alpha(random_params(cfg.replace(norm_placement="post"), seed=1))
    else:
        params = random_params(cfg, seed=1)
    # ReZero's α and the final norms' scales get values far from their initial 0 and 1.
    params = jax.tree_util.tree_map_with_path(
        lambda path, a: (
            jnp.asarray(rng.uniform(0.5, 1.5, a.shape), a.dtype)
            if str(path[-1].key) in ("alpha", "scale")
            else a
        ),
        params,
    )
    src = jnp.asarray(rng.integers(1, V, (B, S_LEN)), jnp.int32)
    tgt = jnp.asarray(rng.integers(1, V + 2, (B, T_LEN)), jnp.int32)
    src_len = jnp.array([S_LEN, 3], jnp.int32)
    logits, state = Transformer(cfg).apply(
        {"params": params}, src, src_len, tgt, capture_intermediates=True, mutable=["intermediates"]
    )
    return cfg, params, np.asarray(src), np.asarray(tgt), state["intermediates"]


def _out(intermediates: dict) -> np.ndarray:
    (value,) = intermediates["__call__"]
    return np.asarray(value, np.float64)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
@pytest.mark.parametrize("placement", ["post", "pre", "rezero"])
def test_only_pre_norm_stacks_end_with_a_final_norm(stack, placement):
    cfg, params, _, _, captured = _model_run(placement)
    last_block = _out(captured[stack]["block_1"])  # (B, L, D)
    stack_out = _out(captured[stack])  # (B, L, D)
    if placement == "pre":
        norm = params[stack]["final_norm"]
        expected = reference.layer_norm(
            last_block, np.asarray(norm["scale"]), np.asarray(norm["bias"]), cfg.norm_eps
        )
    else:  # post-norm blocks already end in a norm; ReZero has none at all
        assert "final_norm" not in params[stack]
        expected = last_block
    np.testing.assert_allclose(stack_out, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_embeddings_are_scaled_by_sqrt_d_then_positions_added(positional):
    _, params, src, tgt, captured = _model_run("post", positional)
    for stack, ids, table in (
        ("encoder", src, params["src_embed"]["embedding"]),
        ("decoder", tgt, params["tgt_embed"]["embedding"]),
    ):
        length = ids.shape[1]
        if positional == "learned":
            positions = np.asarray(params[stack]["positions"]["position_embedding"])[:length]
        else:
            positions = reference.sinusoidal(length, DM)  # (L, D)
        # The embedding table is N(0, 1/D): the √D makes the rows comparable to P in [-1, 1].
        expected = np.asarray(table, np.float64)[ids] * np.sqrt(DM) + positions[None]
        first_block_input = _out(captured[stack]["positions"])  # (B, L, D)
        np.testing.assert_allclose(first_block_input, expected, atol=ATOL, rtol=0)
