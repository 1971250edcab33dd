"""Boolean attention masks, all broadcastable to scores of shape (B, H, T, S).

`True` means "may attend". Two valid-length forms come from d2l §10.7/§11.7: the encoder
and the encoder–decoder attention use one valid length per sequence, shape (B,); the
decoder's training-time self-attention uses one valid length per *query*, shape (B, T),
with rows [1, 2, …, T] so that query i sees only keys 0..i (equivalent to a causal mask).
"""

from __future__ import annotations

import jax.numpy as jnp

Array = jnp.ndarray


def valid_length_mask(valid_lens: Array, num_keys: int) -> Array:
    """Mask keys at positions >= the valid length.

    Args:
      valid_lens: (B,) one length per sequence, or (B, T) one length per query.
      num_keys: S, the number of key positions.

    Returns:
      (B, 1, 1, S) for (B,) lengths, (B, 1, T, S) for (B, T) lengths.
    """
    valid_lens = jnp.asarray(valid_lens)
    if valid_lens.ndim not in (1, 2):
        raise ValueError(
            f"valid_lens must have shape (B,) or (B, T), got {valid_lens.shape}; pass one "
            "length per sequence or one per query."
        )
    positions = jnp.arange(num_keys)  # (S,)
    mask = positions < valid_lens[..., None]  # (B, S) or (B, T, S)
    if valid_lens.ndim == 1:
        return mask[:, None, None, :]  # (B, 1, 1, S)
    return mask[:, None, :, :]  # (B, 1, T, S)


def causal_mask(num_queries: int, num_keys: int | None = None, offset: int | Array = 0) -> Array:
    """Query i (at absolute position offset + i) may attend to keys 0..offset + i.

    Returns:
      (1, 1, T, S) boolean.
    """
    num_keys = num_queries if num_keys is None else num_keys
    q_pos = jnp.arange(num_queries)[:, None] + offset  # (T, 1)
    k_pos = jnp.arange(num_keys)[None, :]  # (1, S)
    return (k_pos <= q_pos)[None, None]  # (1, 1, T, S)


def segment_mask(query_segments: Array, key_segments: Array) -> Array:
    """Tokens of a packed row attend only within their own sentence.

    A packed row (data/packing.py) holds several sentences one after another, numbered
    1, 2, … in `segments`, with 0 on padding. A query may attend to a key of the same number:
    sentences never see each other or the padding, and padding queries see only padding (or
    nothing; `masked_softmax` gives such a row zero weights), whose outputs carry no loss.

    Args:
      query_segments: (B, T) int, the segment of each query token.
      key_segments: (B, S) int, the segment of each key token.

    Returns:
      (B, 1, T, S) boolean.
    """
    same = query_segments[:, :, None] == key_segments[:, None, :]  # (B, T, S)
    return same[:, None, :, :]


def padding_mask(tokens: Array, pad_id: int = 0) -> Array:
    """Mask keys that are padding tokens.

    Args:
      tokens: (B, S) token ids.

    Returns:
      (B, 1, 1, S) boolean, False on padding.
    """
    return (tokens != pad_id)[:, None, None, :]


def combine_masks(*masks: Array | None) -> Array | None:
    """Logical AND of the given masks (None entries are ignored; all None gives None)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = jnp.logical_and(out, m)
    return out
