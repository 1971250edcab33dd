"""Length buckets: pad each batch to the smallest of a few fixed lengths instead of the maximum.

Short Tatoeba sentences padded to `num_steps` are mostly padding; grouping similar lengths
cuts wasted compute. The boundaries are a small fixed set so that a jitted train step compiles
once per boundary, not once per batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from transformer_jax.data.encoding import EncodedPairs


def default_boundaries(max_len: int, step: int) -> tuple[int, ...]:
    """step, 2*step, ... up to `max_len` (always included): e.g. (8, 16, 24, 32)."""
    boundaries = list(range(step, max_len, step)) + [max_len]
    return tuple(b for b in boundaries if b >= 2)


def resolve_boundaries(
    boundaries: Sequence[int], step: int, max_src_len: int, max_tgt_len: int
) -> tuple[int, ...]:
    """Configured boundaries (or the default grid), capped so the last covers both max lengths."""
    max_len = max(max_src_len, max_tgt_len)
    chosen = [b for b in boundaries if b < max_len] if boundaries else []
    if not boundaries:
        return default_boundaries(max_len, step)
    return tuple(chosen) + (max_len,)


def by_token_budget(batch_tokens: int, packing: bool, buckets: bool) -> bool:
    """Whether a token budget sets the training batches' rows: it does with packed rows or
    length buckets (`token_budget_rows`); the global batch size then sizes only the rest."""
    return bool(batch_tokens) and bool(packing or buckets)


def token_budget_rows(batch_tokens: int, width: int, shards: int) -> int:
    """Global rows of a batch of `width`-token rows within `batch_tokens` padded tokens (fairseq's
    --max-tokens): as many as fit, rounded down to a multiple of `shards` (processes · devices,
    so every device gets as many), at least one a shard."""
    return max(batch_tokens // width // shards * shards, shards)


def bucket_ids(encoded: EncodedPairs, boundaries: Sequence[int]) -> np.ndarray:
    """(N,) index of the smallest boundary >= max(src_len, tgt_len) of each example."""
    lengths = np.maximum(encoded.src_len, encoded.tgt_len)
    return np.searchsorted(np.asarray(boundaries), lengths, side="left").astype(np.int32)


def padding_fraction(batches: Iterable[dict[str, np.ndarray]]) -> float:
    """Pad tokens / all tokens over `src` and `tgt_out` of the batches (any leading shape)."""
    real = total = 0
    for batch in batches:
        real += int(batch["src_len"].sum()) + int(batch["tgt_weight"].sum())
        total += batch["src"].size + batch["tgt_out"].size
    return 1.0 - real / total if total else 0.0
