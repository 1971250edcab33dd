"""Subword regularization: a fresh segmentation of each training sentence whenever it is read.

A model trained for many epochs on one segmentation per sentence learns that segmentation by
heart; drawing a segmentation each time (Kudo 2018, "Subword Regularization"; for BPE,
Provilkov et al. 2020, "BPE-Dropout") shows it the same sentence as different piece sequences.
Unlike dropout it adds no work to the compiled step: the draws are made on the host while the
previous step runs (~13 ms of CPU for both sides of a batch of ~4,096 tokens, about as much as
SentencePiece's own sampler, beside a ~0.42 s step of the `deep_sampled` model on 2 CPU cores;
benchmarks/sampling_draws.py). Translation, evaluation and the teacher-forced validation loss
keep the one best segmentation. With `workers` (data.sampling_workers; "auto": none on a CPU,
a few on an accelerator), the next batches' draws are made ahead in worker processes
(data/sampling_pool.py): the same draws, off the training process's critical path.

The epoch plan (which pairs form a batch, and its padded widths) stays the one of the best
segmentation, so batch shapes, epochs, resumption and multi-host slicing are unchanged; a
sampled side longer than its batch's width keeps its best segmentation instead (the log
counts how many sides were sampled). Packed rows (data/packing.py) are planned with room
for longer draws; where a row's draws still overflow it, its most grown sides keep theirs.
Every process samples the whole global batch from a seed of (seed, epoch, batch) and takes
its own rows, so 2 processes x 1 device see what 1 process x 2 devices sees, and a resumed
run reads exactly the batches it would have read. The draws come from numpy's generator
seeded with (seed, epoch, batch, side), never from SentencePiece's own, which repeats its
draws within one process only (SentencePieceTokenizer.encode_sampled).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import numpy as np
from absl import logging

from transformer_jax.data import sampling_pool
from transformer_jax.data.encoding import EncodedPairs, TokenizedPairs
from transformer_jax.data.tokenizers import Tokenizer
from transformer_jax.data.vocab import EOS_ID, PAD_ID


class SubwordSampling:
    """Resegments rows of the training `EncodedPairs` with sampled segmentations.

    Args:
      src_texts, tgt_texts: the text of every tokenized training row (`EncodedPairs.index`
        points into them): a real pair's sentences, or a joined pair's two sentences joined
        by a space (data/augment.py).
      src_tokenizer, tgt_tokenizer: tokenizers with `encode_sampled` (SentencePiece).
      alpha: unigram smoothing (P ∝ P(x)^alpha) or BPE-dropout probability; > 0.
      nbest: unigram candidates to sample from (-1 = all, or >= 2).
      seed: with (epoch, batch) and the side, seeds each batch's draws.
      workers: processes that draw the batches `prefetch` names ahead of `resegment`
        (0: every draw is made in `resegment`); the draws are the same either way.
    """

    def __init__(
        self,
        src_texts: Sequence[str],
        tgt_texts: Sequence[str],
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        *,
        alpha: float,
        nbest: int = -1,
        seed: int = 0,
        workers: int = 0,
    ):
        if len(src_texts) != len(tgt_texts):
            raise ValueError(f"{len(src_texts)} source texts but {len(tgt_texts)} target texts.")
        for tokenizer in (src_tokenizer, tgt_tokenizer):
            if not hasattr(tokenizer, "encode_sampled"):
                raise ValueError(
                    f"subword sampling needs SentencePiece tokenizers, got {tokenizer.kind!r}; "
                    "set data.tokenizer='sentencepiece' or data.sp_sampling_alpha=0."
                )
        self._texts = (list(src_texts), list(tgt_texts))
        self._tokenizers = (src_tokenizer, tgt_tokenizer)
        self.alpha, self.nbest, self.seed = float(alpha), int(nbest), int(seed)
        self.sides_sampled = 0  # sides whose draw fit its batch's width ...
        self.sides_total = 0  # ... of all sides resegmented (for the log)
        self.workers = int(workers)
        self._pool: sampling_pool.DrawPool | None = None  # started by the first `prefetch`
        self._ahead: dict[tuple[int, ...], list[Future]] = {}  # key -> a future per side

    @classmethod
    def for_pairs(
        cls,
        pairs: Sequence[tuple[str, str]],
        tokenized: TokenizedPairs,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        **kwargs,
    ) -> SubwordSampling:
        """For the rows of `tokenized`, made from `pairs` (joined rows through `origin`)."""
        if tokenized.origin is None:
            src_texts = [src for src, _ in pairs]
            tgt_texts = [tgt for _, tgt in pairs]
        else:

            def text(side: int, first: int, second: int) -> str:
                head = pairs[first][side]
                return head if second < 0 else f"{head} {pairs[second][side]}"

            src_texts = [text(0, a, b) for a, b in tokenized.origin.tolist()]
            tgt_texts = [text(1, a, b) for a, b in tokenized.origin.tolist()]
        return cls(src_texts, tgt_texts, src_tokenizer, tgt_tokenizer, **kwargs)

    def log_counts(self, when: str) -> None:
        """Logs the share of sides read with a drawn segmentation so far (alpha's effect)."""
        if self.sides_total:
            logging.info(
                "Data: after %s, %.1f %% of %d sentence reads used a drawn segmentation (the "
                "rest drew one too long for their batch or packed row and kept the best)",
                when,
                100 * self.sides_sampled / self.sides_total,
                self.sides_total,
            )

    def count_given_back(self, sides: int) -> None:
        """`sides` drawn segmentations were replaced by the best one after all (a packed row
        they overflowed, data/packing.py): the log counts them as not sampled."""
        self.sides_sampled -= sides

    def detached(self) -> SubwordSampling:
        """A copy with its own read counters that draws everything itself (no pool)."""
        other = copy.copy(self)
        other.workers, other._pool, other._ahead = 0, None, {}
        return other

    def prefetch(self, encoded: EncodedPairs, rows: np.ndarray, key: Sequence[int]) -> None:
        """Starts drawing what `resegment(encoded, rows, ..., key=key)` will need, in the
        worker processes (without workers: nothing)."""
        key = tuple(key)
        if not self.workers or key in self._ahead:
            return
        texts = self._row_texts(encoded, rows)
        try:
            if self._pool is None:
                protos = [t.model_proto for t in self._tokenizers]
                self._pool = sampling_pool.DrawPool(protos, self.workers)
            self._ahead[key] = [
                self._pool.submit(side, texts[side], alpha=self.alpha, nbest=self.nbest,
                                  seed=self._seed(key, side))
                for side in (0, 1)
            ]  # fmt: skip
        except (OSError, ImportError, NotImplementedError, BrokenProcessPool) as error:
            # Workers cannot start here: a container without a usable /dev/shm (POSIX
            # semaphores: ENOSYS, or ImportError from multiprocessing), a process limit
            # (EAGAIN). The draws are the same made here, so nothing changes but the pace.
            logging.warning("Data: subword-sampling workers cannot start (%s: %s); drawing "
                            "in the training process", type(error).__name__, error)  # fmt: skip
            self.close()
            self.workers, self._ahead = 0, {}

    def close(self) -> None:
        """Stops the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.close()
            self._pool, self._ahead = None, {}

    def _draws(self, texts: list[str], side: int, key: tuple[int, ...]) -> list[list[int]]:
        """`key`'s draws of side `side`: from the pool if prefetched, else made here."""
        futures = self._ahead.get(key)
        if futures is not None:
            try:
                drawn = futures[side].result()
            except BrokenProcessPool as error:  # a worker died (e.g. killed): draw here
                logging.warning("Data: a subword-sampling worker failed (%s); drawing in "
                                "the training process from now on", error)  # fmt: skip
                self.close()  # the broken pool's other workers and queued draws go too
                self.workers = 0
            else:
                if side == 1:
                    del self._ahead[key]
                    for old in [k for k in self._ahead if k < key]:  # skipped (e.g. resumed)
                        for future in self._ahead.pop(old):
                            future.cancel()
                return drawn
        return self._tokenizers[side].encode_sampled(
            texts, alpha=self.alpha, nbest=self.nbest, seed=self._seed(key, side)
        )

    def _row_texts(self, encoded: EncodedPairs, rows: np.ndarray) -> list[list[str]]:
        pair_index = (encoded.index[rows] if encoded.index is not None else rows).tolist()
        return [[self._texts[side][i] for i in pair_index] for side in (0, 1)]

    def _seed(self, key: Sequence[int], side: int) -> int:
        return int(np.random.SeedSequence([self.seed, *key, side]).generate_state(1)[0])

    def resegment(
        self,
        encoded: EncodedPairs,
        rows: np.ndarray,
        src_width: int,
        tgt_width: int,
        key: Sequence[int],
    ) -> EncodedPairs:
        """Rows `rows` (G,) of `encoded`, each side freshly segmented, as G rows of widths
        (src_width, tgt_width).

        A side whose draw (with `<eos>`) is longer than its width keeps `encoded`'s ids, which
        fit by the plan's construction. `key` (e.g. (epoch, batch)) picks the draws: the same
        key gives the same rows, in any process and on any host.
        """
        key = tuple(key)
        texts = self._row_texts(encoded, rows)
        sides = []
        for side, (stored, stored_len, width) in enumerate(
            ((encoded.src, encoded.src_len, src_width), (encoded.tgt, encoded.tgt_len, tgt_width))
        ):
            drawn = self._draws(texts[side], side, key)
            lengths = np.fromiter(map(len, drawn), np.int32, len(rows)) + 1  # with <eos>
            fits = lengths <= width
            # Rows whose draw does not fit keep the best segmentation, which the plan fitted.
            ids = stored[rows, :width].copy()
            lengths = np.where(fits, lengths, stored_len[rows])
            ids[fits] = PAD_ID
            kept = np.flatnonzero(fits)
            flat = np.fromiter(
                itertools.chain.from_iterable(drawn[r] + [EOS_ID] for r in kept.tolist()),
                np.int32,
            )
            row_of = np.repeat(kept, lengths[kept])
            starts = np.cumsum(lengths[kept]) - lengths[kept]
            ids[row_of, np.arange(len(flat)) - np.repeat(starts, lengths[kept])] = flat
            self.sides_sampled += len(kept)
            self.sides_total += len(rows)
            sides.append((ids, lengths))
        (src, src_len), (tgt, tgt_len) = sides
        return EncodedPairs(src, src_len, tgt, tgt_len)
