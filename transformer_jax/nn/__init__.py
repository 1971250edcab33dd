"""Flax linen modules: they own parameters and call `transformer_jax.ops`."""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.nn.attention": ["MultiHeadAttention"],
        "transformer_jax.nn.blocks": ["DecoderBlock", "EncoderBlock"],
        "transformer_jax.nn.config": ["ModelConfig"],
        "transformer_jax.nn.einsum": ["Einsum"],
        "transformer_jax.nn.embedding": ["Embed", "PositionalEncoding"],
        "transformer_jax.nn.feed_forward": ["FeedForward"],
        "transformer_jax.nn.normalization": ["Norm"],
        "transformer_jax.nn.residual": ["Residual"],
        "transformer_jax.nn.stacks": ["Decoder", "Encoder"],
        "transformer_jax.nn.transformer": [
            "CausalLM",
            "OutputProjection",
            "Packing",
            "Transformer",
        ],
    },
)
