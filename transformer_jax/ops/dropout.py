"""Inverted dropout as a pure function with an explicit rng."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jnp.ndarray


def dropout(x: Array, rate: float, rng: jax.Array | None, deterministic: bool) -> Array:
    """Zero each element with probability `rate` and scale the rest by 1 / (1 - rate).

    Args:
      x: any shape.
      rate: drop probability in [0, 1).
      rng: PRNG key; required unless `deterministic` or `rate == 0`.
      deterministic: if True, return `x` unchanged (evaluation and decoding).
    """
    if deterministic or rate == 0.0:
        return x
    if rng is None:
        raise ValueError("dropout needs an rng when deterministic=False and rate > 0.")
    # Materialise the key before the mask: XLA would otherwise fuse the key's derivation
    # (the step fold-in and flax's per-module fold-ins, a chain of Threefry hashes) into
    # the mask's elementwise loop and recompute it for every element.
    rng = _materialized(rng)
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


def _materialized(rng: jax.Array) -> jax.Array:
    """`rng` computed as its own XLA op (an optimization barrier on the key data)."""
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        impl = jax.random.key_impl(rng)
        return jax.random.wrap_key_data(
            jax.lax.optimization_barrier(jax.random.key_data(rng)), impl=impl
        )
    return jax.lax.optimization_barrier(rng)  # a raw uint32 key
