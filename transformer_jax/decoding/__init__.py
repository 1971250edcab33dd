"""Greedy and beam search over the decoder's cache (pure functions), and text translation."""

from transformer_jax.decoding.attention_maps import AttentionMaps, attention_weights
from transformer_jax.decoding.model_decode import (
    beam_decode,
    greedy_decode,
    local_mesh,
    sharded_decoder,
)
from transformer_jax.decoding.search import (
    BeamResult,
    beam_search,
    gather_rows,
    greedy_search,
    length_penalty,
    tile_beams,
)
from transformer_jax.decoding.steps import (
    cached_step,
    encode,
    init_cache,
    merge_cache,
    project_memory,
    recompute_state,
    recompute_step,
    split_cache,
)
from transformer_jax.decoding.translate import (
    DecodingWarning,
    EncodedSources,
    SourceTooLongError,
    Translations,
    decode_ids,
    decode_settings,
    encode_sources,
    output_budget,
    source_ids,
    translate,
    translate_detailed,
)

__all__ = [
    "AttentionMaps",
    "BeamResult",
    "DecodingWarning",
    "EncodedSources",
    "SourceTooLongError",
    "Translations",
    "attention_weights",
    "beam_decode",
    "beam_search",
    "cached_step",
    "decode_ids",
    "decode_settings",
    "encode",
    "encode_sources",
    "gather_rows",
    "greedy_decode",
    "greedy_search",
    "init_cache",
    "length_penalty",
    "local_mesh",
    "merge_cache",
    "output_budget",
    "project_memory",
    "recompute_state",
    "recompute_step",
    "sharded_decoder",
    "source_ids",
    "split_cache",
    "tile_beams",
    "translate",
    "translate_detailed",
]
