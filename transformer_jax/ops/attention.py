"""Attention as pure functions over heads: queries (B, H, T, K), keys/values (B, H, S, K).

Scoring and attending are separate so the scorer is a switch (d2l §10.3 asks whether
additive attention is a good replacement for scaled dot-product attention in the
Transformer; `ModelConfig.attention_kind` lets an experiment answer that).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from transformer_jax.ops.dropout import dropout
from transformer_jax.ops.matmul import einsum
from transformer_jax.ops.softmax import masked_softmax

Array = jnp.ndarray


def dot_product_scores(q: Array, k: Array, *, gradients: str = "autodiff") -> Array:
    """Scaled dot-product scores QKᵀ/√K (Vaswani et al. 2017, eq. 1).

    Scaling by √K keeps the score variance near 1 when q and k have unit-variance
    entries, so the softmax does not saturate (d2l §10.3.2).

    Args:
      q: (B, H, T, K) queries.
      k: (B, H, S, K) keys.
      gradients: derivative rule of the matmuls, "autodiff" or "custom_vjp" (`ops.einsum`).

    Returns:
      (B, H, T, S) scores.
    """
    q = q / jnp.sqrt(jnp.asarray(q.shape[-1], q.dtype))
    return einsum("BHTK,BHSK->BHTS", q, k, gradients=gradients)


def additive_scores(q_features: Array, k_features: Array, w_v: Array) -> Array:
    """Additive (MLP) scores vᵀ tanh(W_q q + W_k k) (Bahdanau et al. 2015; d2l §10.3.2).

    The projections W_q q and W_k k are done by the caller (they own parameters).

    Args:
      q_features: (B, H, T, A) projected queries W_q q.
      k_features: (B, H, S, A) projected keys W_k k.
      w_v: (H, A) or (A,) the scoring vector v.

    Returns:
      (B, H, T, S) scores.
    """
    hidden = jnp.tanh(q_features[:, :, :, None, :] + k_features[:, :, None, :, :])  # (B,H,T,S,A)
    if w_v.ndim == 1:
        return jnp.einsum("BHTSA,A->BHTS", hidden, w_v)
    return jnp.einsum("BHTSA,HA->BHTS", hidden, w_v)


def attend(
    scores: Array,
    v: Array,
    mask: Array | None = None,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    gradients: str = "autodiff",
) -> tuple[Array, Array]:
    """Masked softmax over scores, attention dropout, weighted sum of values.

    Args:
      scores: (B, H, T, S).
      v: (B, H, S, K) values.
      mask: boolean broadcastable to (B, H, T, S), True = may attend.
      gradients: derivative rule of the matmuls, "autodiff" or "custom_vjp" (`ops.einsum`).

    Returns:
      out: (B, H, T, K) and weights: (B, H, T, S) (before dropout, for visualisation).
    """
    weights = masked_softmax(scores, mask)  # (B, H, T, S)
    dropped = dropout(weights, dropout_rate, dropout_rng, deterministic)
    out = einsum("BHTS,BHSK->BHTK", dropped.astype(v.dtype), v, gradients=gradients)  # (B, H, T, K)
    return out, weights


def scaled_dot_product_attention(
    q: Array,
    k: Array,
    v: Array,
    mask: Array | None = None,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    gradients: str = "autodiff",
) -> tuple[Array, Array]:
    """softmax(QKᵀ/√K)·V with a mask and attention dropout.

    Args:
      q: (B, H, T, K), k: (B, H, S, K), v: (B, H, S, K).
      mask: boolean broadcastable to (B, H, T, S), True = may attend.
      gradients: derivative rule of the matmuls, "autodiff" or "custom_vjp" (`ops.einsum`).

    Returns:
      out: (B, H, T, K), weights: (B, H, T, S).
    """
    return attend(
        dot_product_scores(q, k, gradients=gradients),
        v,
        mask,
        dropout_rate=dropout_rate,
        dropout_rng=dropout_rng,
        deterministic=deterministic,
        gradients=gradients,
    )
