"""Encoder and decoder stacks: embeddings + positions + blocks (+ final norm for pre-norm)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.blocks import DecoderBlock, EncoderBlock
from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.embedding import Embed, PositionalEncoding
from transformer_jax.nn.normalization import Norm

Array = jnp.ndarray


def _maybe_remat(block: type[nn.Module], cfg: ModelConfig) -> type[nn.Module]:
    """`nn.remat(block)` when `cfg.remat` (not in decode mode: no backward pass there)."""
    return nn.remat(block) if cfg.remat and not cfg.decode else block


class Encoder(nn.Module):
    """Token ids (B, S) and valid lengths (B,) -> (B, S, D). Also an encoder-only model.

    `embed` may be passed in to share a table with the decoder; otherwise it is created.
    A packed row (data/packing.py) holds several sentences: pass `segments` (B, S) (1, 2, …
    per sentence, 0 on padding) and `positions` (B, S) (restarting at 0 for each); attention
    then stays within each sentence and `src_len` is not used for masking.
    """

    config: ModelConfig
    embed: Embed | None = None

    @nn.compact
    def __call__(
        self,
        src: Array,
        src_len: Array,
        segments: Array | None = None,
        positions: Array | None = None,
    ) -> Array:
        cfg = self.config
        embed = self.embed or Embed(cfg.src_vocab_size, cfg, name="embed")
        x = PositionalEncoding(cfg, name="positions")(embed(src), positions)  # (B, S, D)
        if segments is None:
            mask = ops.valid_length_mask(src_len, src.shape[1])  # (B, 1, 1, S)
        else:
            mask = ops.segment_mask(segments, segments)  # (B, 1, S, S)
        block = _maybe_remat(EncoderBlock, cfg)
        for i in range(cfg.num_encoder_layers):
            x = block(cfg, name=f"block_{i}")(x, mask)
        if cfg.norm_placement == "pre":
            x = Norm(cfg, name="final_norm")(x)
        return x


class Decoder(nn.Module):
    """Target-side stack. tgt_in (B, T) [+ memory (B, S, D)] -> hidden states (B, T, D).

    With `memory=None` it is a decoder-only (causal LM) stack. In decode mode, call it
    with one (or a few) new tokens at a time; the cache holds the past.
    Packed rows (training only): `segments` / `positions` (B, T) for the targets and
    `memory_segments` (B, S) for the sources (see `Encoder`); target sentence k then sees
    its own earlier tokens and source sentence k only.
    """

    config: ModelConfig
    embed: Embed | None = None

    @nn.compact
    def __call__(
        self,
        tgt_in: Array,
        memory: Array | None = None,
        src_len: Array | None = None,
        segments: Array | None = None,
        positions: Array | None = None,
        memory_segments: Array | None = None,
    ) -> Array:
        cfg = self.config
        embed = self.embed or Embed(cfg.tgt_vocab_size, cfg, name="embed")
        x = PositionalEncoding(cfg, name="positions")(embed(tgt_in), positions)  # (B, T, D)
        # Training: the per-query valid lengths [1..T] of d2l are exactly a causal mask.
        self_mask = None if cfg.decode else ops.causal_mask(tgt_in.shape[1])  # (1, 1, T, T)
        if segments is not None:
            self_mask = ops.combine_masks(self_mask, ops.segment_mask(segments, segments))
        memory_mask = None
        if memory is not None and memory_segments is not None:
            if segments is None:
                raise ValueError("Decoder: memory_segments (packed sources) need segments too.")
            memory_mask = ops.segment_mask(segments, memory_segments)  # (B, 1, T, S)
        elif memory is not None:
            if src_len is None:
                raise ValueError("Decoder needs src_len (B,) whenever memory is given.")
            memory_mask = ops.valid_length_mask(src_len, memory.shape[1])  # (B, 1, 1, S)
        block = _maybe_remat(DecoderBlock, cfg)
        for i in range(cfg.num_decoder_layers):
            x = block(cfg, name=f"block_{i}")(x, self_mask, memory, memory_mask)
        if cfg.norm_placement == "pre":
            x = Norm(cfg, name="final_norm")(x)
        return x
