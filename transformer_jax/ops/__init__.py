"""Pure array functions, no parameters: masks, softmax, attention, norms, FFN, positions."""

from transformer_jax.ops.attention import (
    additive_scores,
    attend,
    dot_product_scores,
    scaled_dot_product_attention,
)
from transformer_jax.ops.dropout import dropout
from transformer_jax.ops.ffn import ACTIVATIONS, position_wise_ffn
from transformer_jax.ops.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    segment_mask,
    valid_length_mask,
)
from transformer_jax.ops.matmul import GRADIENTS, ForwardModeError, dense, einsum
from transformer_jax.ops.norms import layer_norm, rms_norm
from transformer_jax.ops.positional import sinusoidal_rows, sinusoidal_table
from transformer_jax.ops.softmax import masked_softmax, softmax

__all__ = [
    "ACTIVATIONS",
    "GRADIENTS",
    "ForwardModeError",
    "additive_scores",
    "attend",
    "causal_mask",
    "combine_masks",
    "dense",
    "dot_product_scores",
    "dropout",
    "einsum",
    "layer_norm",
    "masked_softmax",
    "padding_mask",
    "position_wise_ffn",
    "rms_norm",
    "scaled_dot_product_attention",
    "segment_mask",
    "sinusoidal_rows",
    "sinusoidal_table",
    "softmax",
    "valid_length_mask",
]
