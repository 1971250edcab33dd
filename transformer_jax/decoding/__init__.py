"""Greedy and beam search over the decoder's cache (pure functions), and text translation."""

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
    AttentionMaps,
    DecodingWarning,
    EncodedSources,
    attention_weights,
    decode_ids,
    encode_sources,
    source_ids,
    translate,
)

__all__ = [
    "AttentionMaps",
    "BeamResult",
    "DecodingWarning",
    "EncodedSources",
    "attention_weights",
    "beam_decode",
    "beam_search",
    "cached_step",
    "decode_ids",
    "encode",
    "encode_sources",
    "gather_rows",
    "greedy_decode",
    "greedy_search",
    "init_cache",
    "length_penalty",
    "local_mesh",
    "merge_cache",
    "project_memory",
    "recompute_state",
    "recompute_step",
    "sharded_decoder",
    "source_ids",
    "split_cache",
    "tile_beams",
    "translate",
]
