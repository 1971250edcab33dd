"""The shapes a call of id lists is decoded in: output budgets, program widths, rows,
length-sorted batches and their padding. Pure Python and numpy, no JAX (`batch_decode`
decodes in them; the CTranslate2 engine and the server size their batches with them).

Sources are never cut: only a model with a learned position table has a hard limit (a clear
error). Each source's output budget follows its own length, as fairseq's `--max-len-a/b`: at
most `max_len_a · W + max_len_b` tokens, W the source's length rounded up to a multiple of 8,
never the other sources' of its batch (the search ends each row at its own budget), so a
sentence translates the same alone or in any batch. A source longer than any the model was
trained on is still translated whole (`inference.source_ids`), but its output is capped at
the budget of a source `LONG_SOURCE_FACTOR` times the longest trained one (`output_cap`): a
model trained on sentences of up to 64 tokens, given one word of 5,000 letters, otherwise
wrote 10,400 characters of "Épaaaa…" for a 10,000-token budget. Sources are sorted by length
so a batch holds similar lengths (`sorted_batches`); `batch_decode` returns them in the
input order.

Each padded shape is one XLA program, which on an accelerator costs tens of seconds to
compile against milliseconds to run, so few shapes: a batch is padded to one of the program
widths 16, 64, 256, ... (`program_width`), and its rows' budgets are an argument of the
program (the search ends each row there), not a shape: the program's own output room is the
budget of its width. Above 1,024 tokens, widths are multiples of 1,024 (not 4,096, 16,384: a
5,000-token source would pad to 16,384), and a batch of such wide sources holds few rows
(`rows_for_width`), so the encoder's attention, rows x width², stays within that of a full
batch of 256-token sources. A call with at least `batch_size` sentences pads every batch,
the last too, to `batch_size` rows (or the fewer of its width); a smaller call (a few lines
to translate, a server's batch) to a power of two up to 8 rows, then to a multiple of 8
(`call_rows`). So a test split of sentences up to 64 tokens decodes with two programs (one
per width; four with widths rounded to 8 before). The padding costs little: the search stops
when every hypothesis has ended and beam search grows its cache with the output
(`model_decode`), so only the encoder and the cross-attention see the wider source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from transformer_jax.data.vocab import EOS_ID

# Output budgets follow the source length rounded up to a multiple of this.
LENGTH_BUCKET = 8
# Program widths: the smallest of FIRST_WIDTH * WIDTH_FACTOR**k that holds the batch, up to
# WIDE_STEP; wider batches are padded to a multiple of WIDE_STEP.
FIRST_WIDTH, WIDTH_FACTOR, WIDE_STEP = 16, 4, 1024
# A batch's rows x width² (encoder attention scores per head) stays within this: a full batch
# (64 rows) of width 256 (`rows_for_width`).
ATTENTION_CELLS = 64 * 256 * 256
# Without a fixed max_decode_len, no output is longer than the budget of a source this many
# times the longest the model was trained on (`output_cap`).
LONG_SOURCE_FACTOR = 4
# A call of fewer sentences than its batch size pads to a power of two up to this, then to a
# multiple of it (`call_rows`).
ROW_STEP = 8


class SourceTooLongError(ValueError):
    """A source needs more positions than a learned position table has."""


def output_budget(
    src_width: int,
    *,
    max_len_a: float,
    max_len_b: int,
    max_decode_len: int | None = None,
    position_limit: int | None = None,
    cap: int | None = None,
) -> int:
    """Most tokens to generate for sources of `src_width` tokens (with `<eos>`).

    `max_decode_len` if given, else ceil(a·S + b) rounded up to a multiple of LENGTH_BUCKET
    and at most `cap` (`output_cap`); within a learned position table's limit either way.
    """
    if max_decode_len:
        length = int(max_decode_len)
    else:
        length = round_up(max(1, math.ceil(max_len_a * src_width + max_len_b)), LENGTH_BUCKET)
        length = min(length, cap) if cap is not None else length
    return min(length, position_limit) if position_limit is not None else length


def output_cap(trained_len: int | None, *, max_len_a: float, max_len_b: int) -> int | None:
    """The most tokens any output may get from the a·S + b rule: the budget of a source
    `LONG_SOURCE_FACTOR` times `trained_len` (the longest training source with `<eos>`;
    None: no cap). A longer source is translated whole, as `inference.source_ids` notes,
    but its output stops there (noted too: `inference.notes.cut_note`)."""
    if not trained_len:
        return None
    return output_budget(LONG_SOURCE_FACTOR * trained_len, max_len_a=max_len_a, max_len_b=max_len_b)


def program_width(longest: int, position_limit: int | None = None) -> int:
    """The padded source width of a batch whose longest source has `longest` tokens:
    16, 64, 256, 1024 (few programs), then multiples of 1024; at most a learned position
    table's `position_limit`."""
    width = FIRST_WIDTH
    while width < min(longest, WIDE_STEP):
        width *= WIDTH_FACTOR
    width = max(width, round_up(longest, WIDE_STEP)) if longest > WIDE_STEP else width
    return min(width, position_limit) if position_limit is not None else width


def rows_for_width(width: int) -> int:
    """The most rows of a batch of program width `width`: 64 up to width 256, then fewer so
    that rows x width² <= ATTENTION_CELLS (4 at 1024, 1 from 2048): one 5,000-token word
    must not pad into a batch of 64 rows (550 GB asked for)."""
    return max(1, ATTENTION_CELLS // (width * width))


def sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of sources of `lengths`, sorted by length (stable), in batches of at most
    `batch_size` rows, and of at most `rows_for_width` rows of wide sources: the batches
    `decode_ids` decodes, and the CTranslate2 engine too."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:  # i is the longest so far: its width bounds the batch's rows
        most = min(batch_size, rows_for_width(program_width(lengths[i])))
        if not batches or len(batches[-1]) >= most:
            batches.append([])
        batches[-1].append(i)
    return batches


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


def call_rows(n: int, batch_size: int) -> int:
    """Rows of every batch of a call of n sentences: batch_size when n fills one (the last
    batch is padded too: one shape), else n rounded up to a power of two up to ROW_STEP and
    to a multiple of ROW_STEP above (a server's batches of 33-40 requests decode 40 rows,
    not 64)."""
    if n >= batch_size:
        return batch_size
    if n <= ROW_STEP:
        return 1 << max(0, n - 1).bit_length()
    return round_up(n, ROW_STEP)
