"""Every decoding setting and its default: the one table.

    from transformer_jax.decoding.defaults import DEFAULTS  # DEFAULTS["alpha"] == 0.6

The keys are the keywords `inference.Translator.translate` takes. Everything else reads its
defaults here: a run config's `eval` section starts from them (`training.config.eval_defaults`,
where a run overrides them), `inference.decode_settings` fills a key a saved config lacks,
the launchers' decoding flags default to "the run's" (`launch.define_decoding_flags`), and
the CTranslate2 engine falls back to them for an export that did not record a key.

Below the table every setting is a required argument: `decode_ids`, `output_budget`,
`beam_decode`, `sharded_decoder` and `search.beam_search` take the values their caller
resolved, so no second default can drift from these.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "beam_size": 1,  # 1 = greedy search
        # Beam length penalty exponent: hypotheses rank by log P / ((5 + len) / 6)^alpha (GNMT,
        # Wu et al. 2016); 0 = plain log P.
        "alpha": 0.6,
        # Output budget of each sentence, as fairseq's --max-len-a/b: at most a·W + b tokens, W
        # its own length with <eos> rounded up to 8 (never its batch's), so a long sentence is
        # not cut by a training-time cap; at most the budget of a source 4x trained_len
        # (`batch_decode.output_cap`), so a runaway one is.
        "max_len_a": 2.0,
        "max_len_b": 10,
        "max_decode_len": None,  # a fixed budget instead of a·W + b (a run config writes 0)
        "batch_size": 64,  # sentences per decoding batch (a run config's eval.decode_batch_size)
        # The longest training source with <eos> (a run config's data.max_src_len): longer inputs
        # get a warning; None = unknown.
        "trained_len": None,
        # Inputs longer than this (tokens with <eos>) are translated in parts of whole sentences
        # of at most this length, cut at sentence ends (data/segmenting.py): 1 = sentence by
        # sentence (best measured: benchmarks/LOG.md, "paragraphs"), 0 = every input whole.
        "segment_len": 1,
    }
)

# What to return and how to choose tokens (`decoding.options.DecodeOptions`, with beam_size and
# alpha above): `Translator.translate_options` takes them.
OPTION_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "nbest": 1,  # hypotheses per sentence, best first (<= beam_size; samples when sampling)
        "temperature": 0.0,  # 0 = search (greedy or beam); > 0 = sampling at that temperature
        "top_k": 0,  # sampling from the k most probable tokens only; 0 = all
        "top_p": 1.0,  # sampling from the smallest set of tokens holding this mass (nucleus)
        "seed": 0,  # sampling's random seed: the same seed, the same samples
        "prefix": None,  # forced target prefix (text), then search; None = none
    }
)

# The run config's `eval` key of each setting it holds (`trained_len` comes from `data`).
EVAL_KEYS: dict[str, str] = {
    "beam_size": "beam_size",
    "alpha": "alpha",
    "max_len_a": "max_len_a",
    "max_len_b": "max_len_b",
    "max_decode_len": "max_decode_len",
    "batch_size": "decode_batch_size",
    "segment_len": "segment_len",
}
