"""Encoder and decoder blocks (Vaswani et al. 2017 §3.1; d2l §11.7.2, §11.7.4)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.nn.attention import MultiHeadAttention
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.feed_forward import FeedForward
from transformer_jax.nn.residual import Residual

Array = jnp.ndarray


class EncoderBlock(nn.Module):
    """Self-attention and FFN, each in a residual. (B, S, D) -> (B, S, D)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x: Array, mask: Array | None) -> Array:
        """mask: (B, 1, 1, S) source keys that may be attended to."""
        cfg = self.config
        attn = MultiHeadAttention(cfg, name="self_attention")
        x = Residual(cfg, name="self_attention_residual")(x, lambda h: attn(h, h, mask))
        ffn = FeedForward(cfg, name="ffn")
        return Residual(cfg, name="ffn_residual")(x, ffn)


class DecoderBlock(nn.Module):
    """Causal self-attention, encoder–decoder attention, FFN. (B, T, D) -> (B, T, D).

    With `memory=None` the cross-attention is left out: the same block then builds a
    decoder-only (causal language model) stack.
    """

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        x: Array,
        self_mask: Array | None,
        memory: Array | None = None,
        memory_mask: Array | None = None,
    ) -> Array:
        """self_mask: (1, 1, T, T) causal (ignored in decode mode, where the cache masks);
        memory: (B, S, D) encoder outputs; memory_mask: (B, 1, 1, S) source valid lengths."""
        cfg = self.config
        self_attn = MultiHeadAttention(cfg, cache="self", name="self_attention")
        x = Residual(cfg, name="self_attention_residual")(x, lambda h: self_attn(h, h, self_mask))
        if memory is not None:
            cross = MultiHeadAttention(cfg, cache="memory", name="cross_attention")
            x = Residual(cfg, name="cross_attention_residual")(
                x, lambda h: cross(h, memory, memory_mask)
            )
        ffn = FeedForward(cfg, name="ffn")
        return Residual(cfg, name="ffn_residual")(x, ffn)
