"""Concatenation augmentation: extra training pairs made by joining two real pairs.

Long sentences are rare in fra-eng (0.7 % of training pairs have 16 or more source words),
so a model sees few long inputs and few long outputs, and it shortens its long translations.
Joining two random pairs side by side ("a ." + "b ." -> "a . b .", on both sides) adds long
examples whose every part is a correct translation (Kondo et al. 2021, "Sentence
Concatenation Approach to Data Augmentation for Neural Machine Translation"; Nguyen et al.
2021). The real pairs are all kept; `data.concat_fraction` sets how many joined pairs are
added, as a fraction of them. The joined pairs are drawn once, with a fixed seed, so every
process of a run and every resume sees the same training set.
"""

from __future__ import annotations

import numpy as np

from transformer_jax.data.encoding import TokenizedPairs


def concatenated_pairs(
    tokenized: TokenizedPairs,
    fraction: float,
    *,
    max_src_len: int,
    max_tgt_len: int,
    seed: int,
) -> TokenizedPairs:
    """`tokenized` plus about `fraction * N` pairs that each join two distinct real pairs.

    A joined pair is the first pair's ids without its `<eos>`, then the second pair's ids
    (with `<eos>`), on each side; the result's `origin` names both. Only pairs within both
    limits are joined, and a draw whose joined sides would exceed a limit is dropped (so the
    result holds whole pairs only).

    Args:
      tokenized: the real pairs; ids end in `<eos>`.
      fraction: joined pairs to add per real pair, >= 0 (0 returns `tokenized` itself).
      max_src_len, max_tgt_len: the training limits, in tokens with `<eos>`.
      seed: draws the partners.
    """
    if fraction < 0:
        raise ValueError(f"data.concat_fraction={fraction} must be >= 0 (0 = off).")
    count = int(round(fraction * len(tokenized)))
    if count == 0:
        return tokenized
    fits = np.flatnonzero((tokenized.src_len <= max_src_len) & (tokenized.tgt_len <= max_tgt_len))
    if len(fits) < 2:
        return tokenized
    rng = np.random.default_rng(seed)
    first = fits[rng.integers(len(fits), size=count)]
    second = fits[rng.integers(len(fits), size=count)]
    keep = (
        (first != second)
        # joined length = len(a) - 1 (<eos> dropped) + len(b)
        & (tokenized.src_len[first] + tokenized.src_len[second] - 1 <= max_src_len)
        & (tokenized.tgt_len[first] + tokenized.tgt_len[second] - 1 <= max_tgt_len)
    )
    first, second = first[keep], second[keep]
    real = np.arange(len(tokenized), dtype=np.int32)
    origin = np.concatenate(
        [np.stack([real, np.full_like(real, -1)], 1), np.stack([first, second], 1)]
    ).astype(np.int32)
    src = [tokenized.src[a][:-1] + tokenized.src[b] for a, b in zip(first, second, strict=True)]
    tgt = [tokenized.tgt[a][:-1] + tokenized.tgt[b] for a, b in zip(first, second, strict=True)]
    return TokenizedPairs(
        src=tokenized.src + src,
        tgt=tokenized.tgt + tgt,
        src_len=np.concatenate(
            [tokenized.src_len, tokenized.src_len[first] + tokenized.src_len[second] - 1]
        ),
        tgt_len=np.concatenate(
            [tokenized.tgt_len, tokenized.tgt_len[first] + tokenized.tgt_len[second] - 1]
        ),
        origin=origin,
    )
