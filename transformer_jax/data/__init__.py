"""Input pipeline: fra-eng (or any TFDS translation dataset) to per-process host batches.

Public API; see each module for details.
"""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.data.batching": ["TrainIterator", "eval_batches"],
        "transformer_jax.data.bucketing": ["padding_fraction", "resolve_boundaries"],
        "transformer_jax.data.config": ["data_config", "validate_data_config"],
        "transformer_jax.data.corpus": ["CorruptArchiveError"],
        "transformer_jax.data.datasets": [
            "DatasetReadError",
            "SplitError",
            "load_split_pairs",
            "split_sizes",
            "spread_subset",
        ],
        "transformer_jax.data.download": [
            "KNOWN_DIGESTS",
            "ChecksumMismatchError",
            "DownloadError",
            "ZipNotFoundError",
        ],
        "transformer_jax.data.encoding": ["BATCH_KEYS", "EncodedPairs", "encode_pairs"],
        "transformer_jax.data.pipeline": ["InputPipeline", "create_input_pipeline"],
        "transformer_jax.data.preprocessing": ["preprocess_nmt"],
        "transformer_jax.data.sentencepiece_tokenizer": ["SentencePieceTokenizer"],
        "transformer_jax.data.tokenizers": [
            "Tokenizer",
            "VocabularyMismatchError",
            "build_tokenizers",
            "check_vocabulary",
            "load_tokenizer",
            "load_tokenizers",
            "save_tokenizers",
        ],
        "transformer_jax.data.truecasing": ["Truecaser"],
        "transformer_jax.data.vocab": ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID"],
        "transformer_jax.data.word_tokenizer": ["WordTokenizer"],
    },
)
