"""Positional tables (Vaswani et al. 2017 §3.5; d2l §11.6.3)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def sinusoidal_table(max_len: int, dim: int) -> jnp.ndarray:
    """P[i, 2j] = sin(i / 10000^(2j/D)), P[i, 2j+1] = cos(i / 10000^(2j/D)).

    For odd D the last column is a sine (there is no matching cosine). Built in float64
    with numpy (a constant, folded into the program) and returned as float32.

    Returns:
      (max_len, D) float32 table with values in [-1, 1].
    """
    if max_len < 1 or dim < 1:
        raise ValueError(f"sinusoidal_table needs max_len >= 1 and dim >= 1, got {max_len}, {dim}.")
    pos = np.arange(max_len, dtype=np.float64)[:, None]  # (L, 1)
    two_j = np.arange(0, dim, 2, dtype=np.float64)  # (ceil(D/2),)
    angles = pos / np.power(10000.0, two_j / dim)  # (L, ceil(D/2))
    table = np.zeros((max_len, dim), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return jnp.asarray(table, dtype=jnp.float32)
