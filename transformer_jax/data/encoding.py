"""Sentence pairs -> fixed-width id arrays, and arrays -> model-ready batches.

Follows d2l "Machine Translation and the Dataset": each sequence gets `<eos>` appended and is
padded to a fixed width; the valid length counts non-pad tokens. A pair longer than the
limits is skipped whole (the default: a translator learns from whole sentences) or, for the
book's setting, truncated to `num_steps` (`truncate_pad`).
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


LONG_PAIRS = ("skip", "truncate")


@dataclasses.dataclass(frozen=True)
class EncodedPairs:
    """N encoded pairs, padded to the maximum lengths.

    src: int32 (N, S_max), tokens + <eos>, PAD_ID after.  src_len: int32 (N,).
    tgt: int32 (N, T_max), likewise for the target (this is the decoder *output*).  tgt_len: (N,).
    index: int32 (N,), each row's position in the list of pairs that was encoded (rows of
      skipped pairs are absent); None means row i is pair i.
    num_skipped: pairs left out because a side was longer than its limit.
    """

    src: np.ndarray
    src_len: np.ndarray
    tgt: np.ndarray
    tgt_len: np.ndarray
    index: np.ndarray | None = None
    num_skipped: int = 0

    def __len__(self) -> int:
        return len(self.src_len)


@dataclasses.dataclass(frozen=True)
class TokenizedPairs:
    """Token ids + <eos> of every pair, untruncated, and their lengths src_len / tgt_len (N,).

    origin: int32 (N, 2), the real pairs row i was made of (data/augment.py joins two; the
      second is -1 for a real pair); None means row i is pair i.
    """

    src: list[list[int]]
    tgt: list[list[int]]
    src_len: np.ndarray
    tgt_len: np.ndarray
    origin: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.src)


def truncate_pad(ids: Sequence[int], max_len: int) -> tuple[np.ndarray, int]:
    """ids + <eos>, truncated to `max_len` (the book may cut off <eos>), padded with PAD_ID."""
    seq = (list(ids) + [EOS_ID])[:max_len]
    out = np.full(max_len, PAD_ID, np.int32)
    out[: len(seq)] = seq
    return out, len(seq)


def encode_text(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids + `<eos>` of one sentence, whole: a training source row and a translation
    input are made by this one function (d2l §10.5 `build_array_nmt` appends `<eos>`)."""
    return [*tokenizer.encode(text), EOS_ID]


def tokenize_pairs(
    pairs: Sequence[tuple[str, str]], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> TokenizedPairs:
    """Every pair tokenised once, `<eos>` appended, nothing cut."""
    src = [encode_text(src_tokenizer, s) for s, _ in pairs]
    tgt = [encode_text(tgt_tokenizer, t) for _, t in pairs]
    lengths = lambda rows: np.fromiter(map(len, rows), np.int32, len(rows))
    return TokenizedPairs(src, tgt, lengths(src), lengths(tgt))


def pad_pairs(
    tokenized: TokenizedPairs, max_src_len: int, max_tgt_len: int, long_pairs: str = "skip"
) -> EncodedPairs:
    """Tokenised pairs -> fixed-width arrays, whole pairs only or the book's truncation.

    long_pairs="skip": a pair with more than `max_src_len` source or `max_tgt_len` target
      tokens (with `<eos>`) is left out and counted in `num_skipped`; every kept pair is whole.
    long_pairs="truncate": d2l's `truncate_pad` (§10.5): every pair is kept, each side cut to
      its limit (which may cut off `<eos>`).
    """
    if long_pairs not in LONG_PAIRS:
        raise ValueError(f"long_pairs={long_pairs!r}; choose one of {LONG_PAIRS}.")
    if long_pairs == "skip":
        keep = (tokenized.src_len <= max_src_len) & (tokenized.tgt_len <= max_tgt_len)
        index = np.flatnonzero(keep).astype(np.int32)
    else:
        index = np.arange(len(tokenized), dtype=np.int32)
    n = len(index)
    src = np.full((n, max_src_len), PAD_ID, np.int32)
    tgt = np.full((n, max_tgt_len), PAD_ID, np.int32)
    src_len = np.zeros(n, np.int32)
    tgt_len = np.zeros(n, np.int32)
    for row, i in enumerate(index):
        s, t = tokenized.src[i][:max_src_len], tokenized.tgt[i][:max_tgt_len]
        src[row, : len(s)], src_len[row] = s, len(s)
        tgt[row, : len(t)], tgt_len[row] = t, len(t)
    return EncodedPairs(src, src_len, tgt, tgt_len, index, len(tokenized) - n)


def encode_pairs(
    pairs: Sequence[tuple[str, str]],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    max_src_len: int,
    max_tgt_len: int,
    long_pairs: str = "truncate",
) -> EncodedPairs:
    """Encodes every pair once (see `pad_pairs`); batches are then cheap numpy gathers."""
    tokenized = tokenize_pairs(pairs, src_tokenizer, tgt_tokenizer)
    return pad_pairs(tokenized, max_src_len, max_tgt_len, long_pairs)


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
