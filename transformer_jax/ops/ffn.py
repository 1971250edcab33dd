"""Position-wise feed-forward network (Vaswani et al. 2017, eq. 2; d2l §11.7.2)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from transformer_jax.ops.dropout import dropout
from transformer_jax.ops.matmul import dense

Array = jnp.ndarray

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu,
    # The exact erf form, as in BERT; the tanh approximation is a separate choice.
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
}


def position_wise_ffn(
    x: Array,
    w1: Array,
    b1: Array | None,
    w2: Array,
    b2: Array | None,
    *,
    activation: str = "relu",
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    gradients: str = "autodiff",
) -> Array:
    """dense → activation → dropout → dense, applied to every position alike.

    Args:
      x: (B, T, D).
      w1: (D, F), b1: (F,), w2: (F, D), b2: (D,). Weights are cast to x.dtype (the
        compute dtype); biases are added in float32 (`ops.dense`).
      gradients: derivative rule of the matmuls, "autodiff" or "custom_vjp" (`ops.einsum`).

    Returns:
      (B, T, D).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
    # The activation runs on the float32 sum (accumulation + bias), rounded once after it.
    dtype = x.dtype
    h = dense("BTD,DF->BTF", x, w1, b1, dtype=dtype, out_dtype=jnp.float32, gradients=gradients)
    h = ACTIVATIONS[activation](h).astype(dtype)  # (B, T, F)
    h = dropout(h, dropout_rate, dropout_rng, deterministic)
    return dense("BTF,FD->BTD", h, w2, b2, dtype=dtype, gradients=gradients)  # (B, T, D)
