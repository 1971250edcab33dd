"""One call from a data config to everything a training run needs from the data."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import ml_collections
import numpy as np
from absl import logging

from transformer_jax.data import (
    augment,
    batching,
    bucketing,
    datasets,
    lengths,
    packing,
    sampling_pool,
)
from transformer_jax.data import config as config_lib
from transformer_jax.data.encoding import EncodedPairs, pad_pairs, tokenize_pairs
from transformer_jax.data.sampling import SubwordSampling
from transformer_jax.data.tokenizers import Tokenizer, build_tokenizers
from transformer_jax.data.truecase_table import build_truecaser
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.runtime import backend


@dataclasses.dataclass
class InputPipeline:
    """Tokenizers, a resumable train iterator, and eval/test data.

    `eval_pairs` / `test_pairs` are the raw (preprocessed) text pairs, all of them (BLEU
    translates every sentence); `eval_encoded` / `test_encoded` hold those within the length
    limits (teacher-forced loss needs fixed widths), and their `index` maps rows back to pairs.
    `split_sizes` counts the pairs of each split, the selected ones and the skipped ones.
    `truecaser` restores punctuation and capitals in translations of book-style data
    (`data.truecasing`); None for other data, or when the tokenizers were given (a resumed
    run keeps the one saved with its tokenizers).
    Batches are per process, leaves (B_proc, ...) (`batching`); `training.DataParallel`
    splits them over devices.
    """

    train_iter: batching.TrainIterator
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    eval_pairs: list[tuple[str, str]]
    test_pairs: list[tuple[str, str]]
    eval_encoded: EncodedPairs
    test_encoded: EncodedPairs
    split_sizes: dict[str, int]
    train_lengths: lengths.LengthStats
    row_multiple: int
    process_index: int
    process_count: int
    global_batch: int
    truecaser: Truecaser | None = None

    def eval_batches(self, split: str = "eval") -> Iterator[dict[str, np.ndarray]]:
        """Fixed-order, fixed-shape batches of the eval ("eval") or test ("test") split."""
        encoded = {"eval": self.eval_encoded, "test": self.test_encoded}.get(split)
        if encoded is None:
            raise ValueError(f"split={split!r}; choose 'eval' or 'test'.")
        return batching.eval_batches(
            encoded,
            global_batch=self.global_batch,
            row_multiple=self.row_multiple,
            process_index=self.process_index,
            process_count=self.process_count,
        )


def create_input_pipeline(
    cfg: ml_collections.ConfigDict,
    *,
    row_multiple: int = 1,
    process_index: int = 0,
    process_count: int = 1,
    cache_dir: str | Path | None = None,
    tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
    eval_batch_rows: int = 0,
) -> InputPipeline:
    """Builds (if needed) and reads the dataset, builds tokenizers, and sets up batching.

    `row_multiple`: every per-process batch gets a multiple of this many rows; pass the local
    device count (`DataParallel.num_local_devices`) so that batches split evenly over them.
    `cache_dir` holds trained SentencePiece models; default `<data_dir>/tokenizers`.
    `tokenizers` (source, target), e.g. a workdir's saved ones, are used instead of building
    them from the config; built ones come with the training targets' `truecaser` (cached there
    too). `eval_batch_rows`: global rows of an eval batch (a run's `eval.loss_batch_size`);
    0 = `data.batch_size` (`config.eval_rows`). Every process reads the same splits and
    derives the same global order; each then materialises only its own slice of every batch.
    `cfg` is checked before, once, with the whole run config (`training.validate_config`, or
    `data.validate_data_config` alone), which makes its paths absolute; a direct caller's are
    made absolute here.
    """
    config_lib.resolve_paths(cfg)
    # Load the splits. Validation pairs evenly spaced, not the first n: fra-eng's splits are
    # stored shortest first.
    train_pairs = datasets.load_split_pairs(cfg, cfg.train_split)
    eval_pairs = datasets.load_split_pairs(cfg, cfg.eval_split)
    test_pairs = datasets.load_split_pairs(cfg, cfg.test_split)
    eval_pairs = datasets.spread_subset(eval_pairs, cfg.num_eval_examples)
    # Tokenizers: the given ones, or built (and cached) from the training pairs.
    src_tok, tgt_tok, truecaser = _tokenizers(cfg, train_pairs, cache_dir, tokenizers)
    # Encode: the training pairs (joined pairs added, subword sampling), eval and test pairs.
    train_encoded, sampling, stats = _encode_train(cfg, train_pairs, src_tok, tgt_tok)
    eval_encoded = _encode(cfg, eval_pairs, src_tok, tgt_tok)
    test_encoded = _encode(cfg, test_pairs, src_tok, tgt_tok)
    # The iterator: shuffled, in length buckets or packed rows, resumable.
    boundaries = _bucket_boundaries(cfg)
    train_iter = _train_iterator(
        cfg, train_encoded, sampling, boundaries, row_multiple, process_index, process_count
    )
    # The summary: split sizes (and skipped pairs), vocabularies, how full the rows are.
    splits = (train_pairs, eval_pairs, test_pairs), (train_encoded, eval_encoded, test_encoded)
    sizes = _split_sizes(cfg, *splits)
    _log_summary(cfg, sizes, src_tok, tgt_tok, boundaries, train_iter, *splits)
    return InputPipeline(
        train_iter=train_iter,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        eval_pairs=eval_pairs,
        test_pairs=test_pairs,
        eval_encoded=eval_encoded,
        test_encoded=test_encoded,
        split_sizes=sizes,
        train_lengths=stats,
        row_multiple=row_multiple,
        process_index=process_index,
        process_count=process_count,
        global_batch=config_lib.eval_rows(cfg, row_multiple * process_count, eval_batch_rows),
        truecaser=truecaser,
    )


def _tokenizers(
    cfg: ml_collections.ConfigDict,
    train_pairs: list[tuple[str, str]],
    cache_dir: str | Path | None,
    given: tuple[Tokenizer, Tokenizer] | None,
) -> tuple[Tokenizer, Tokenizer, Truecaser | None]:
    """(source, target, truecaser): `given` without a truecaser, else built from the
    training pairs (`data.tokenizers`, `data.truecase_table`) and cached in `cache_dir`."""
    if given is not None:
        return *given, None
    cache_dir = Path(cache_dir) if cache_dir is not None else Path(cfg.data_dir) / "tokenizers"
    src_tok, tgt_tok = build_tokenizers(cfg, train_pairs, cache_dir)
    return src_tok, tgt_tok, build_truecaser(cfg, train_pairs, cache_dir)


def _train_iterator(
    cfg: ml_collections.ConfigDict,
    train_encoded: EncodedPairs,
    sampling: SubwordSampling | None,
    boundaries: list[int] | None,
    row_multiple: int,
    process_index: int,
    process_count: int,
) -> batching.TrainIterator:
    """The resumable iterator of this process's training batches (`data.batching`)."""
    return batching.TrainIterator(
        train_encoded,
        global_batch=cfg.batch_size,
        row_multiple=row_multiple,
        process_index=process_index,
        process_count=process_count,
        seed=cfg.shuffle_seed,
        bucket_boundaries=boundaries,
        drop_remainder=cfg.drop_remainder,
        batch_tokens=cfg.batch_tokens,
        sampling=sampling,
        packing=cfg.packing,
    )


def _bucket_boundaries(cfg: ml_collections.ConfigDict) -> list[int] | None:
    """The length buckets' widths (`data.bucketing`); None without buckets."""
    if not cfg.bucketing:
        return None
    return bucketing.resolve_boundaries(
        cfg.bucket_boundaries, cfg.bucket_step, cfg.max_src_len, cfg.max_tgt_len
    )


def _encode(
    cfg: ml_collections.ConfigDict,
    pairs: list[tuple[str, str]],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
) -> EncodedPairs:
    """Text pairs -> padded id arrays within the length limits (one pair a row)."""
    tokenized = tokenize_pairs(pairs, src_tok, tgt_tok)
    return pad_pairs(tokenized, cfg.max_src_len, cfg.max_tgt_len, cfg.long_pairs)


def _encode_train(
    cfg: ml_collections.ConfigDict,
    train_pairs: list[tuple[str, str]],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
) -> tuple[EncodedPairs, SubwordSampling | None, lengths.LengthStats]:
    """(encoded training pairs, subword sampling or None, length statistics of the real pairs):
    the statistics logged first, then joined pairs added (`data.concat_fraction`)."""
    train_tokens = tokenize_pairs(train_pairs, src_tok, tgt_tok)
    stats = lengths.length_stats(
        train_tokens.src_len, train_tokens.tgt_len, cfg.max_src_len, cfg.max_tgt_len
    )
    for line in lengths.format_stats(stats, split="train", long_pairs=cfg.long_pairs):
        logging.info("Data: %s", line)
    warning = lengths.coverage_warning(stats)
    if warning:
        logging.warning("Data: %s", warning)
    if cfg.concat_fraction:  # after the statistics: they describe the real pairs
        train_tokens = augment.concatenated_pairs(
            train_tokens,
            cfg.concat_fraction,
            max_src_len=cfg.max_src_len,
            max_tgt_len=cfg.max_tgt_len,
            seed=cfg.shuffle_seed,
        )
        logging.info(
            "Data: added %d joined pairs to the %d real training pairs (concat_fraction %g)",
            len(train_tokens) - len(train_pairs),
            len(train_pairs),
            cfg.concat_fraction,
        )
    train_encoded = pad_pairs(train_tokens, cfg.max_src_len, cfg.max_tgt_len, cfg.long_pairs)
    sampling = None
    if cfg.sp_sampling_alpha:
        sampling = SubwordSampling.for_pairs(
            train_pairs,
            train_tokens,
            src_tok,
            tgt_tok,
            alpha=cfg.sp_sampling_alpha,
            nbest=cfg.sp_sampling_nbest,
            seed=cfg.shuffle_seed,
            workers=sampling_pool.resolve_workers(
                cfg.sampling_workers, backend.expected_platform()
            ),
        )
        logging.info(
            "Data: subword sampling (alpha %g, nbest %d): training batches are resegmented "
            "each time they are read%s",
            cfg.sp_sampling_alpha,
            cfg.sp_sampling_nbest,
            f", drawn ahead by {sampling.workers} worker processes" if sampling.workers else "",
        )
    # The lists of ids are large and dropped here; the padded arrays are what batches read.
    return train_encoded, sampling, stats


def _split_sizes(
    cfg: ml_collections.ConfigDict,
    pairs: tuple[list[tuple[str, str]], ...],
    encoded: tuple[EncodedPairs, ...],
) -> dict[str, int]:
    """The pairs of each split, the selected ones (train, eval, test) and those beyond the
    length limits."""
    sizes = datasets.split_sizes(cfg)
    # Pairs beyond data.max_src_len / max_tgt_len (long_pairs="skip"): never trained on, and
    # left out of the teacher-forced eval loss (BLEU still translates them).
    for name, selected in zip(("train", "eval", "test"), pairs, strict=True):
        sizes[f"selected_{name}"] = len(selected)
    for name, within in zip(("train", "eval", "test"), encoded, strict=True):
        sizes[f"skipped_{name}"] = within.num_skipped
    return sizes


def _log_summary(
    cfg: ml_collections.ConfigDict,
    sizes: dict[str, int],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    boundaries: list[int] | None,
    train_iter: batching.TrainIterator,
    pairs: tuple[list[tuple[str, str]], ...],
    encoded: tuple[EncodedPairs, ...],
) -> None:
    """What was read and how it is batched: split and vocabulary sizes, buckets, packing."""
    logging.info(
        "Data: %s, split sizes %s, vocab sizes %d/%d (%s), bucket boundaries %s",
        cfg.name,
        sizes,
        src_tok.vocab_size,
        tgt_tok.vocab_size,
        cfg.tokenizer,
        boundaries,
    )
    train_encoded, eval_encoded, test_encoded = encoded
    if cfg.packing:
        fill = packing.plan_fill(train_iter.epoch_plan, train_encoded, train_iter.packed_rows)
        logging.info(
            "Data: packed rows of %d source / %d target tokens, %d rows a batch, %d batches an "
            "epoch; real tokens %.1f %% of the source and %.1f %% of the target side",
            cfg.max_src_len,
            cfg.max_tgt_len,
            train_iter.packed_rows,
            fill["batches"],
            100 * fill["src"],
            100 * fill["tgt"],
        )
    if cfg.long_pairs == "skip":
        logging.info(
            "Data: skipped %d of %d training pairs longer than %d source / %d target tokens "
            "(never cut); %d validation and %d test pairs are left out of the teacher-forced "
            "loss only",
            train_encoded.num_skipped,
            len(pairs[0]),
            cfg.max_src_len,
            cfg.max_tgt_len,
            eval_encoded.num_skipped,
            test_encoded.num_skipped,
        )
