"""Id lists in, generated ids out: sort, batch, pad and decode over the local devices.

    tokens = decode_ids(model_config, params, [[4, 11, 2], [5, 6, 7, 11, 2]], beam_size=4)

Text never reaches this module: `inference.Translator` encodes sentences with data/'s
`encode_text` (ids + `<eos>`, as in training) and decodes the ids it gets back here.

Sources are never cut: only a model with a learned position table has a hard limit (a clear
error). The output budget follows the source, as fairseq's `--max-len-a/b`: at most
`max_len_a · W + max_len_b` tokens, W the batch's source width (its longest source rounded
up to a multiple of 8). Sources are sorted by length so a batch holds similar lengths,
padded to a few fixed shapes, and returned in the input order. Each shape is one
compilation, so the budget follows the width rather than the longest source itself: a
budget is a cap (decoding stops when every hypothesis has ended), and one program per
width instead of one per (width, budget) pair is 4 beam programs instead of 9 for the
fra-eng test split (about 2.5 s of compiling each for the README model).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax.data.vocab import EOS_ID
from transformer_jax.decoding import model_decode
from transformer_jax.nn import ModelConfig

# Source widths and output budgets are rounded up to a multiple of this: few compilations.
LENGTH_BUCKET = 8
# fairseq-style output budget a·S + b; training configs set their own (`eval.max_len_a/b`).
DEFAULT_MAX_LEN_A = 2.0
DEFAULT_MAX_LEN_B = 10


class SourceTooLongError(ValueError):
    """A source needs more positions than a learned position table has."""


def output_budget(
    src_width: int,
    *,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    max_decode_len: int | None = None,
    position_limit: int | None = None,
) -> int:
    """Most tokens to generate for sources of `src_width` tokens (with `<eos>`).

    `max_decode_len` if given, else ceil(a·S + b) rounded up to a multiple of LENGTH_BUCKET
    (one compilation per rounded budget); within a learned position table's limit.
    """
    if max_decode_len:
        length = int(max_decode_len)
    else:
        length = round_up(max(1, math.ceil(max_len_a * src_width + max_len_b)), LENGTH_BUCKET)
    return min(length, position_limit) if position_limit is not None else length


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= n."""
    return -(-n // multiple) * multiple


def pad_batch(rows: list[list[int]], num_rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pad to (num_rows, width); filler rows are a lone <eos> so no row is fully masked."""
    src = np.zeros((num_rows, width), np.int32)
    src_len = np.ones((num_rows,), np.int32)
    src[:, 0] = EOS_ID
    for r, ids in enumerate(rows):
        src[r, : len(ids)] = ids
        src_len[r] = len(ids)
    return src, src_len


def _batch_rows(n: int, batch_size: int, num_devices: int) -> int:
    """Rows of a batch of n sentences: batch_size, or a power of two for a short last batch."""
    rows = batch_size if n >= batch_size else 1 << max(0, n - 1).bit_length()
    return round_up(max(rows, num_devices), num_devices)


def decode_ids(
    model_config: ModelConfig,
    params: Any,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int = 1,
    max_decode_len: int | None = None,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    batch_size: int = 64,
    alpha: float = 0.6,
) -> list[np.ndarray]:
    """Decode non-empty id lists (each already ending in <eos>) -> generated ids per source.

    Each batch may generate `output_budget(W)` tokens, W its source width (see the module
    docstring). Returns one (L,) array per source (the best hypothesis: `<eos>` then `<pad>`).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    cfg = model_config.replace(deterministic=True, decode=False)
    limit = cfg.position_limit
    longest = max(map(len, sources), default=0)
    if limit is not None and longest > limit:
        raise SourceTooLongError(
            f"a source of {longest} tokens is longer than the learned position table "
            f"(model.max_len={limit})."
        )
    mesh = model_decode.local_mesh()
    num_devices = mesh.devices.size
    # Once, replicated on every device: not a host-to-device copy per batch.
    params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[np.ndarray] = [np.zeros((0,), np.int32)] * len(sources)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        rows = [list(sources[i]) for i in chunk]
        longest = max(map(len, rows))
        width = round_up(longest, LENGTH_BUCKET)
        if limit is not None:
            width = min(width, limit)
        length = output_budget(
            width,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            max_decode_len=max_decode_len,
            position_limit=limit,
        )
        src, src_len = pad_batch(rows, _batch_rows(len(rows), batch_size, num_devices), width)
        decode = model_decode.sharded_decoder(
            cfg, beam_size=beam_size, max_decode_len=length, alpha=float(alpha), mesh=mesh
        )
        tokens = np.asarray(decode(params, src, src_len))  # (B, L) or (B, W, L)
        if tokens.ndim == 3:
            tokens = tokens[:, 0]  # the best of the n-best
        for r, i in enumerate(chunk):
            out[i] = tokens[r]
    return out
