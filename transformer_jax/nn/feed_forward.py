"""FeedForward module: owns the two dense layers and calls `ops.position_wise_ffn`."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.params import param

# Xavier/Glorot uniform, as in the Flax WMT example and PyTorch's nn.Transformer.
kernel_init = nn.initializers.xavier_uniform()


class FeedForward(nn.Module):
    """Position-wise FFN: (B, T, D) -> (B, T, F) -> (B, T, D)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        cfg = self.config
        d, f = x.shape[-1], cfg.ffn_dim
        w1 = param(self, "w1", kernel_init, (d, f))
        b1 = param(self, "b1", nn.initializers.zeros, (f,))
        w2 = param(self, "w2", kernel_init, (f, d))
        b2 = param(self, "b2", nn.initializers.zeros, (d,))
        dt = cfg.compute_dtype
        rng = None if cfg.deterministic or cfg.dropout_rate == 0 else self.make_rng("dropout")
        return ops.position_wise_ffn(
            x.astype(dt),
            w1,
            b1,
            w2,
            b2,
            activation=cfg.activation,
            dropout_rate=cfg.dropout_rate,
            dropout_rng=rng,
            deterministic=cfg.deterministic,
            gradients=cfg.gradients,
        )
