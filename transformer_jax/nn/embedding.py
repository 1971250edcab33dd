"""Token embeddings scaled by √D, and positional encodings with embedding dropout."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.params import param


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
        self.table = param(
            self, "embedding", nn.initializers.normal(stddev=d**-0.5), (self.vocab_size, d)
        )

    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        dt = self.config.compute_dtype
        x = jnp.take(self.table, tokens, axis=0)  # (B, T, D)
        return (x * jnp.sqrt(float(self.config.model_dim))).astype(dt)

    def attend(self, x: jnp.ndarray) -> jnp.ndarray:
        """(B, T, D) -> (B, T, V) float32 logits against the embedding matrix."""
        cfg = self.config
        return ops.dense(
            "BTD,VD->BTV",
            x,
            self.table,
            dtype=cfg.compute_dtype,
            out_dtype=jnp.float32,
            gradients=cfg.gradients,
        )


class PositionalEncoding(nn.Module):
    """Adds sinusoidal or learned positions, then dropout. (B, T, D) -> (B, T, D).

    Sinusoidal rows are computed for any position (no length limit); a learned table has
    `max_len` rows, and a longer sequence is a clear error naming that limit. In decode mode
    the current position is kept in the `cache` collection, so one token at a time gets the
    right row.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, positions: jnp.ndarray | None = None) -> jnp.ndarray:
        """x (B, T, D); `positions` (B, T) int, each token's place in its sentence (packed
        rows restart at 0 for each sentence); None = 0..T-1 (after the cache in decode mode)."""
        cfg = self.config
        length, dim = x.shape[1], x.shape[2]
        limit = cfg.position_limit
        if limit is not None and length > limit:
            raise ValueError(
                f"Sequence length {length} exceeds the learned position table "
                f"(model.max_len={limit}): a model with positional='learned' cannot encode "
                "longer sequences. Shorten the input, or train with a larger model.max_len "
                "(or positional='sinusoidal', which has no limit)."
            )
        offset = 0
        if cfg.decode:
            initialized = self.has_variable("cache", "position_index")
            index = self.variable("cache", "position_index", lambda: jnp.array(0, jnp.int32))
            if initialized:
                offset = index.value
                index.value = offset + length
        if positions is not None and cfg.decode:
            raise ValueError("explicit positions are for packed training rows, not decode mode.")
        if cfg.positional == "learned":
            table = param(
                self, "position_embedding", nn.initializers.normal(0.02), (cfg.max_len, dim)
            )
            if positions is None:
                rows = jax.lax.dynamic_slice_in_dim(table, offset, length, axis=0)[None]
            else:  # every position < T <= max_len (checked above)
                rows = jnp.take(table, positions, axis=0)  # (B, T, D)
        else:
            # Computed for the positions themselves: no table, so no length limit.
            if positions is None:
                positions = (offset + jnp.arange(length, dtype=jnp.int32))[None]  # (1, T)
            rows = ops.sinusoidal_rows(positions, dim)  # (1 or B, T, D)
        return self._dropout(x + rows.astype(x.dtype))

    def _dropout(self, x: jnp.ndarray) -> jnp.ndarray:
        cfg = self.config
        deterministic = cfg.deterministic or cfg.dropout_rate == 0
        rng = None if deterministic else self.make_rng("dropout")
        return ops.dropout(x, cfg.dropout_rate, rng, deterministic)
