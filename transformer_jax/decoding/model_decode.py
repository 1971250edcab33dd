"""Greedy and beam decoding of a `Transformer` on token arrays, jitted (over devices:
`decoding.sharded`).

    tokens = greedy_decode(cfg, params, src, src_len, max_decode_len=10)        # (B, L)
    result = beam_decode(cfg, params, src, src_len, beam_size=4, max_decode_len=10, alpha=0.6)
    nbest = nbest_decode(cfg, params, src, src_len, beam_size=4, nbest=2, max_decode_len=10,
                         alpha=0.6)                      # tokens (B, 2, L), log_probs, scores
    tokens = greedy_decode((cfg, cfg2), (params, params2), src, src_len, max_decode_len=10)

A tuple of configs with a tuple of their parameters is an ensemble: each step feeds the token
to every member and searches the mean of their log-probabilities (`search.mean_log_probs_step`;
the members share the vocabularies). `prefix` (B, P) forces each row's first tokens
(`search.forced_tokens`); `nbest_decode` also samples (`decoding.sampling`).

Encoding, the cache and the whole search loop compile into one XLA program. Beam search
grows its key/value cache with the output (`search.cache_lengths`: room for 32, 64, ...
positions) instead of allocating all `max_decode_len` up front, so each step reads and
reorders about as many positions as it has written (the time saved on real sentences is in
benchmarks/README.md). Each segment is one more loop body to compile, and greedy search,
whose step is dominated by the matmuls of B rows, gained nothing measurable, so
`grow_cache` defaults to True for beam search and False for greedy; the tokens and scores
are the same either way.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from transformer_jax.decoding import sampling as sampling_lib
from transformer_jax.decoding import search, steps
from transformer_jax.nn import ModelConfig

Array = jnp.ndarray


def members(config: Any, params: Any) -> tuple[tuple[ModelConfig, Any], ...]:
    """((config, params), ...) of one model, or of an ensemble given as a tuple of configs
    and a tuple of their parameters (module docstring)."""
    if isinstance(config, ModelConfig):
        return ((config, params),)
    if len(config) != len(params) or not config:
        raise ValueError(
            f"an ensemble needs one params per config, got {len(config)} configs "
            f"and {len(params)} params."
        )
    return tuple(zip(config, params, strict=True))


def _step_and_state(config, params, src, src_len, max_decode_len, beam_size, use_cache, grow_cache):
    """(step_fn, initial state, grow_fn or None) of a search over B·W rows; for an ensemble,
    the mean of its members' log-probabilities (`search.mean_log_probs_step`)."""
    parts = [
        _member_step(cfg, p, src, src_len, max_decode_len, beam_size, use_cache, grow_cache)
        for cfg, p in members(config, params)
    ]
    if len(parts) == 1 and isinstance(config, ModelConfig):
        return parts[0]
    step = search.mean_log_probs_step([part[0] for part in parts])
    state = tuple(part[1] for part in parts)
    grow = None
    if parts[0][2] is not None:
        grows = [part[2] for part in parts]
        grow = lambda states, n: tuple(g(s, n) for g, s in zip(grows, states, strict=True))
    return step, state, grow


def _member_step(config, params, src, src_len, max_decode_len, beam_size, use_cache, grow_cache):
    """(step_fn, initial state, grow_fn or None) of a search over B·W rows."""
    memory = steps.encode(config, params, src, src_len)  # (B, S, D)
    rows = memory.shape[0] * beam_size  # B·W hypotheses
    grow = None
    if use_cache:
        room = max_decode_len
        if grow_cache:
            grow, room = steps.grow_cache, search.cache_lengths(max_decode_len)[0]
        # The projected memory stays at B rows: the W hypotheses of a sentence share it
        # (nn.attention groups their queries), so it is neither tiled nor reordered.
        cache = steps.init_cache(config, memory, src_len, room, rows=rows)
        memory_cache = steps.project_memory(config, params, memory, src_len, cache)
        step = steps.cached_step(config, params, memory, src_len, memory_cache)
        state = steps.split_cache(cache)[0]
    else:
        if beam_size > 1:
            memory = search.tile_beams(memory, beam_size)  # (B·W, S, D)
            src_len = search.tile_beams(src_len, beam_size)  # (B·W,)
        step = steps.recompute_step(config, params, memory, src_len)
        state = steps.recompute_state(rows, max_decode_len)
    return step, state, grow


@functools.partial(jax.jit, static_argnames=("config", "max_decode_len", "use_cache", "grow_cache"))
def greedy_decode(
    config: ModelConfig,
    params: Any,
    src: Array,
    src_len: Array,
    *,
    max_decode_len: int,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    use_cache: bool = True,
    grow_cache: bool = False,
) -> Array:
    """src (B, S), src_len (B,) -> generated ids (B, L), `<eos>` kept, then `<pad>`.

    `limit` (traced, <= L = `max_decode_len`; a scalar or (B,), each row's own) stops
    earlier without another compilation. `<eos>` is never the first token (`search`).
    `use_cache=False` recomputes the decoder over the prefix at every step (the reference);
    `grow_cache=True` grows the cache with the output as beam search does (module docstring).
    `prefix` (B, P): forced first tokens, `<pad>` past each row's (`search.forced_tokens`).
    """
    _check_members(config, params, max_decode_len)
    step, state, grow = _step_and_state(
        config, params, src, src_len, max_decode_len, 1, use_cache, grow_cache
    )
    return search.greedy_search(
        step,
        state,
        src.shape[0],
        max_decode_len,
        grow=grow,
        limit=limit,
        prefix=prefix,
        pad_id=_pad_id(config),
    )


@functools.partial(
    jax.jit,
    static_argnames=("config", "beam_size", "max_decode_len", "use_cache", "grow_cache"),
)
def beam_decode(
    config: ModelConfig,
    params: Any,
    src: Array,
    src_len: Array,
    *,
    beam_size: int,
    max_decode_len: int,
    alpha: float | Array,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    use_cache: bool = True,
    grow_cache: bool = True,
) -> search.BeamResult:
    """src (B, S), src_len (B,) -> n-best tokens (B, W, L) and scores (B, W), best first.

    `limit` (traced, <= L = `max_decode_len`; a scalar or (B,), each sentence's own) cuts
    hypotheses earlier, and `prefix` forces the first tokens, as in `greedy_decode`.
    """
    _check_members(config, params, max_decode_len)
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    step, state, grow = _step_and_state(
        config, params, src, src_len, max_decode_len, beam_size, use_cache, grow_cache
    )
    return search.beam_search(
        step,
        state,
        src.shape[0],
        beam_size,
        max_decode_len,
        alpha=alpha,
        grow=grow,
        limit=limit,
        prefix=prefix,
        pad_id=_pad_id(config),
    )


def _check_members(config: Any, params: Any, max_decode_len: int) -> None:
    for cfg, _ in members(config, params):
        steps.check_decode_len(cfg, max_decode_len)


def _pad_id(config: Any) -> int:
    return (config if isinstance(config, ModelConfig) else config[0]).pad_id


class NBest(NamedTuple):
    """n-best output of `nbest_decode`, best first: tokens (B, N, L) int32 (`<eos>`, then
    `<pad>`), log_probs (B, N) log P, scores (B, N) log P / lp(len) (GNMT's penalty, with
    len counting `<eos>`); -inf marks an empty slot (beam search found fewer than N)."""

    tokens: Array
    log_probs: Array
    scores: Array


@functools.partial(
    jax.jit,
    static_argnames=("config", "beam_size", "nbest", "sampling", "max_decode_len", "use_cache"),
)
def nbest_decode(
    config: Any,
    params: Any,
    src: Array,
    src_len: Array,
    *,
    beam_size: int,
    nbest: int,
    max_decode_len: int,
    alpha: float | Array,
    sampling: bool = False,
    temperature: float | Array = 1.0,
    top_k: int | Array = 0,
    top_p: float | Array = 1.0,
    seed: int | Array = 0,
    row_ids: Array | None = None,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    use_cache: bool = True,
) -> NBest:
    """src (B, S), src_len (B,) -> the N = `nbest` best hypotheses with their scores.

    Beam search (beam_size > 1) keeps its W best (N <= W); greedy search (beam_size 1, not
    sampling) has one; sampling draws N independent samples per sentence (sample j of row b has
    id (row_ids[b]..., j); row_ids (B,) or (B, K), default b: `sampling.row_keys`), sorted by
    score. `limit`, `prefix` as in `greedy_decode`. `config`/`params` may be tuples: an
    ensemble.
    """
    _check_members(config, params, max_decode_len)
    b = src.shape[0]
    pad_id = _pad_id(config)
    limit_ = search.row_limits(limit, max_decode_len, b)  # (B,)
    if sampling or beam_size == 1:
        rows = nbest if sampling else 1
        step, state, grow = _step_and_state(
            config, params, src, src_len, max_decode_len, rows, use_cache, False
        )
        tiled_prefix = None if prefix is None else search.tile_beams(prefix, rows)
        tiled_limit = search.tile_beams(limit_, rows)  # (B·N,): a sample ends at its own
        if sampling:
            ids = jnp.arange(b, dtype=jnp.int32) if row_ids is None else row_ids
            ids = search.tile_beams(jnp.reshape(ids, (b, -1)), rows)  # (B·N, K)
            copy = jnp.tile(jnp.arange(rows, dtype=jnp.int32), b)[:, None]  # (B·N, 1): j
            ids = jnp.concatenate([ids.astype(jnp.int32), copy], axis=1)
            tokens, log_probs = sampling_lib.sample_search(
                step,
                state,
                b * rows,
                max_decode_len,
                seed=seed,
                row_ids=ids,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                grow=grow,
                limit=tiled_limit,
                prefix=tiled_prefix,
                pad_id=pad_id,
            )
        else:
            tokens, log_probs = search.extend_rows(
                step,
                state,
                b,
                max_decode_len,
                lambda logits, i: search.first_argmax(logits),
                grow=grow,
                limit=tiled_limit,
                prefix=tiled_prefix,
                pad_id=pad_id,
            )
        tokens = tokens.reshape(b, rows, max_decode_len)  # (B, N, L)
        log_probs = log_probs.reshape(b, rows)
        lengths = search.hypothesis_lengths(tokens, limit_[:, None])  # (B, N)
        scores = log_probs / search.length_penalty(lengths, alpha)  # (B, N)
        order = jnp.argsort(-scores, axis=1, stable=True)  # best first
        tokens = jnp.take_along_axis(tokens, order[:, :, None], axis=1)
        return NBest(
            tokens,
            jnp.take_along_axis(log_probs, order, axis=1),
            jnp.take_along_axis(scores, order, axis=1),
        )
    result = beam_decode(
        config,
        params,
        src,
        src_len,
        beam_size=beam_size,
        max_decode_len=max_decode_len,
        alpha=alpha,
        limit=limit_,
        prefix=prefix,
        use_cache=use_cache,
    )
    tokens, scores = result.tokens[:, :nbest], result.scores[:, :nbest]
    lengths = search.hypothesis_lengths(tokens, limit_[:, None])
    return NBest(tokens, scores * search.length_penalty(lengths, alpha), scores)
