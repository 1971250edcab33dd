"""MultiHeadAttention: owns the Q, K, V, O projections and the decode cache.

Heads are chunks of the *projections* (d2l §11.5): a (D, H, K) kernel maps (B, T, D)
straight to (B, H, T, K), which is the book's `transpose_qkv` of a (D, D) projection.
The parameter tree (query/key/value/out with kernel and bias) matches
`flax.linen.MultiHeadDotProductAttention`, so weights move between the two unchanged.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.einsum import Einsum
from transformer_jax.nn.params import param

Array = jnp.ndarray


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a selectable scorer and an optional decode cache.

    In `config.decode` mode:
    - `cache="self"` (causal self-attention) keeps the projected keys and values of past
      positions in the `cache` collection, so each new token costs O(T) instead of
      recomputing the prefix;
    - `cache="memory"` (encoder–decoder attention) projects the encoder memory into keys
      and values on the first step only and reuses them for every later step: the memory
      does not change while a sentence is decoded, and re-projecting it (2·S·D² FLOPs per
      layer per token) would cost more than the rest of the step together. The memory may
      have fewer rows than the queries: beam search keeps one projected memory per
      sentence (B rows) for its B·W hypotheses, and the W queries of a sentence attend to
      it together, as W query positions of one row (see `_group_rows`).
    Attention weights (B, H, T, S) are recorded with
    `sow("intermediates", "attention_weights", ...)` for heatmaps.
    """

    config: ModelConfig
    cache: str | None = None  # None | "self" | "memory"

    def setup(self) -> None:
        cfg = self.config
        d, h, k = cfg.model_dim, cfg.num_heads, cfg.head_dim
        projection = functools.partial(
            Einsum, dtype=cfg.compute_dtype, gradients=cfg.gradients, use_bias=cfg.use_bias
        )
        self.query = projection("BTD,DHK->BHTK", (d, h, k))  # (B, T, D) -> (B, H, T, K)
        self.key = projection("BTD,DHK->BHTK", (d, h, k))
        self.value = projection("BTD,DHK->BHTK", (d, h, k))
        self.out = projection("BHTK,HKD->BTD", (h, k, d))  # concatenate heads, then W_o
        if cfg.attention_kind == "additive":
            a = cfg.additive_dim or k
            init = nn.initializers.xavier_uniform(in_axis=1, out_axis=2)
            self.additive_query = param(self, "additive_query", init, (h, k, a))
            self.additive_key = param(self, "additive_key", init, (h, k, a))
            self.additive_v = param(self, "additive_v", nn.initializers.normal(a**-0.5), (h, a))

    @nn.compact  # cache variables are created lazily, on the first (init) call
    def __call__(self, x_q: Array, x_kv: Array, mask: Array | None = None) -> Array:
        """x_q: (B, T, D), x_kv: (B, S, D), mask: broadcastable to (B, H, T, S) -> (B, T, D)."""
        cfg = self.config
        q = self.query(x_q)  # (B, H, T, K)
        if cfg.decode and self.cache == "self":
            key, value, mask = self._update_self_cache(self.key(x_kv), self.value(x_kv))
        elif cfg.decode and self.cache == "memory":
            key, value = self._memory_key_value(x_kv)
        else:
            key, value = self.key(x_kv), self.value(x_kv)  # (B, H, S, K) each
        # Beam search: B·W query rows, one memory row per sentence (mask: (B, 1, 1, S)).
        groups = q.shape[0] // key.shape[0]
        if groups * key.shape[0] != q.shape[0]:
            raise ValueError(
                f"{q.shape[0]} query rows do not share {key.shape[0]} memory rows evenly: "
                "give the memory one row per query row, or one per group of W "
                "consecutive query rows (beam search's layout)."
            )
        q = _group_rows(q, groups)  # (B, H, W·T, K)

        if cfg.attention_kind == "dot":
            scores = ops.dot_product_scores(q, key, gradients=cfg.gradients)  # (B, H, T, S)
        else:
            q_f = self._additive_features(q, self.additive_query)  # (B, H, T, A)
            k_f = self._additive_features(key, self.additive_key)  # (B, H, S, A)
            v = self.additive_v.astype(cfg.compute_dtype)
            scores = ops.additive_scores(q_f, k_f, v)  # (B, H, T, S)

        deterministic = cfg.deterministic or cfg.attention_dropout_rate == 0
        out, weights = ops.attend(
            scores,
            value,
            mask,
            dropout_rate=cfg.attention_dropout_rate,
            dropout_rng=None if deterministic else self.make_rng("dropout"),
            deterministic=deterministic,
            gradients=cfg.gradients,
        )  # (B, H, T, K), (B, H, T, S)
        out, weights = _ungroup_rows(out, groups), _ungroup_rows(weights, groups)
        self.sow("intermediates", "attention_weights", weights)
        return self.out(out)  # (B, T, D)

    def _additive_features(self, x: Array, w: Array) -> Array:
        """(B, H, T, K) -> (B, H, T, A): each head's own (K, A) projection of the scorer.

        The einsum asks for heads first, the order its batched dot produces, and the result
        is transposed after: in bfloat16, XLA:CPU has no float32-accumulating kernel for
        "BHTK,HKA->BHTA" as one dot ("Unsupported element type for DotThunk::Execute: BF16
        x BF16 = F32").
        """
        cfg = self.config
        y = ops.dense(
            "BHTK,HKA->HBTA", x, w, dtype=cfg.compute_dtype, gradients=cfg.gradients
        )  # (H, B, T, A)
        return y.swapaxes(0, 1)

    def _update_self_cache(self, key: Array, value: Array) -> tuple[Array, Array, Array | None]:
        """Write this call's keys/values at the cache index; mask the unwritten slots.

        On the `init` call (which sizes the cache from a full-length target) nothing is
        read back and a causal mask is used. Afterwards each call appends T new positions.
        """
        initialized = self.has_variable("cache", "cached_key")
        cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
        cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape, value.dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.array(0, jnp.int32))
        if not initialized:
            max_len = key.shape[2]
            return key, value, ops.causal_mask(max_len, max_len)
        i = index.value
        num_new, max_len = key.shape[2], cached_key.value.shape[2]
        # `_in_dim`: the other start indices take i's dtype (int32 literals beside an int64
        # index are an error when JAX_ENABLE_X64 makes Python ints int64).
        cached_key.value = jax.lax.dynamic_update_slice_in_dim(cached_key.value, key, i, axis=2)
        cached_value.value = jax.lax.dynamic_update_slice_in_dim(
            cached_value.value, value, i, axis=2
        )
        index.value = i + num_new
        # New query j sits at absolute position i + j and sees keys 0..i + j.
        mask = ops.causal_mask(num_new, max_len, offset=i)  # (1, 1, T, L)
        return cached_key.value, cached_value.value, mask

    def _memory_key_value(self, memory: Array) -> tuple[Array, Array]:
        """Project the memory (B, S, D) on the first decode step; reuse it afterwards."""
        initialized = self.has_variable("cache", "memory_key")
        if not initialized:
            key, value = self.key(memory), self.value(memory)  # (B, H, S, K)
            self.variable("cache", "memory_key", lambda: key)
            self.variable("cache", "memory_value", lambda: value)
            self.variable("cache", "memory_ready", lambda: jnp.array(False))
            return key, value
        ready = self.variable("cache", "memory_ready", lambda: jnp.array(False))
        memory_key = self.variable("cache", "memory_key", lambda: None)
        memory_value = self.variable("cache", "memory_value", lambda: None)

        def project(module: MultiHeadAttention, x: Array) -> tuple[Array, Array]:
            return module.key(x), module.value(x)

        def reuse(module: MultiHeadAttention, x: Array) -> tuple[Array, Array]:
            return memory_key.value, memory_value.value

        key, value = nn.cond(ready.value, reuse, project, self, memory)
        memory_key.value, memory_value.value = key, value
        ready.value = jnp.array(True)
        return key, value


def _group_rows(x: Array, groups: int) -> Array:
    """(B·W, H, T, X) -> (B, H, W·T, X): the W rows of each group as extra query positions.

    Rows b·W … b·W + W − 1 (beam search's layout, `search.tile_beams`) form group b. The W
    queries then share one batched dot with their sentence's memory keys: a (W·T × S)
    product per head instead of W (T × S) ones, the memory read once instead of W times.
    """
    if groups == 1:
        return x
    n, h, t, d = x.shape
    return x.reshape(n // groups, groups, h, t, d).swapaxes(1, 2).reshape(-1, h, groups * t, d)


def _ungroup_rows(x: Array, groups: int) -> Array:
    """Inverse of `_group_rows`: (B, H, W·T, X) -> (B·W, H, T, X)."""
    if groups == 1:
        return x
    b, h, wt, d = x.shape
    return x.reshape(b, h, groups, wt // groups, d).swapaxes(1, 2).reshape(-1, h, wt // groups, d)
