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

    Derivatives come from the closed form dw = w ⊙ (dx − Σ dx·w) (a JVP rule; reverse mode
    transposes it to w ⊙ (g − Σ g·w): one reduction, one elementwise pass), not from
    autodiff of the forward, which would also differentiate the max shift and the masking
    selects, ~10 extra XLA ops per attention layer for a zero contribution.

    Args:
      scores: (..., T, S) attention scores.
      mask: boolean broadcastable to `scores`, True = may attend; None = no mask.

    Returns:
      (..., T, S) weights; each row sums to 1, or to 0 if fully masked.
    """
    return _softmax(scores, mask)


def softmax(scores: Array) -> Array:
    """Plain softmax over the last axis, computed in float32 (same rule as `masked_softmax`)."""
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


@jax.custom_jvp
def _softmax(scores: Array, mask: Array | None) -> Array:
    return _weights(scores, mask).astype(scores.dtype)


@_softmax.defjvp
def _softmax_jvp(primals, tangents):
    # A JVP rule (not a VJP) keeps forward-mode autodiff (jax.jvp, jax.hessian) working;
    # reverse mode transposes this linear map into w ⊙ (g − Σ g·w), the same two passes.
    scores, mask = primals
    d_scores = tangents[0].astype(jnp.float32)
    w = _weights(scores, mask)
    d_w = w * (d_scores - jnp.sum(d_scores * w, axis=-1, keepdims=True))
    return w.astype(scores.dtype), d_w.astype(scores.dtype)
