"""Greedy and beam search and sampling over the decoder's cache (pure functions), forced target
prefixes, ensembles, and batched decoding of id lists; `DecodeOptions` says how to decode.
Text in, text out is `transformer_jax.inference.Translator`."""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.decoding.batch_decode": ["decode_ids"],
        "transformer_jax.decoding.model_decode": [
            "NBest",
            "beam_decode",
            "greedy_decode",
            "nbest_decode",
        ],
        "transformer_jax.decoding.options": ["DecodeOptions", "Hypotheses"],
        "transformer_jax.decoding.sampling": ["filter_logits", "sample_search"],
        "transformer_jax.decoding.sharded": [
            "local_mesh",
            "sharded_decoder",
            "sharded_nbest_decoder",
        ],
        "transformer_jax.decoding.shapes": ["SourceTooLongError", "output_budget"],
        "transformer_jax.decoding.search": [
            "BeamResult",
            "beam_search",
            "cache_lengths",
            "extend_rows",
            "gather_rows",
            "greedy_search",
            "hypothesis_lengths",
            "length_penalty",
            "mean_log_probs_step",
            "tile_beams",
        ],
        "transformer_jax.decoding.steps": [
            "cached_step",
            "encode",
            "grow_cache",
            "init_cache",
            "merge_cache",
            "project_memory",
            "recompute_state",
            "recompute_step",
            "split_cache",
        ],
    },
)
