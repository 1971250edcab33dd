"""Greedy and beam search and sampling over the decoder's cache (pure functions), forced target
prefixes, ensembles, and batched decoding of id lists; `DecodeOptions` says how to decode.
Text in, text out is `transformer_jax.inference.Translator`."""

from transformer_jax.decoding.batch_decode import (
    SourceTooLongError,
    decode_ids,
    output_budget,
)
from transformer_jax.decoding.model_decode import (
    NBest,
    beam_decode,
    greedy_decode,
    local_mesh,
    nbest_decode,
    sharded_decoder,
    sharded_nbest_decoder,
)
from transformer_jax.decoding.options import DecodeOptions, Hypotheses
from transformer_jax.decoding.sampling import filter_logits, sample_search
from transformer_jax.decoding.search import (
    BeamResult,
    beam_search,
    cache_lengths,
    extend_rows,
    gather_rows,
    greedy_search,
    hypothesis_lengths,
    length_penalty,
    mean_log_probs_step,
    tile_beams,
)
from transformer_jax.decoding.steps import (
    cached_step,
    encode,
    grow_cache,
    init_cache,
    merge_cache,
    project_memory,
    recompute_state,
    recompute_step,
    split_cache,
)

__all__ = [
    "BeamResult",
    "DecodeOptions",
    "Hypotheses",
    "NBest",
    "SourceTooLongError",
    "beam_decode",
    "beam_search",
    "cache_lengths",
    "cached_step",
    "decode_ids",
    "encode",
    "extend_rows",
    "filter_logits",
    "gather_rows",
    "greedy_decode",
    "greedy_search",
    "grow_cache",
    "hypothesis_lengths",
    "init_cache",
    "length_penalty",
    "local_mesh",
    "mean_log_probs_step",
    "merge_cache",
    "nbest_decode",
    "output_budget",
    "project_memory",
    "recompute_state",
    "recompute_step",
    "sample_search",
    "sharded_decoder",
    "sharded_nbest_decoder",
    "split_cache",
    "tile_beams",
]
