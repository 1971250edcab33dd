"""Token embeddings scaled by √D, and positional encodings with embedding dropout."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.config import ModelConfig


class Embed(nn.Module):
    """Token ids (B, T) -> (B, T, D) scaled by √D; `attend` gives tied logits (B, T, V).

    The table is initialised N(0, 1/D) and scaled by √D (d2l §11.7.3): the scaled
    embeddings have unit variance, comparable to the [-1, 1] sinusoidal table they are
    added to, while a tied output projection sees small, well-conditioned weights.
    """

    vocab_size: int
    config: ModelConfig

    def setup(self) -> None:
        d = self.config.model_dim
        self.table = self.param(
            "embedding", nn.initializers.normal(stddev=d**-0.5), (self.vocab_size, d), jnp.float32
        )

    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        dt = self.config.compute_dtype
        x = jnp.take(self.table, tokens, axis=0)  # (B, T, D)
        return (x * jnp.sqrt(float(self.config.model_dim))).astype(dt)

    def attend(self, x: jnp.ndarray) -> jnp.ndarray:
        """(B, T, D) -> (B, T, V) logits against the embedding matrix."""
        dt = self.config.compute_dtype
        return ops.einsum("BTD,VD->BTV", x.astype(dt), self.table.astype(dt), out_dtype=jnp.float32)


class PositionalEncoding(nn.Module):
    """Adds a sinusoidal or learned position table, then dropout. (B, T, D) -> (B, T, D).

    In decode mode the current position is kept in the `cache` collection, so one token at
    a time gets the right row of the table.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        cfg = self.config
        length, dim = x.shape[1], x.shape[2]
        if length > cfg.max_len:
            raise ValueError(
                f"Sequence length {length} exceeds model.max_len={cfg.max_len}; truncate the "
                "input (data.max_src_len / data.max_tgt_len) or raise model.max_len."
            )
        if cfg.positional == "learned":
            table = self.param(
                "position_embedding", nn.initializers.normal(0.02), (cfg.max_len, dim), jnp.float32
            )
        else:
            table = ops.sinusoidal_table(cfg.max_len, dim)  # (L_max, D)

        offset = 0
        if cfg.decode:
            initialized = self.has_variable("cache", "position_index")
            index = self.variable("cache", "position_index", lambda: jnp.array(0, jnp.int32))
            if initialized:
                offset = index.value
                index.value = offset + length
        rows = jax.lax.dynamic_slice_in_dim(table, offset, length, axis=0)  # (T, D)
        x = x + rows[None].astype(x.dtype)
        deterministic = cfg.deterministic or cfg.dropout_rate == 0
        rng = None if deterministic else self.make_rng("dropout")
        return ops.dropout(x, cfg.dropout_rate, rng, deterministic)
