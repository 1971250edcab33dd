"""Per-process host batches: a resumable, shuffled, optionally bucketed train iterator, and
eval batches in fixed order.

Every batch is a dict of numpy arrays with B_proc = rows / process_count rows, rows =
global_batch (or, with `batch_tokens`, the rows of the batch's bucket,
`TrainIterator.bucket_rows`):
  src int32 (B_proc, S), src_len int32 (B_proc,), tgt_in / tgt_out int32 (B_proc, T),
  tgt_weight float32 (B_proc, T).
With `packing` (data/packing.py) every row holds several whole pairs at the full widths,
`src_len` counts a row's real source tokens, and the batch also has src_segment /
src_position (B_proc, S) and tgt_segment / tgt_position (B_proc, T) int32.
The data knows no devices: `training.DataParallel.put_batch` splits a batch over them. It
only keeps every B_proc a multiple of `row_multiple` (the caller's local device count), so
the split is even.

Multi-host: every process computes the same global order from the seed and takes its own
contiguous slice of each global batch, so the union over processes is exactly the global
batch, and 2 processes x 1 device see what 1 process x 2 devices sees.

A batch with fewer real examples than rows (the eval tail, or a kept last partial train batch)
is filled with dummy rows of zero `tgt_weight`: the shapes stay fixed (no recompilation), and
the token-weighted loss (training/losses.py) neither sums nor counts them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from transformer_jax.data import bucketing
from transformer_jax.data import packing as packing_lib  # `packing` is an argument here
from transformer_jax.data.encoding import EncodedPairs, make_batch
from transformer_jax.data.sampling import SubwordSampling
from transformer_jax.data.vocab import BOS_ID, EOS_ID

_STATE_VERSION = 1
_DUMMY = -1  # index of a dummy row in an epoch plan
# What must match for a saved position to mean the same batches.
_STATE_KEYS = (
    "version",
    "seed",
    "num_examples",
    "global_batch",
    "bucket_boundaries",
    "drop_remainder",
    "batch_tokens",
    "packing",
)


class DataPositionError(ValueError):
    """A checkpoint's data position was saved by another data setup (`set_state`)."""


def _check_layout(global_batch: int, row_multiple: int, process_index: int, process_count: int):
    """Rows per process of a `global_batch`, checked: every process gets the same number, a
    multiple of `row_multiple`."""
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"process_index={process_index} not in [0, process_count={process_count})."
        )
    if row_multiple < 1:
        raise ValueError(f"row_multiple={row_multiple} must be >= 1 (the local device count).")
    if global_batch % (process_count * row_multiple):
        raise ValueError(
            f"global batch {global_batch} is not divisible by process_count * row_multiple "
            f"(local devices) = {process_count} * {row_multiple}; change data.batch_size."
        )
    return global_batch // process_count


def _fill_dummies(batch: dict[str, np.ndarray], real: np.ndarray) -> None:
    """Turns the rows where `real` (B,) is False into dummies of zero weight, in place.

    Dummies have src = <eos>, src_len 1, tgt_in = <bos>: no row is fully masked, so attention
    never normalises over nothing.
    """
    batch["src"][~real] = 0
    batch["src"][~real, 0] = EOS_ID
    batch["src_len"][~real] = 1
    batch["tgt_in"][~real] = 0
    batch["tgt_in"][~real, 0] = BOS_ID
    batch["tgt_out"][~real] = 0
    batch["tgt_weight"][~real] = 0.0


def _chunks(indices: np.ndarray, size: int, drop_remainder: bool) -> list[np.ndarray]:
    """`indices` cut into chunks of `size`; a short last chunk is dropped, or padded with
    `_DUMMY` to `size` (kept like the book's `d2l.load_array`, a PyTorch DataLoader with
    drop_last=False, which the fra-eng loader of d2l §11.7.5 trains on)."""
    full = len(indices) // size * size
    chunks = list(indices[:full].reshape(-1, size))
    if not drop_remainder and full < len(indices):
        tail = np.full(size, _DUMMY, indices.dtype)
        tail[: len(indices) - full] = indices[full:]
        chunks.append(tail)
    return chunks


class TrainIterator:
    """Infinite iterator over epochs of training batches; see the module docstring for shapes.

    Epoch e is a permutation from `np.random.default_rng([seed, e])`, so any epoch can be
    recomputed from (seed, epoch) alone: the state is just (epoch, position).
    Without bucketing, consecutive chunks of the permutation are batches padded to the maximum
    lengths. With bucketing, the permuted examples are grouped by bucket, chunked, the leftovers
    of all buckets chunked together (padded to their largest bucket), and the batch order is
    shuffled. With `drop_remainder` (the default), examples that do not fill a last global
    batch are dropped for that epoch only (a different subset each epoch). Without it, they
    form one last batch whose missing rows are dummies of zero weight (see the module
    docstring), so every example is seen once per epoch, as with the book's DataLoader
    (shuffle=True, drop_last=False): ceil(N / global_batch) batches an epoch.
    With `sampling` (data/sampling.py), each global batch of the same plan is resegmented
    with draws seeded by (epoch, batch) before this process takes its rows.
    With `packing` (data/packing.py), bucketing is replaced: rows of the full widths are
    filled with whole pairs (`packed_rows` a batch), so every batch has one shape.
    """

    def __init__(
        self,
        encoded: EncodedPairs,
        *,
        global_batch: int,
        row_multiple: int = 1,
        process_index: int = 0,
        process_count: int = 1,
        seed: int = 0,
        bucket_boundaries: Sequence[int] | None = None,
        drop_remainder: bool = True,
        batch_tokens: int = 0,
        sampling: SubwordSampling | None = None,
        packing: bool = False,
    ):
        self._sampling = sampling
        self._packing = bool(packing)
        if self._packing and bucket_boundaries:
            raise ValueError(
                "packing fills rows of one width and needs no length buckets; set "
                "data.bucketing=False (or data.packing=False)."
            )
        # With a token budget the rows come from it (each a multiple of the shards); the
        # global batch then only counts examples (a last partial batch, the data position).
        by_budget = bucketing.by_token_budget(batch_tokens, packing, bool(bucket_boundaries))
        _check_layout(
            process_count * row_multiple if by_budget else global_batch,
            row_multiple,
            process_index,
            process_count,
        )
        self._shards = process_count * row_multiple  # every batch's rows are a multiple
        self._process_count = process_count
        if len(encoded) < (global_batch if drop_remainder else 1):
            raise ValueError(
                f"the training split has {len(encoded)} examples, fewer than one global batch "
                f"({global_batch}); lower data.batch_size, use a larger data.train_split, or "
                "set data.drop_remainder=False to train on one partial batch."
            )
        self._encoded = encoded
        self._global_batch = global_batch
        self._process_index = process_index
        self._seed = int(seed)
        self._drop_remainder = bool(drop_remainder)
        self._max_src = encoded.src.shape[1]
        self._max_tgt = encoded.tgt.shape[1]
        self._boundaries = tuple(bucket_boundaries) if bucket_boundaries else None
        self._buckets = (
            bucketing.bucket_ids(encoded, self._boundaries) if self._boundaries else None
        )
        self._batch_tokens = int(batch_tokens)
        if self._batch_tokens and self._boundaries is None and not self._packing:
            raise ValueError(
                "batch_tokens needs length buckets (data.bucketing=True) or packed rows "
                "(data.packing=True)."
            )
        # The lengths packed rows are planned with: with sampling, room for longer draws.
        self._plan_lengths = (encoded.src_len, encoded.tgt_len)
        if self._packing and sampling is not None:
            slack = packing_lib.SAMPLING_SLACK
            self._plan_lengths = (
                packing_lib.planned_lengths(encoded.src_len, self._max_src, slack),
                packing_lib.planned_lengths(encoded.tgt_len, self._max_tgt, slack),
            )
        self._epoch = 0
        self._position = 0
        # Batches of the epochs before the current one: epochs differ in length where the
        # plan packs rows or drops a bucket's leftovers, so this is not epoch · one length.
        self._batches_before = 0
        self._epoch_lengths: dict[int, int] = {}  # epoch -> batches, for `epoch_length`
        # The current epoch's batches: (pairs, bucket), or packed (pairs, row of each pair).
        self._plan: list[tuple[np.ndarray, int]] | None = None

    # -- epoch plans --------------------------------------------------------------------------

    def _epoch_plan(self, epoch: int) -> list[tuple[np.ndarray, int]]:
        """[(global indices (global_batch,), padded length)] for one epoch; `_DUMMY` marks the
        dummy rows of a kept last partial batch."""
        rng = np.random.default_rng([self._seed, epoch])
        order = rng.permutation(len(self._encoded))
        gb = self._global_batch
        if self._packing:
            return packing_lib.plan_epoch(
                order,
                *self._plan_lengths,
                rows=self.packed_rows,
                src_width=self._max_src,
                tgt_width=self._max_tgt,
                drop_remainder=self._drop_remainder,
            )
        if self._boundaries is None:
            return [(chunk, -1) for chunk in _chunks(order, gb, self._drop_remainder)]
        if self._batch_tokens:
            return self._token_plan(order, rng)
        plan, leftovers = [], []
        buckets = self._buckets[order]
        for b in range(len(self._boundaries)):
            members = order[buckets == b]  # still in permuted order
            full = len(members) // gb * gb
            plan.extend((chunk, b) for chunk in members[:full].reshape(-1, gb))
            leftovers.append(members[full:])
        rest = np.concatenate(leftovers)  # grouped by bucket: neighbours have similar lengths
        for chunk in _chunks(rest, gb, self._drop_remainder):
            plan.append((chunk, int(self._buckets[chunk[chunk != _DUMMY]].max())))
        return [plan[i] for i in rng.permutation(len(plan))]

    @property
    def packed_rows(self) -> int:
        """Global rows of a packed batch: `global_batch`, or with `batch_tokens` as many rows of
        the full width as fit the budget (a multiple of processes · row_multiple)."""
        if not self._batch_tokens:
            return self._global_batch
        width = max(self._max_src, self._max_tgt)
        return bucketing.token_budget_rows(self._batch_tokens, width, self._shards)

    def bucket_rows(self, bucket: int) -> int:
        """Global rows of a batch of `bucket`: `global_batch`, or with `batch_tokens` as many
        rows of that width as fit the token budget (a multiple of processes · row_multiple)."""
        if not self._batch_tokens:
            return self._global_batch
        return bucketing.token_budget_rows(
            self._batch_tokens, self._boundaries[bucket], self._shards
        )

    def _token_plan(self, order: np.ndarray, rng: np.random.Generator) -> list:
        """Batches of about `batch_tokens` padded tokens (fairseq's --max-tokens): short
        buckets get many rows, long ones few. Leftovers of a bucket join the next, wider one
        (they fit its width); the last bucket's leftovers are dropped for this epoch (a
        different few each epoch) or, without `drop_remainder`, padded with dummies."""
        plan: list[tuple[np.ndarray, int]] = []
        carry = np.zeros((0,), order.dtype)
        buckets = self._buckets[order]
        last = len(self._boundaries) - 1
        for b in range(last + 1):
            pool = np.concatenate([carry, order[buckets == b]])  # permuted order within each
            rows = self.bucket_rows(b)
            full = len(pool) // rows * rows
            plan.extend((chunk, b) for chunk in pool[:full].reshape(-1, rows))
            carry = pool[full:]
        if len(carry) and not self._drop_remainder:
            plan.extend((chunk, last) for chunk in _chunks(carry, self.bucket_rows(last), False))
        return [plan[i] for i in rng.permutation(len(plan))]

    def _widths(self, bucket: int) -> tuple[int, int]:
        if bucket < 0:
            return self._max_src, self._max_tgt
        boundary = self._boundaries[bucket]
        return min(boundary, self._max_src), min(boundary, self._max_tgt)

    @property
    def batches_per_epoch(self) -> int:
        """Batches of the current epoch (others may differ by a few: `epoch_length`)."""
        return len(self._current_plan())

    def epoch_length(self, epoch: int) -> int:
        """Batches of epoch `epoch` (its plan is made, not kept; lengths are remembered)."""
        if epoch == self._epoch and self._plan is not None:
            return len(self._plan)
        if epoch not in self._epoch_lengths:
            self._epoch_lengths[epoch] = len(self._epoch_plan(epoch))
        return self._epoch_lengths[epoch]

    def batches_before(self, epoch: int) -> int:
        """Batches of epochs 0 .. epoch - 1: the step a run starts epoch `epoch` at."""
        return sum(self.epoch_length(e) for e in range(epoch))

    @property
    def epoch_plan(self) -> list[tuple[np.ndarray, np.ndarray | int]]:
        """The current epoch's batches: [(pairs, bucket)], or [(pairs, row of each)] packed."""
        return self._current_plan()

    def _current_plan(self) -> list[tuple[np.ndarray, int]]:
        if self._plan is None:
            self._plan = self._epoch_plan(self._epoch)
        return self._plan

    # -- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> TrainIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        plan = self._current_plan()
        if self._position >= len(plan):
            if self._sampling is not None:
                self._sampling.log_counts(f"epoch {self._epoch}")
            self._batches_before += len(plan)
            self._epoch += 1
            self._position = 0
            self._plan = None
            plan = self._current_plan()
        indices, bucket = plan[self._position]
        self._position += 1
        if self._sampling is not None and self._sampling.workers:
            self._prefetch(plan)
        if self._packing:
            return self._packed_batch(indices, row_of=bucket)
        per_process = len(indices) // self._process_count  # global_batch, or by batch_tokens
        start = self._process_index * per_process
        mine = indices[start : start + per_process]
        real = mine != _DUMMY
        widths = self._widths(bucket)
        if self._sampling is None:
            batch = make_batch(self._encoded, np.where(real, mine, 0), *widths)
        else:  # every process draws the whole global batch alike, then takes its rows
            rows = np.where(indices != _DUMMY, indices, 0)
            key = (self._epoch, self._position - 1)
            drawn = self._sampling.resegment(self._encoded, rows, *widths, key=key)
            batch = make_batch(drawn, np.arange(start, start + per_process), *widths)
        if not real.all():
            _fill_dummies(batch, real)
        return batch  # (B_proc, ...)

    def _prefetch(self, plan: list[tuple[np.ndarray, int]]) -> None:
        """Has the sampling's workers draw the next batches of this epoch, two per worker."""
        ahead = plan[self._position : self._position + 2 * self._sampling.workers]
        for offset, (indices, _) in enumerate(ahead):
            rows = indices if self._packing else np.where(indices != _DUMMY, indices, 0)
            self._sampling.prefetch(self._encoded, rows, key=(self._epoch, self._position + offset))

    def close(self) -> None:
        """Stops the subword-sampling workers, if any (the iterator still works without)."""
        if self._sampling is not None:
            self._sampling.close()

    def _packed_batch(self, pairs: np.ndarray, row_of: np.ndarray) -> dict[str, np.ndarray]:
        """This process's rows of the packed global batch `pairs` / `row_of`."""
        per_process = self.packed_rows // self._process_count
        widths = dict(src_width=self._max_src, tgt_width=self._max_tgt)
        rows = dict(first_row=self._process_index * per_process, num_rows=per_process)
        if self._sampling is None:
            return packing_lib.packed_batch(self._encoded, pairs, row_of, **rows, **widths)
        # Every process draws the whole global batch alike, then takes its rows; where a
        # row's draws no longer fit, its most grown sides keep their best segmentation.
        key = (self._epoch, self._position - 1)
        drawn = self._sampling.resegment(self._encoded, pairs, *widths.values(), key=key)
        drawn, given_back = packing_lib.fit_rows(drawn, self._encoded, pairs, row_of, **widths)
        self._sampling.count_given_back(given_back)
        return packing_lib.packed_batch(drawn, np.arange(len(pairs)), row_of, **rows, **widths)

    def epoch_batches(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        """The batches of one whole epoch, without moving the iterator (for reports)."""
        probe = TrainIterator.__new__(TrainIterator)
        probe.__dict__.update(self.__dict__)
        probe._epoch, probe._position, probe._plan = epoch, 0, None
        if self._sampling is not None:  # its own read counters: the run's log stays the run's
            probe._sampling = self._sampling.detached()
        for _ in range(probe.batches_per_epoch):
            yield next(probe)

    # -- checkpointing ------------------------------------------------------------------------

    def get_state(self) -> dict:
        """JSON-able position: enough to continue exactly where this iterator is."""
        return {
            "version": _STATE_VERSION,
            "epoch": self._epoch,
            "position": self._position,
            "batches_before": self._batches_before,  # so a resumed run need not replan
            "seed": self._seed,
            "num_examples": len(self._encoded),
            "global_batch": self._global_batch,
            "bucket_boundaries": list(self._boundaries) if self._boundaries else None,
            "drop_remainder": self._drop_remainder,
            "batch_tokens": self._batch_tokens,
            "packing": self._packing,
            # With a token budget the rows of a batch are rounded to a multiple of the devices
            # (`packed_rows`, `bucket_rows`): another device count can be another plan.
            "batch_rows": self._token_batch_rows(),
            "shards": self._shards,
        }

    def _token_batch_rows(self) -> list[int] | None:
        """Global rows of each kind of batch a token budget makes (None without one)."""
        if not self._batch_tokens:
            return None
        if self._packing or self._boundaries is None:
            return [self.packed_rows]
        return [self.bucket_rows(b) for b in range(len(self._boundaries))]

    def set_state(self, state: dict) -> None:
        """Restores `get_state()`; refuses a state from a different data setup."""
        mine = self.get_state()
        # States saved before the option existed always dropped the remainder.
        state = {"drop_remainder": True, "batch_tokens": 0, "packing": False, **state}
        rows = state.get("batch_rows", mine["batch_rows"])  # not saved before it existed
        if rows != mine["batch_rows"]:
            raise DataPositionError(
                f"this run's batches held {_rows_text(rows)} rows, made on "
                f"{_devices_text(state.get('shards'))} (processes x local devices); on "
                f"{self._shards} they would hold {_rows_text(mine['batch_rows'])} (the rows "
                f"that fit data.batch_tokens={self._batch_tokens}, rounded down to a multiple "
                "of the devices), which is another order of training pairs. Resume on "
                f"{_devices_text(state.get('shards'))}, or start a fresh workdir."
            )
        for key in _STATE_KEYS:
            if state.get(key) != mine[key]:
                raise DataPositionError(
                    f"iterator state was saved with {key}={state.get(key)!r} but this pipeline "
                    f"has {key}={mine[key]!r}; resume with the data config of the checkpointed "
                    "run (or start a fresh run)."
                )
        self._epoch = int(state["epoch"])
        self._position = int(state["position"])
        self._plan = None
        before = state.get("batches_before")  # absent from states saved before it existed
        self._batches_before = self.batches_before(self._epoch) if before is None else int(before)

    @property
    def epoch(self) -> int:
        return self._epoch


def _devices_text(count: int | None) -> str:
    """ "1 device", "3 devices"; "as many devices" when the state did not say."""
    return "as many devices" if count is None else f"{count} device{'' if count == 1 else 's'}"


def _rows_text(rows: list[int] | None) -> str:
    """A batch-rows list as the error names it: "32", or "48/32/16" per bucket."""
    return "/".join(map(str, rows)) if rows else "?"


def eval_batches(
    encoded: EncodedPairs,
    *,
    global_batch: int,
    row_multiple: int = 1,
    process_index: int = 0,
    process_count: int = 1,
) -> Iterator[dict[str, np.ndarray]]:
    """Batches over all examples in stored order, always padded to the maximum lengths.

    The last batch is filled with dummy examples of zero weight (`_fill_dummies`), so every
    real example counts exactly once and every batch has the same shape. Besides the train
    keys, an `index` int32 (B_proc,) gives each row's example index (-1 for the dummies), to
    pair outputs with references (e.g. for BLEU).
    """
    process_batch = _check_layout(global_batch, row_multiple, process_index, process_count)
    n = len(encoded)
    num_batches = -(-n // global_batch)
    src_width, tgt_width = encoded.src.shape[1], encoded.tgt.shape[1]
    for b in range(num_batches):
        index = np.arange(b * global_batch, (b + 1) * global_batch)
        start = process_index * process_batch
        index = index[start : start + process_batch]
        real = index < n
        batch = make_batch(encoded, np.where(real, index, 0), src_width, tgt_width)
        _fill_dummies(batch, real)
        batch["index"] = np.where(real, index, -1).astype(np.int32)
        yield batch  # (B_proc, ...)
