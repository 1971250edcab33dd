"""One call from a data config to everything a training run needs from the data."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import ml_collections
import numpy as np
from absl import logging

from transformer_jax.data import batching, bucketing, sources
from transformer_jax.data.config import validate_data_config
from transformer_jax.data.encoding import EncodedPairs, encode_pairs
from transformer_jax.data.tokenizers import Tokenizer, build_tokenizers


@dataclasses.dataclass
class InputPipeline:
    """Tokenizers, a resumable train iterator, and eval/test data.

    `eval_pairs` / `test_pairs` are the raw (preprocessed) text pairs in the same order as the
    batches' `index`, for BLEU against untokenized references.
    """

    train_iter: batching.TrainIterator
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    eval_pairs: list[tuple[str, str]]
    test_pairs: list[tuple[str, str]]
    eval_encoded: EncodedPairs
    test_encoded: EncodedPairs
    split_sizes: dict[str, int]
    num_devices: int
    process_index: int
    process_count: int
    global_batch: int

    def eval_batches(self, split: str = "eval") -> Iterator[dict[str, np.ndarray]]:
        """Fixed-order, fixed-shape batches of the eval ("eval") or test ("test") split."""
        encoded = {"eval": self.eval_encoded, "test": self.test_encoded}.get(split)
        if encoded is None:
            raise ValueError(f"split={split!r}; choose 'eval' or 'test'.")
        return batching.eval_batches(
            encoded,
            global_batch=self.global_batch,
            num_devices=self.num_devices,
            process_index=self.process_index,
            process_count=self.process_count,
        )


def create_input_pipeline(
    cfg: ml_collections.ConfigDict,
    *,
    num_devices: int,
    process_index: int = 0,
    process_count: int = 1,
    cache_dir: str | Path | None = None,
) -> InputPipeline:
    """Builds (if needed) and reads the dataset, builds tokenizers, and sets up batching.

    `cache_dir` holds trained SentencePiece models; default `<data_dir>/tokenizers`.
    Every process reads the same splits and derives the same global order; each then
    materialises only its own slice of every batch.
    """
    validate_data_config(cfg, num_devices=num_devices, process_count=process_count)
    train_pairs = sources.load_split_pairs(cfg, cfg.train_split)
    eval_pairs = sources.load_split_pairs(cfg, cfg.eval_split)
    test_pairs = sources.load_split_pairs(cfg, cfg.test_split)
    if cfg.num_eval_examples:
        eval_pairs = eval_pairs[: cfg.num_eval_examples]
    cache_dir = Path(cache_dir) if cache_dir is not None else Path(cfg.data_dir) / "tokenizers"
    src_tok, tgt_tok = build_tokenizers(cfg, train_pairs, cache_dir)

    def encode(pairs):
        return encode_pairs(pairs, src_tok, tgt_tok, cfg.max_src_len, cfg.max_tgt_len)

    boundaries = None
    if cfg.bucketing:
        boundaries = bucketing.resolve_boundaries(
            cfg.bucket_boundaries, cfg.bucket_step, cfg.max_src_len, cfg.max_tgt_len
        )
    train_iter = batching.TrainIterator(
        encode(train_pairs),
        global_batch=cfg.batch_size,
        num_devices=num_devices,
        process_index=process_index,
        process_count=process_count,
        seed=cfg.shuffle_seed,
        bucket_boundaries=boundaries,
    )
    sizes = sources.split_sizes(cfg)
    sizes.update(
        {
            "selected_train": len(train_pairs),
            "selected_eval": len(eval_pairs),
            "selected_test": len(test_pairs),
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
    return InputPipeline(
        train_iter=train_iter,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        eval_pairs=eval_pairs,
        test_pairs=test_pairs,
        eval_encoded=encode(eval_pairs),
        test_encoded=encode(test_pairs),
        split_sizes=sizes,
        num_devices=num_devices,
        process_index=process_index,
        process_count=process_count,
        global_batch=cfg.batch_size,
    )
