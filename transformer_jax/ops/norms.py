"""Normalisation over the last axis (D)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jnp.ndarray


def layer_norm(x: Array, scale: Array | None, bias: Array | None, eps: float = 1e-5) -> Array:
    """(x - mean) / sqrt(var + eps) * scale + bias over the last axis (Ba et al. 2016).

    Statistics are computed in float32 whatever the input dtype.

    Args:
      x: (..., D).
      scale, bias: (D,) or None.
    """
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps)
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype)


def rms_norm(x: Array, scale: Array | None, eps: float = 1e-6) -> Array:
    """x / sqrt(mean(x²) + eps) * scale over the last axis (Zhang & Sennrich 2019).

    Args:
      x: (..., D).
      scale: (D,) or None.
    """
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    if scale is not None:
        y = y * scale
    return y.astype(x.dtype)
