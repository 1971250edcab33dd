"""Greedy and beam search over the decoder's cache (pure functions), and batched decoding of
id lists. Text in, text out is `transformer_jax.inference.Translator`."""

from transformer_jax.decoding.batch_decode import (
    SourceTooLongError,
    decode_ids,
    output_budget,
)
from transformer_jax.decoding.model_decode import (
    beam_decode,
    greedy_decode,
    local_mesh,
    sharded_decoder,
)
from transformer_jax.decoding.search import (
    BeamResult,
    beam_search,
    cache_lengths,
    gather_rows,
    greedy_search,
    length_penalty,
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
    "SourceTooLongError",
    "beam_decode",
    "beam_search",
    "cache_lengths",
    "cached_step",
    "decode_ids",
    "encode",
    "gather_rows",
    "greedy_decode",
    "greedy_search",
    "grow_cache",
    "init_cache",
    "length_penalty",
    "local_mesh",
    "merge_cache",
    "output_budget",
    "project_memory",
    "recompute_state",
    "recompute_step",
    "sharded_decoder",
    "split_cache",
    "tile_beams",
]
