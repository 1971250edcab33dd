"""The encoder–decoder Transformer and a decoder-only causal language model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.nn.config import ModelConfig
from transformer_jax.nn.einsum import Einsum
from transformer_jax.nn.embedding import Embed
from transformer_jax.nn.stacks import Decoder, Encoder

Array = jnp.ndarray


class Packing(NamedTuple):
    """Where the sentences of packed rows are (data/packing.py), all int32.

    src_segment (B, S), tgt_segment (B, T): 1, 2, … for the pairs of a row (pair k's source
    and target share k), 0 on padding. src_position (B, S), tgt_position (B, T): each token's
    place in its own sentence.
    """

    src_segment: Array
    src_position: Array
    tgt_segment: Array
    tgt_position: Array

    @classmethod
    def from_batch(cls, batch: Mapping[str, Array]) -> Packing | None:
        """The packing of a training batch, or None for a batch of one pair a row."""
        if "src_segment" not in batch:
            return None
        return cls(*(batch[key] for key in cls._fields))


class OutputProjection(nn.Module):
    """(B, T, D) -> (B, T, V) float32 logits, tied to `embed` or with its own kernel."""

    config: ModelConfig
    vocab_size: int
    embed: Embed | None = None

    @nn.compact
    def __call__(self, x: Array) -> Array:
        if self.embed is not None:
            return self.embed.attend(x)  # float32
        cfg = self.config
        dense = Einsum(
            "BTD,DV->BTV",
            (cfg.model_dim, self.vocab_size),
            cfg.compute_dtype,
            cfg.gradients,
            use_bias=True,  # always: `config.use_bias` is about the attention projections
            out_dtype=jnp.float32,
            name="dense",
        )
        return dense(x)


class Transformer(nn.Module):
    """Encoder–decoder Transformer (Vaswani et al. 2017).

    Three modes from one definition, chosen by the config: training (dropout on),
    evaluation (`deterministic=True`) and incremental decoding (`decode=True`, cache on).
    """

    config: ModelConfig

    def setup(self) -> None:
        cfg = self.config
        src_embed = Embed(cfg.src_vocab_size, cfg, name="src_embed")
        tgt_embed = (
            src_embed if cfg.share_embeddings else Embed(cfg.tgt_vocab_size, cfg, name="tgt_embed")
        )
        self.encoder = Encoder(cfg, embed=src_embed)
        self.decoder = Decoder(cfg, embed=tgt_embed)
        self.output = OutputProjection(
            cfg, cfg.tgt_vocab_size, embed=tgt_embed if cfg.tie_output else None
        )

    def encode(self, src: Array, src_len: Array, packing: Packing | None = None) -> Array:
        """src (B, S) int, src_len (B,) -> memory (B, S, D)."""
        if packing is None:
            return self.encoder(src, src_len)
        return self.encoder(src, src_len, packing.src_segment, packing.src_position)

    def decode(
        self, memory: Array, src_len: Array, tgt_in: Array, packing: Packing | None = None
    ) -> Array:
        """memory (B, S, D), src_len (B,), tgt_in (B, T) -> logits (B, T, V) float32.

        In decode mode `tgt_in` holds only the new token(s), (B, 1).
        """
        if packing is None:
            return self.output(self.decoder(tgt_in, memory, src_len))
        hidden = self.decoder(
            tgt_in,
            memory,
            src_len,
            packing.tgt_segment,
            packing.tgt_position,
            packing.src_segment,
        )
        return self.output(hidden)

    def __call__(
        self, src: Array, src_len: Array, tgt_in: Array, packing: Packing | None = None
    ) -> Array:
        """Teacher-forced logits (B, T, V) for source (B, S) and decoder input (B, T).

        `packing`: the segments and positions of packed rows (several pairs a row,
        data/packing.py); None for one pair a row.
        """
        memory = self.encode(src, src_len, packing)
        return self.decode(memory, src_len, tgt_in, packing)


class CausalLM(nn.Module):
    """Decoder-only language model from the same blocks: tokens (B, T) -> logits (B, T, V)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, tokens: Array) -> Array:
        cfg = self.config
        embed = Embed(cfg.tgt_vocab_size, cfg, name="embed")
        hidden = Decoder(cfg, embed=embed, name="decoder")(tokens)
        tied = embed if cfg.tie_output else None
        return OutputProjection(cfg, cfg.tgt_vocab_size, embed=tied, name="output")(hidden)
