"""Positional encodings (Vaswani et al. 2017 §3.5; d2l §11.6.3).

P[i, 2j] = sin(i / 10000^(2j/D)), P[i, 2j+1] = cos(i / 10000^(2j/D)).

`sinusoidal_table` is the float64 reference table; `sinusoidal_rows` computes the rows of
any positions on the fly, so a model with sinusoidal positions has no length limit (a sentence
longer than any seen in training is still encoded, as the paper's §3.5 intends).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def _inverse_frequencies(dim: int) -> np.ndarray:
    """(ceil(D/2),) float64: 1 / 10000^(2j/D)."""
    return 1.0 / np.power(10000.0, np.arange(0, dim, 2, dtype=np.float64) / dim)


def sinusoidal_table(max_len: int, dim: int) -> jnp.ndarray:
    """Rows 0..max_len-1 of the table, built in float64 with numpy, returned as float32.

    For odd D the last column is a sine (there is no matching cosine).

    Returns:
      (max_len, D) float32 table with values in [-1, 1].
    """
    if max_len < 1 or dim < 1:
        raise ValueError(f"sinusoidal_table needs max_len >= 1 and dim >= 1, got {max_len}, {dim}.")
    angles = np.arange(max_len, dtype=np.float64)[:, None] * _inverse_frequencies(dim)  # (L, D/2)
    table = np.zeros((max_len, dim), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return jnp.asarray(table, dtype=jnp.float32)


def sinusoidal_rows(positions: jnp.ndarray, dim: int) -> jnp.ndarray:
    """Rows of the sinusoidal table for int positions (T,) (traced or not) -> (T, D) float32.

    Any shape works: positions (B, T), e.g. restarting at 0 for each sentence of a packed row
    (data/packing.py), give (B, T, D).

    Computed in float32 (the frequencies in float64 first), so positions need no table and no
    limit; within 1e-5 of `sinusoidal_table` for positions below ~200 and within 1e-4 below
    ~2000 (the float32 rounding of the angle i·ω). Full and cached decoding call this with
    the same positions, so they see bit-identical rows.
    """
    if dim < 1:
        raise ValueError(f"sinusoidal_rows needs dim >= 1, got {dim}.")
    freq = jnp.asarray(_inverse_frequencies(dim), jnp.float32)  # (ceil(D/2),)
    angles = positions.astype(jnp.float32)[..., None] * freq  # (..., T, ceil(D/2))
    rows = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # (..., T, ceil(D/2), 2)
    return rows.reshape(*positions.shape, -1)[..., :dim]  # (..., T, D): sin, cos interleaved
