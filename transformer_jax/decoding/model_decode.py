"""Greedy and beam decoding of a `Transformer` on token arrays, jitted and device-sharded.

    tokens = greedy_decode(cfg, params, src, src_len, max_decode_len=10)        # (B, L)
    result = beam_decode(cfg, params, src, src_len, beam_size=4, max_decode_len=10, alpha=0.6)
    decode = sharded_decoder(cfg, beam_size=4, max_decode_len=10, alpha=0.6)  # over devices

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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from transformer_jax.decoding import search, steps
from transformer_jax.nn import ModelConfig
from transformer_jax.runtime.axes import DATA_AXIS

Array = jnp.ndarray


def _step_and_state(config, params, src, src_len, max_decode_len, beam_size, use_cache, grow_cache):
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
    use_cache: bool = True,
    grow_cache: bool = False,
) -> Array:
    """src (B, S), src_len (B,) -> generated ids (B, L), `<eos>` kept, then `<pad>`.

    `limit` (traced, <= L = `max_decode_len`) stops earlier without another compilation.
    `use_cache=False` recomputes the decoder over the prefix at every step (the reference);
    `grow_cache=True` grows the cache with the output as beam search does (module docstring).
    """
    steps.check_decode_len(config, max_decode_len)
    step, state, grow = _step_and_state(
        config, params, src, src_len, max_decode_len, 1, use_cache, grow_cache
    )
    return search.greedy_search(
        step, state, src.shape[0], max_decode_len, grow=grow, limit=limit, pad_id=config.pad_id
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
    use_cache: bool = True,
    grow_cache: bool = True,
) -> search.BeamResult:
    """src (B, S), src_len (B,) -> n-best tokens (B, W, L) and scores (B, W), best first.

    `limit` (traced, <= L = `max_decode_len`) cuts hypotheses earlier, as in `greedy_decode`.
    """
    steps.check_decode_len(config, max_decode_len)
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
        pad_id=config.pad_id,
    )


def local_mesh() -> Mesh:
    """A 1-D mesh over this host's devices; decoding splits the batch along it."""
    return Mesh(np.array(jax.local_devices()), (DATA_AXIS,))


@functools.lru_cache(maxsize=32)
def sharded_decoder(
    config: ModelConfig,
    *,
    beam_size: int,
    max_decode_len: int,
    alpha: float,
    mesh: Mesh | None = None,
):
    """A jitted fn(params, src (B, S), src_len (B,), limit=None) -> tokens, the batch split
    over devices.

    `limit` (an int <= `max_decode_len`, default it) is an argument of the one compiled
    program, so batches with other output budgets up to `max_decode_len` reuse it. Each
    device decodes its B / devices rows independently (`shard_map`, no collectives), so its
    while-loop stops as soon as its own rows are done. B must be divisible by the number of
    devices. Returns (B, L) for beam_size 1 (greedy) and (B, W, L) n-best tokens otherwise
    (use `beam_decode` directly for scores).
    """
    mesh = mesh or local_mesh()
    data = PartitionSpec(DATA_AXIS)

    def per_device(params, src, src_len, limit):
        if beam_size == 1:
            return greedy_decode(
                config, params, src, src_len, max_decode_len=max_decode_len, limit=limit
            )
        return beam_decode(
            config,
            params,
            src,
            src_len,
            beam_size=beam_size,
            max_decode_len=max_decode_len,
            alpha=alpha,
            limit=limit,
        ).tokens

    mapped = jax.jit(
        jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(PartitionSpec(), data, data, PartitionSpec()),
            out_specs=data,
            check_vma=False,
        )
    )

    def decode(params: Any, src: Array, src_len: Array, limit: int | None = None) -> Array:
        return mapped(params, src, src_len, np.int32(max_decode_len if limit is None else limit))

    return decode
