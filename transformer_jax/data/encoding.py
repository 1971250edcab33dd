"""Sentence pairs -> fixed-width id arrays, and arrays -> model-ready batches.

Follows d2l "Machine Translation and the Dataset": each sequence gets `<eos>` appended, then
is truncated/padded to `num_steps` (`truncate_pad`); the valid length counts non-pad tokens.
Training (d2l `train_seq2seq`) feeds the decoder `<bos>` + target shifted right and masks the
loss on padding; here that mask is the per-token weight `tgt_weight`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from transformer_jax.data.tokenizers import Tokenizer
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID

BATCH_KEYS = ("src", "src_len", "tgt_in", "tgt_out", "tgt_weight")


@dataclasses.dataclass(frozen=True)
class EncodedPairs:
    """N encoded pairs, padded to the maximum lengths.

    src: int32 (N, S_max), tokens + <eos>, truncated, PAD_ID after.  src_len: int32 (N,).
    tgt: int32 (N, T_max), likewise for the target (this is the decoder *output*).  tgt_len: (N,).
    """

    src: np.ndarray
    src_len: np.ndarray
    tgt: np.ndarray
    tgt_len: np.ndarray

    def __len__(self) -> int:
        return len(self.src_len)


def truncate_pad(ids: Sequence[int], max_len: int) -> tuple[np.ndarray, int]:
    """ids + <eos>, truncated to `max_len` (the book may cut off <eos>), padded with PAD_ID."""
    seq = (list(ids) + [EOS_ID])[:max_len]
    out = np.full(max_len, PAD_ID, np.int32)
    out[: len(seq)] = seq
    return out, len(seq)


def encode_pairs(
    pairs: Sequence[tuple[str, str]],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    max_src_len: int,
    max_tgt_len: int,
) -> EncodedPairs:
    """Encodes every pair once; batches are then cheap numpy gathers."""
    n = len(pairs)
    src = np.full((n, max_src_len), PAD_ID, np.int32)
    tgt = np.full((n, max_tgt_len), PAD_ID, np.int32)
    src_len = np.zeros(n, np.int32)
    tgt_len = np.zeros(n, np.int32)
    for i, (source, target) in enumerate(pairs):
        src[i], src_len[i] = truncate_pad(src_tokenizer.encode(source), max_src_len)
        tgt[i], tgt_len[i] = truncate_pad(tgt_tokenizer.encode(target), max_tgt_len)
    return EncodedPairs(src, src_len, tgt, tgt_len)


def make_batch(
    encoded: EncodedPairs, indices: np.ndarray, src_width: int, tgt_width: int
) -> dict[str, np.ndarray]:
    """Flat batch of the examples `indices` (B,), padded to the given widths.

    Returns src (B, S), src_len (B,), tgt_in (B, T) = <bos> + tgt_out[:-1], tgt_out (B, T),
    tgt_weight float32 (B, T): 1 on non-pad target tokens, the loss mask of d2l's
    `MaskedSoftmaxCELoss`.
    """
    tgt_out = encoded.tgt[indices, :tgt_width]
    tgt_in = np.empty_like(tgt_out)
    tgt_in[:, 0] = BOS_ID
    tgt_in[:, 1:] = tgt_out[:, :-1]
    return {
        "src": encoded.src[indices, :src_width],
        "src_len": encoded.src_len[indices],
        "tgt_in": tgt_in,
        "tgt_out": tgt_out,
        "tgt_weight": (tgt_out != PAD_ID).astype(np.float32),
    }


def shard_for_devices(batch: dict[str, np.ndarray], num_devices: int) -> dict[str, np.ndarray]:
    """(B, ...) -> (D, B / D, ...): the leading axis a pmapped step maps over."""
    return {
        key: value.reshape((num_devices, value.shape[0] // num_devices) + value.shape[1:])
        for key, value in batch.items()
    }
