"""Norm module: owns scale (and bias) and calls `ops.layer_norm` / `ops.rms_norm`."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.params import param


class Norm(nn.Module):
    """LayerNorm or RMSNorm over the last axis, chosen by `config.norm_kind`.

    (B, T, D) -> (B, T, D)
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        cfg = self.config
        dim = x.shape[-1]
        scale = param(self, "scale", nn.initializers.ones, (dim,))
        if cfg.norm_kind == "rms":
            return ops.rms_norm(x, scale, cfg.norm_eps)
        bias = param(self, "bias", nn.initializers.zeros, (dim,))
        return ops.layer_norm(x, scale, bias, cfg.norm_eps)
