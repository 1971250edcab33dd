"""The decoders of `model_decode`, jitted with the batch split over this host's devices.

    decode = sharded_decoder(cfg, beam_size=4, max_decode_len=10, alpha=0.6)
    tokens = decode(params, src, src_len, limit)        # (B, L) greedy, (B, W, L) beam
    decode = sharded_nbest_decoder(cfg, beam_size=4, nbest=2, sampling=False,
                                   max_decode_len=10, forced=False)

Each device decodes its rows independently (`shard_map`, no collectives), so its search
loop stops as soon as its own rows are done. The decoders are cached per (config, sizes,
mesh), and every per-call number (each row's output limit, alpha, the sampling settings) is
an argument of the one compiled program, not a constant, so batches with other budgets or
options reuse it (`compile_only.call` compiles it ahead when asked).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from transformer_jax.decoding import compile_only
from transformer_jax.decoding.model_decode import NBest, beam_decode, greedy_decode, nbest_decode
from transformer_jax.nn import ModelConfig
from transformer_jax.runtime.axes import DATA_AXIS

Array = jnp.ndarray


def local_mesh(devices: int | None = None) -> Mesh:
    """A 1-D mesh over this host's devices (the first `devices` of them; None: all);
    decoding splits the batch along it."""
    return Mesh(np.array(jax.local_devices()[:devices]), (DATA_AXIS,))


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

    `limit` (each row's most tokens, (B,) or one int for all, <= `max_decode_len`, default
    it) is an argument of the one compiled program, so batches with other output budgets up
    to `max_decode_len` reuse it. Each
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
            in_specs=(PartitionSpec(), data, data, data),
            out_specs=data,
            check_vma=False,
        )
    )

    def decode(params: Any, src: Array, src_len: Array, limit: Any = None) -> Array:
        limit = _row_limits(max_decode_len if limit is None else limit, src.shape[0])
        return compile_only.call(mapped, params, src, src_len, limit)

    return decode


@functools.lru_cache(maxsize=32)
def sharded_nbest_decoder(
    config: Any,
    *,
    beam_size: int,
    nbest: int,
    sampling: bool,
    max_decode_len: int,
    forced: bool,
    mesh: Mesh | None = None,
):
    """`sharded_decoder` for `nbest_decode`: a jitted fn(params, src (B, S), src_len (B,), limit
    (B,) or one int, alpha, temperature, top_k, top_p, seed, row_ids (B,) or (B, K), prefix (B,
    P) or None) -> `NBest`, the batch split over devices. Every number is traced (one program
    for all their values); `forced` says whether a prefix is given (a program with the
    forcing)."""
    mesh = mesh or local_mesh()
    data, shared = PartitionSpec(DATA_AXIS), PartitionSpec()

    def per_device(
        params, src, src_len, limit, alpha, temperature, top_k, top_p, seed, ids, prefix
    ):
        return nbest_decode(
            config,
            params,
            src,
            src_len,
            beam_size=beam_size,
            nbest=nbest,
            sampling=sampling,
            max_decode_len=max_decode_len,
            alpha=alpha,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            row_ids=ids,
            limit=limit,
            prefix=prefix if forced else None,
        )

    mapped = jax.jit(
        jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(shared, data, data, data, *[shared] * 5, data, data),
            out_specs=NBest(data, data, data),
            check_vma=False,
        )
    )

    def decode(
        params, src, src_len, *, limit, alpha, temperature, top_k, top_p, seed, row_ids, prefix
    ):
        if prefix is None:  # an unused (B, 1) operand keeps one signature
            prefix = np.zeros((src.shape[0], 1), np.int32)
        return compile_only.call(
            mapped,
            params,
            src,
            src_len,
            _row_limits(limit, src.shape[0]),
            np.float32(alpha),
            np.float32(temperature),
            np.int32(top_k),
            np.float32(top_p),
            np.uint32(seed),
            np.asarray(row_ids, np.int32),
            np.asarray(prefix, np.int32),
        )

    return decode


def _row_limits(limit: Any, rows: int) -> np.ndarray:
    """Each row's most tokens as the programs take them: an int or (B,) -> (B,) int32."""
    return np.broadcast_to(np.asarray(limit, np.int32), (rows,)).copy()
