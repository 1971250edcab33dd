"""Packed rows: several whole pairs one after another in each row of a training batch.

Length buckets still pad every sentence to its bucket's width: on fra-eng, batches of ~2,048
tokens carried 71 % real source and 83 % real target tokens, and each of the six widths is
one more compiled step. Packing (tensor2tensor's and the Flax WMT example's
`pack_dataset`) fills rows of one fixed width with whole pairs instead: pair k of a row puts
its source at the next free place of the row's source side and its target at the next free
place of the target side, numbered k in `src_segment` / `tgt_segment` (0 is padding), with
positions restarting at 0 (`src_position` / `tgt_position`). The model keeps attention
within each pair (`ops.segment_mask`), so a packed row computes the same logits for each
pair as a row of its own; one shape means one compiled step.

The plan (which pairs share which row of which batch) is first fit in the epoch's shuffled
order: each pair goes to the first row of the open batch with room on both sides; after
`patience` pairs in a row found no room, the batch closes and those pairs open the next one.
With subword sampling, pairs are planned `SAMPLING_SLACK` longer than their best
segmentation, and `fit_rows` gives back the most grown draws of a row that still overflows.
"""

from __future__ import annotations

import numpy as np

from transformer_jax.data.encoding import EncodedPairs
from transformer_jax.data.vocab import BOS_ID, PAD_ID

# Pairs that may fail to fit before a batch closes: enough to fill the last gaps of a
# batch with short pairs (fill ~97 % on fra-eng), few enough to keep the order shuffled.
PATIENCE = 16

# With subword sampling, each pair is planned this much longer than its best segmentation
# (data/sampling.py: alpha 0.5 draws ~6 % more pieces on fra-eng), so most draws fit its row.
SAMPLING_SLACK = 0.125

PACKED_KEYS = ("src_segment", "src_position", "tgt_segment", "tgt_position")


def plan_epoch(
    order: np.ndarray,
    src_len: np.ndarray,
    tgt_len: np.ndarray,
    *,
    rows: int,
    src_width: int,
    tgt_width: int,
    drop_remainder: bool = True,
    patience: int = PATIENCE,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The batches of one epoch: [(pairs (n,), row of each pair (n,))], grouped by row.

    Args:
      order: (N,) the epoch's shuffled pair indices.
      src_len, tgt_len: (N_all,) lengths with `<eos>` of every pair `order` indexes; each at
        most its width (the pipeline skips or truncates longer pairs first).
      rows: rows of a (global) batch.
      drop_remainder: leave out the last, partly filled batch (a different few pairs each
        epoch), or keep it with its empty rows (all padding, zero weight).
    """
    too_long = (src_len[order] > src_width) | (tgt_len[order] > tgt_width)
    if too_long.any():
        i = int(order[np.argmax(too_long)])
        raise ValueError(
            f"pair {i} has {src_len[i]} source / {tgt_len[i]} target tokens, more than a packed "
            f"row holds ({src_width} / {tgt_width}); packing needs every pair to fit a row."
        )
    ls, lt = src_len.tolist(), tgt_len.tolist()
    batches: list[tuple[np.ndarray, np.ndarray]] = []
    waiting: list[int] = []  # pairs that found no room in the batch just closed
    queue = iter(order.tolist())
    exhausted = False
    while waiting or not exhausted:
        free_s, free_t = [src_width] * rows, [tgt_width] * rows
        pairs: list[int] = []
        row_of: list[int] = []
        deferred: list[int] = []
        misses = 0
        candidates = waiting
        waiting = []
        while misses < patience:
            if candidates:
                pair = candidates.pop(0)
            else:
                pair = next(queue, None)
                if pair is None:
                    exhausted = True
                    break
            need_s, need_t = ls[pair], lt[pair]
            for r in range(rows):
                if free_s[r] >= need_s and free_t[r] >= need_t:
                    free_s[r] -= need_s
                    free_t[r] -= need_t
                    pairs.append(pair)
                    row_of.append(r)
                    misses = 0
                    break
            else:
                deferred.append(pair)
                misses += 1
        waiting = deferred + candidates  # untried candidates keep their place after these
        full = misses >= patience
        if full or not drop_remainder:
            by_row = np.argsort(np.asarray(row_of, np.int64), kind="stable")
            batches.append(
                (np.asarray(pairs, np.int64)[by_row], np.asarray(row_of, np.int32)[by_row])
            )
        if not full:  # the order ran out: whatever waits is this epoch's remainder
            if waiting and not drop_remainder:
                continue
            break
    return batches


def packed_batch(
    encoded: EncodedPairs,
    pairs: np.ndarray,
    row_of: np.ndarray,
    *,
    first_row: int,
    num_rows: int,
    src_width: int,
    tgt_width: int,
) -> dict[str, np.ndarray]:
    """Rows [first_row, first_row + num_rows) of a packed batch as arrays.

    `pairs` (n,) index `encoded`, `row_of` (n,) their rows, grouped by row in packing order.
    Returns the batch keys of `encoding.make_batch` for (num_rows, ...) rows, `src_len` being
    the real source tokens of each row, plus `PACKED_KEYS` (int32, 0 on padding).
    """
    mine = (row_of >= first_row) & (row_of < first_row + num_rows)
    pairs, rows = pairs[mine], row_of[mine] - first_row
    # Segment k (1, 2, …) of each pair in its row: its rank among the row's pairs.
    starts_of_row = np.searchsorted(rows, np.arange(num_rows))  # rows are grouped, ascending
    segment = np.arange(len(pairs)) - starts_of_row[rows] + 1

    def side(tokens: np.ndarray, lengths: np.ndarray, width: int):
        """Scatters each pair's tokens (n, W) into its row after the row's earlier pairs."""
        before = np.cumsum(lengths) - lengths  # tokens of all earlier pairs of the batch
        offset = before - before[starts_of_row[rows]]  # ... of the earlier pairs of its row
        pair, column = np.nonzero(np.arange(tokens.shape[1]) < lengths[:, None])
        where = (rows[pair], offset[pair] + column)
        ids = np.full((num_rows, width), PAD_ID, np.int32)
        seg = np.zeros((num_rows, width), np.int32)
        pos = np.zeros((num_rows, width), np.int32)
        ids[where] = tokens[pair, column]
        seg[where] = segment[pair]
        pos[where] = column
        return ids, seg, pos, (where, pair, column)

    src_len = encoded.src_len[pairs]
    tgt_len = encoded.tgt_len[pairs]
    src, src_seg, src_pos, _ = side(encoded.src[pairs], src_len, src_width)
    tgt = encoded.tgt[pairs]
    tgt_out, tgt_seg, tgt_pos, (where, pair, column) = side(tgt, tgt_len, tgt_width)
    # Each pair's decoder input is its own <bos> + target shifted right (d2l train_seq2seq).
    shifted = np.concatenate([np.full((len(pairs), 1), BOS_ID, np.int32), tgt[:, :-1]], axis=1)
    tgt_in = np.full((num_rows, tgt_width), PAD_ID, np.int32)
    tgt_in[where] = shifted[pair, column]
    return {
        "src": src,
        "src_len": np.bincount(rows, src_len, minlength=num_rows).astype(np.int32),
        "tgt_in": tgt_in,
        "tgt_out": tgt_out,
        "tgt_weight": (tgt_seg > 0).astype(np.float32),
        "src_segment": src_seg,
        "src_position": src_pos,
        "tgt_segment": tgt_seg,
        "tgt_position": tgt_pos,
    }


def planned_lengths(lengths: np.ndarray, width: int, slack: float) -> np.ndarray:
    """Lengths to plan rows with: each `lengths` (N,) grown by `slack` of itself (rounded up),
    capped at `width`. Sampled segmentations (data/sampling.py) are often a little longer than
    the best one the plan sees; the room left in each row lets most of them fit."""
    grown = lengths + np.ceil(lengths * slack).astype(lengths.dtype)
    return np.minimum(grown, width).astype(lengths.dtype)


def fit_rows(
    drawn: EncodedPairs,
    best: EncodedPairs,
    pairs: np.ndarray,
    row_of: np.ndarray,
    *,
    src_width: int,
    tgt_width: int,
) -> tuple[EncodedPairs, int]:
    """Sampled segmentations (data/sampling.py) that still fit their packed rows.

    `drawn` holds a fresh segmentation of each of `pairs` (its row i is pair `pairs[i]`);
    the plan fitted the rows with the `best` segmentation. Where the drawn sides of a row
    overflow it, the sides that grew most go back to their best segmentation, one at a time,
    until the row fits (all of them fit by construction). Returns the rows to pack and how
    many drawn sides unlike the best were given back.
    """
    src, src_len = drawn.src.copy(), drawn.src_len.copy()
    tgt, tgt_len = drawn.tgt.copy(), drawn.tgt_len.copy()
    num_rows = int(row_of.max()) + 1 if len(row_of) else 0
    given_back = 0
    for ids, lengths, stored, stored_len, width in (
        (src, src_len, best.src, best.src_len, src_width),
        (tgt, tgt_len, best.tgt, best.tgt_len, tgt_width),
    ):
        used = np.bincount(row_of, lengths, minlength=num_rows).astype(np.int64)
        for row in np.flatnonzero(used > width):
            members = np.flatnonzero(row_of == row)
            growth = lengths[members] - stored_len[pairs[members]]
            for i in members[np.argsort(-growth, kind="stable")]:
                if used[row] <= width:
                    break
                best_ids = stored[pairs[i], : ids.shape[1]]
                given_back += int(np.any(ids[i] != best_ids))
                used[row] -= lengths[i] - stored_len[pairs[i]]
                ids[i], lengths[i] = best_ids, stored_len[pairs[i]]
    return EncodedPairs(src, src_len, tgt, tgt_len), given_back


def plan_fill(
    plan: list[tuple[np.ndarray, np.ndarray]], encoded: EncodedPairs, rows: int
) -> dict[str, float]:
    """How full the packed batches of `plan` are: {"batches", "src", "tgt"}, the last two
    the real share of the source and target tokens (for the log)."""
    if not plan:
        return {"batches": 0, "src": 0.0, "tgt": 0.0}
    pairs = np.concatenate([batch_pairs for batch_pairs, _ in plan])
    slots = len(plan) * rows
    return {
        "batches": len(plan),
        "src": float(encoded.src_len[pairs].sum()) / (slots * encoded.src.shape[1]),
        "tgt": float(encoded.tgt_len[pairs].sum()) / (slots * encoded.tgt.shape[1]),
    }
