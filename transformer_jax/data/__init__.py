"""Input pipeline: fra-eng (or any TFDS translation dataset) to per-process host batches.

Public API; see each module for details.
"""

from transformer_jax.data.batching import TrainIterator, eval_batches
from transformer_jax.data.bucketing import padding_fraction, resolve_boundaries
from transformer_jax.data.config import data_config, validate_data_config
from transformer_jax.data.corpus import CorruptArchiveError
from transformer_jax.data.datasets import (
    DatasetReadError,
    SplitError,
    load_split_pairs,
    split_sizes,
    spread_subset,
)
from transformer_jax.data.download import (
    KNOWN_DIGESTS,
    ChecksumMismatchError,
    DownloadError,
    ZipNotFoundError,
)
from transformer_jax.data.encoding import BATCH_KEYS, EncodedPairs, encode_pairs
from transformer_jax.data.pipeline import InputPipeline, create_input_pipeline
from transformer_jax.data.preprocessing import preprocess_nmt
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_jax.data.tokenizers import (
    Tokenizer,
    VocabularyMismatchError,
    build_tokenizers,
    check_vocabulary,
    load_tokenizer,
    load_tokenizers,
    save_tokenizers,
)
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_jax.data.word_tokenizer import WordTokenizer

__all__ = [
    "BATCH_KEYS",
    "BOS_ID",
    "EOS_ID",
    "KNOWN_DIGESTS",
    "PAD_ID",
    "UNK_ID",
    "ChecksumMismatchError",
    "CorruptArchiveError",
    "DatasetReadError",
    "SplitError",
    "DownloadError",
    "EncodedPairs",
    "InputPipeline",
    "SentencePieceTokenizer",
    "Tokenizer",
    "TrainIterator",
    "Truecaser",
    "VocabularyMismatchError",
    "WordTokenizer",
    "ZipNotFoundError",
    "build_tokenizers",
    "check_vocabulary",
    "create_input_pipeline",
    "data_config",
    "encode_pairs",
    "eval_batches",
    "load_split_pairs",
    "load_tokenizer",
    "load_tokenizers",
    "padding_fraction",
    "preprocess_nmt",
    "resolve_boundaries",
    "save_tokenizers",
    "split_sizes",
    "spread_subset",
    "validate_data_config",
]
