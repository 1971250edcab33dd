"""Pure array functions, no parameters: masks, softmax, attention, norms, FFN, positions."""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.ops.attention": [
            "additive_scores",
            "attend",
            "dot_product_scores",
            "scaled_dot_product_attention",
        ],
        "transformer_jax.ops.dropout": ["dropout"],
        "transformer_jax.ops.ffn": ["ACTIVATIONS", "position_wise_ffn"],
        "transformer_jax.ops.masks": [
            "causal_mask",
            "combine_masks",
            "padding_mask",
            "segment_mask",
            "valid_length_mask",
        ],
        "transformer_jax.ops.matmul": ["GRADIENTS", "ForwardModeError", "dense", "einsum"],
        "transformer_jax.ops.norms": ["layer_norm", "rms_norm"],
        "transformer_jax.ops.positional": ["sinusoidal_rows", "sinusoidal_table"],
        "transformer_jax.ops.softmax": ["masked_softmax", "softmax"],
    },
)
