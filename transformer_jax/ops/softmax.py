"""The one masked softmax of the framework (d2l §10.3.1 `masked_softmax`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jnp.ndarray


def masked_softmax(scores: Array, mask: Array | None) -> Array:
    """Softmax over the last axis where masked keys get exactly zero weight.

    The book fills masked scores with -1e6, which leaves a tiny weight on masked keys and a
    uniform distribution on fully masked rows. Here masked entries are zeroed after the
    exponential, so their weight is exactly 0 and a fully masked row is all zeros (never
    NaN, in the forward or backward pass).

    The gradient is the closed form w ⊙ (g − Σ g·w) (one reduction, one elementwise
    pass), not autodiff of the forward: that would also differentiate the max shift and
    the masking selects, ~10 extra XLA ops per attention layer for a zero contribution.

    Args:
      scores: (..., T, S) attention scores.
      mask: boolean broadcastable to `scores`, True = may attend; None = no mask.

    Returns:
      (..., T, S) weights; each row sums to 1, or to 0 if fully masked.
    """
    return _softmax(scores, mask)


def softmax(scores: Array) -> Array:
    """Plain softmax over the last axis, computed in float32 (same VJP as `masked_softmax`)."""
    return _softmax(scores, None)


def _weights(scores: Array, mask: Array | None) -> Array:
    """float32 (..., T, S) softmax weights of `scores`, masked entries exactly 0."""
    # Softmax statistics in float32 even for bfloat16 scores: the exp-sum loses precision.
    x = scores.astype(jnp.float32)
    if mask is None:
        e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
        return e / jnp.sum(e, axis=-1, keepdims=True)
    x = jnp.where(mask, x, jnp.finfo(jnp.float32).min)
    x_max = jnp.max(x, axis=-1, keepdims=True)  # (..., T, 1)
    e = jnp.where(mask, jnp.exp(x - x_max), 0.0)  # (..., T, S)
    denom = jnp.sum(e, axis=-1, keepdims=True)  # (..., T, 1)
    return e / jnp.where(denom == 0.0, 1.0, denom)


@jax.custom_vjp
def _softmax(scores: Array, mask: Array | None) -> Array:
    return _weights(scores, mask).astype(scores.dtype)


def _softmax_fwd(scores, mask):
    w = _weights(scores, mask)
    # float32 weights as the residual (autodiff kept float32 statistics too), and a zero
    # of the scores' dtype to give the gradient that dtype.
    return w.astype(scores.dtype), (w, jnp.zeros((), scores.dtype))


def _softmax_bwd(residuals, g):
    w, zero = residuals
    g = g.astype(jnp.float32)
    d_scores = w * (g - jnp.sum(g * w, axis=-1, keepdims=True))
    return d_scores.astype(zero.dtype), None


_softmax.defvjp(_softmax_fwd, _softmax_bwd)
