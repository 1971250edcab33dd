"""Residual connection with three placements of the normalisation.

- "post": norm(x + dropout(f(x)))      — the paper and d2l's AddNorm (§11.7.2).
- "pre":  x + dropout(f(norm(x)))      — norm-first (Step-by-Step ch. 10; Xiong et al.
          2020); the stacks add a final norm on their outputs.
- "rezero": x + α·dropout(f(x)), α = 0 at init — every block starts as the identity
          (Bachlechner et al. 2020), so no norm is needed at all.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.normalization import Norm
from transformer_jax.nn.params import param


class Residual(nn.Module):
    """Wraps a sublayer `f: (B, T, D) -> (B, T, D)`; (B, T, D) -> (B, T, D)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, f: Callable[[jnp.ndarray], jnp.ndarray]) -> jnp.ndarray:
        cfg = self.config
        deterministic = cfg.deterministic or cfg.dropout_rate == 0
        drop = lambda y: ops.dropout(  # noqa: E731
            y,
            cfg.dropout_rate,
            None if deterministic else self.make_rng("dropout"),
            deterministic,
        )
        if cfg.norm_placement == "post":
            return Norm(cfg, name="norm")(x + drop(f(x)))
        if cfg.norm_placement == "pre":
            return x + drop(f(Norm(cfg, name="norm")(x)))
        alpha = param(self, "alpha", nn.initializers.zeros, ())
        return x + alpha.astype(x.dtype) * drop(f(x))
