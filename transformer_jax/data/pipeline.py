"""One call from a data config to everything a training run needs from the data."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import ml_collections
import numpy as np
from absl import logging

from transformer_jax.data import augment, batching, bucketing, lengths, packing, sources
from transformer_jax.data.encoding import EncodedPairs, pack_pairs, tokenize_pairs
from transformer_jax.data.sampling import SubwordSampling
from transformer_jax.data.tokenizers import Tokenizer, build_tokenizers
from transformer_jax.data.truecase_table import build_truecaser
from transformer_jax.data.truecasing import Truecaser


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
) -> InputPipeline:
    """Builds (if needed) and reads the dataset, builds tokenizers, and sets up batching.

    `row_multiple`: every per-process batch gets a multiple of this many rows; pass the local
    device count (`DataParallel.num_local_devices`) so that batches split evenly over them.
    `cache_dir` holds trained SentencePiece models; default `<data_dir>/tokenizers`.
    `tokenizers` (source, target), e.g. a workdir's saved ones, are used instead of building
    them from the config; built ones come with the training targets' `truecaser` (cached there
    too).
    Every process reads the same splits and derives the same global order; each then
    materialises only its own slice of every batch.
    `cfg` is checked before, once, with the whole run config (`training.validate_config`, or
    `data.validate_data_config` alone): building starts here.
    """
    train_pairs = sources.load_split_pairs(cfg, cfg.train_split)
    eval_pairs = sources.load_split_pairs(cfg, cfg.eval_split)
    test_pairs = sources.load_split_pairs(cfg, cfg.test_split)
    # Evenly spaced, not the first n: fra-eng's splits are stored shortest first.
    eval_pairs = sources.spread_subset(eval_pairs, cfg.num_eval_examples)
    cache_dir = Path(cache_dir) if cache_dir is not None else Path(cfg.data_dir) / "tokenizers"
    truecaser = None
    if tokenizers is not None:
        src_tok, tgt_tok = tokenizers
    else:
        src_tok, tgt_tok = build_tokenizers(cfg, train_pairs, cache_dir)
        truecaser = build_truecaser(cfg, train_pairs, cache_dir)

    def encode(pairs):
        tokenized = tokenize_pairs(pairs, src_tok, tgt_tok)
        return pack_pairs(tokenized, cfg.max_src_len, cfg.max_tgt_len, cfg.long_pairs)

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
    train_encoded = pack_pairs(train_tokens, cfg.max_src_len, cfg.max_tgt_len, cfg.long_pairs)
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
        )
        logging.info(
            "Data: subword sampling (alpha %g, nbest %d): training batches are resegmented "
            "each time they are read",
            cfg.sp_sampling_alpha,
            cfg.sp_sampling_nbest,
        )
    del train_tokens  # the lists of ids are large; the packed arrays are what batches read
    eval_encoded = encode(eval_pairs)
    test_encoded = encode(test_pairs)

    boundaries = None
    if cfg.bucketing:
        boundaries = bucketing.resolve_boundaries(
            cfg.bucket_boundaries, cfg.bucket_step, cfg.max_src_len, cfg.max_tgt_len
        )
    train_iter = batching.TrainIterator(
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
    sizes = sources.split_sizes(cfg)
    sizes.update(
        {
            "selected_train": len(train_pairs),
            "selected_eval": len(eval_pairs),
            "selected_test": len(test_pairs),
            # Pairs beyond data.max_src_len / max_tgt_len (long_pairs="skip"): never trained
            # on, and left out of the teacher-forced eval loss (BLEU still translates them).
            "skipped_train": train_encoded.num_skipped,
            "skipped_eval": eval_encoded.num_skipped,
            "skipped_test": test_encoded.num_skipped,
        }
    )
    logging.info(
        "Data: %s, split sizes %s, vocab sizes %d/%d (%s), bucket boundaries %s",
        cfg.name,
        sizes,
        src_tok.vocab_size,
        tgt_tok.vocab_size,
        cfg.tokenizer,
        boundaries,
    )
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
            len(train_pairs),
            cfg.max_src_len,
            cfg.max_tgt_len,
            eval_encoded.num_skipped,
            test_encoded.num_skipped,
        )
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
        global_batch=cfg.batch_size,
        truecaser=truecaser,
    )
