"""Flax linen modules: they own parameters and call `transformer_jax.ops`."""

from transformer_jax.nn.attention import MultiHeadAttention
from transformer_jax.nn.blocks import DecoderBlock, EncoderBlock
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.einsum import Einsum
from transformer_jax.nn.embedding import Embed, PositionalEncoding
from transformer_jax.nn.feed_forward import FeedForward
from transformer_jax.nn.normalization import Norm
from transformer_jax.nn.residual import Residual
from transformer_jax.nn.stacks import Decoder, Encoder
from transformer_jax.nn.transformer import CausalLM, OutputProjection, Packing, Transformer

__all__ = [
    "CausalLM",
    "Decoder",
    "DecoderBlock",
    "Einsum",
    "Embed",
    "Encoder",
    "EncoderBlock",
    "FeedForward",
    "ModelConfig",
    "MultiHeadAttention",
    "Norm",
    "OutputProjection",
    "Packing",
    "PositionalEncoding",
    "Residual",
    "Transformer",
]
