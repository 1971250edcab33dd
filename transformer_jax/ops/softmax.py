"""The one masked softmax of the framework (d2l §10.3.1 `masked_softmax`)."""

from __future__ import annotations

import jax.numpy as jnp

Array = jnp.ndarray


def masked_softmax(scores: Array, mask: Array | None) -> Array:
    """Softmax over the last axis where masked keys get exactly zero weight.

    The book fills masked scores with -1e6, which leaves a tiny weight on masked keys and a
    uniform distribution on fully masked rows. Here masked entries are zeroed after the
    exponential, so their weight is exactly 0 and a fully masked row is all zeros (never
    NaN, in the forward or backward pass).

    Args:
      scores: (..., T, S) attention scores.
      mask: boolean broadcastable to `scores`, True = may attend; None = no mask.

    Returns:
      (..., T, S) weights; each row sums to 1, or to 0 if fully masked.
    """
    if mask is None:
        return softmax(scores)
    # Softmax statistics in float32 even for bfloat16 scores: the exp-sum loses precision.
    x = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    x_max = jnp.max(x, axis=-1, keepdims=True)  # (..., T, 1)
    e = jnp.where(mask, jnp.exp(x - x_max), 0.0)  # (..., T, S)
    denom = jnp.sum(e, axis=-1, keepdims=True)  # (..., T, 1)
    return (e / jnp.where(denom == 0.0, 1.0, denom)).astype(scores.dtype)


def softmax(scores: Array) -> Array:
    """Plain softmax over the last axis, computed in float32."""
    x = scores.astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    return (e / jnp.sum(e, axis=-1, keepdims=True)).astype(scores.dtype)
