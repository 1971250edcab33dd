"""Id lists in, generated ids out: sort, batch, pad and decode over the local devices.

    tokens = decode_ids(model_config, params, [[4, 11, 2], [5, 6, 7, 11, 2]], beam_size=4,
                        alpha=0.6, max_len_a=2.0, max_len_b=10, max_decode_len=None, batch_size=64)

Text never reaches this module: `inference.Translator` encodes sentences with data/'s
`encode_text` (ids + `<eos>`, as in training) and decodes the ids it gets back here.

The shapes (`decoding.shapes`): each source's output budget follows its own length, never
its batch's, so a sentence translates the same alone or in any batch; sources are sorted by
length into batches padded to few program widths and row counts, so a test split of
sentences up to 64 tokens decodes with two programs.

Devices: a call's batches are split over the local devices (`runtime.cpu_devices` gives a
CPU several) once each device gets at least `MIN_HYPOTHESES_PER_DEVICE` hypotheses (rows x
beam, or samples); a smaller call decodes on fewer devices, as splitting it costs more in
dispatch than it saves (`_call_mesh`). A caller that decodes many times with the same
weights (a `Translator`: a server calls once per request batch) passes `params_cache`, a
dict in which the weights placed on each mesh are kept, not copied for every call.

Compiling: a call whose batches need programs of several widths compiles them at once, one
per host core, before decoding (`compile_only.ahead`), rather than each when its first batch
comes; programs the process has compiled or run before are not traced again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding import compile_only, sharded
from transformer_jax.decoding.options import DecodeOptions
from transformer_jax.decoding.shapes import (
    LENGTH_BUCKET,
    SourceTooLongError,
    call_rows,
    output_budget,
    output_cap,
    pad_batch,
    program_width,
    round_up,
    rows_for_width,
    sorted_batches,
)
from transformer_jax.nn import ModelConfig

# A batch is split over k devices only if each gets this many hypotheses (rows x beam or
# samples). Measured with the README model on 2 AMD EPYC cores as 2 CPU devices, time per call
# 2 devices vs 1: beam 4 with 1 / 2 sentences (4 / 8 hypotheses) 0.76x / 0.85x as fast, 4 /
# 8 / 64 sentences 1.13x / 1.23x / 1.39x; greedy 8 sentences 0.82x, 16 1.07x, 64 1.58x.
MIN_HYPOTHESES_PER_DEVICE = 8


def _batch_rows(n: int, batch_size: int, num_devices: int) -> int:
    """`call_rows`, rounded up to a multiple of `num_devices` (each decodes equal rows)."""
    return round_up(max(call_rows(n, batch_size), num_devices), num_devices)


def _call_mesh(n: int, batch_size: int, hypotheses: int) -> tuple[Any, int]:
    """(the mesh a call of n sentences decodes on, the rows of its batches): as many local
    devices as get `MIN_HYPOTHESES_PER_DEVICE` each (`hypotheses` per row), at least one."""
    rows = _batch_rows(n, batch_size, 1)
    fit = rows * hypotheses // MIN_HYPOTHESES_PER_DEVICE
    devices = max(1, min(len(jax.local_devices()), fit))
    return sharded.local_mesh(devices), _batch_rows(n, batch_size, devices)


def _placed(params: Any, mesh: Any, cache: MutableMapping[Any, Any] | None) -> Any:
    """`params` replicated on every device of `mesh`, taken from / kept in `cache` (keyed by
    mesh) when the caller gives one, so that its many small calls do not copy the weights to
    each device every time."""
    placed = cache.get(mesh) if cache is not None else None
    if placed is None:
        placed = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
        if cache is not None:
            cache[mesh] = placed
    return placed


def decode_ids(
    model_config: ModelConfig | tuple[ModelConfig, ...],
    params: Any,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int,
    max_decode_len: int | None,
    max_len_a: float,
    max_len_b: int,
    batch_size: int,
    alpha: float,
    trained_len: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    params_cache: MutableMapping[Any, Any] | None = None,
) -> list[np.ndarray]:
    """Decode non-empty id lists (each already ending in <eos>) -> generated ids per source.

    The settings are required (`decoding.defaults.DEFAULTS` has their defaults; a
    `Translator` resolves them from its run config).

    `model_config` and `params` may be tuples: an ensemble (`model_decode`).
    Each source may generate `output_budget(W)` tokens, W its own length rounded up to a
    multiple of 8, at most `output_cap(trained_len)` (see the module docstring). Returns one
    (L,) array per source (the best hypothesis: `<eos>` then `<pad>`; no `<eos>` when cut at
    its budget), L the budget of the batch's program width.
    `progress(done, total)` is called after each batch with the sources decoded so far.
    `params_cache`: a dict kept by the caller for the weights placed on each mesh, for
    calls with these same `params` only (module docstring).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    call = _Call.start(
        model_config, params, sources, batch_size=batch_size, hypotheses=beam_size,
        max_len_a=max_len_a, max_len_b=max_len_b, max_decode_len=max_decode_len,
        trained_len=trained_len, params_cache=params_cache,
    )  # fmt: skip

    def decode(batch: _Batch) -> np.ndarray:
        decoder = sharded.sharded_decoder(
            call.cfg,
            beam_size=beam_size,
            max_decode_len=call.budget(batch.width),
            alpha=float(alpha),
            mesh=call.mesh,
        )
        return np.asarray(decoder(call.params, batch.src, batch.src_len, call.row_limits(batch)))

    # One program per width: several compile at once, not each when its width comes.
    compile_only.ahead(lambda: call.first_per_width(sources, batch_size), decode)
    out: list[np.ndarray] = [np.zeros((0,), np.int32)] * len(sources)
    for batch in call.batches(sources, batch_size, progress):
        tokens = decode(batch)
        if tokens.ndim == 3:  # (B, W, L): the best of the n-best
            tokens = tokens[:, 0]
        for r, i in enumerate(batch.chunk):
            out[i] = tokens[r]
    return out


class _Batch(NamedTuple):
    """One padded batch of a call: its sources' indices, src (R, S) and src_len (R,) with
    R the call's rows, its longest source and its program width S."""

    chunk: list[int]
    src: np.ndarray
    src_len: np.ndarray
    longest: int
    width: int


class _Call(NamedTuple):
    """What the batches of one `decode_ids`/`decode_nbest` call share: the decode config,
    its position limit, the mesh and rows of every batch (`_call_mesh`), the weights placed
    on that mesh, and the output budget of a source width (that of a program width is the
    room of its program)."""

    cfg: Any
    limit: int | None
    mesh: Any
    num_rows: int
    params: Any
    budget: Callable[[int], int]

    @classmethod
    def start(
        cls,
        model_config: Any,
        params: Any,
        sources: Sequence[Sequence[int]],
        *,
        batch_size: int,
        hypotheses: int,
        max_len_a: float,
        max_len_b: int,
        max_decode_len: int | None,
        trained_len: int | None = None,
        params_cache: MutableMapping[Any, Any] | None = None,
    ) -> _Call:
        """Checks the call (batch_size, every source within the position table) and places
        the weights; `hypotheses` per source (beam or samples) size the mesh."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        cfg = decode_config(model_config)
        limit = position_limit(cfg)
        longest = max(map(len, sources), default=0)
        if limit is not None and longest > limit:
            raise SourceTooLongError(
                f"a source of {longest} tokens is longer than the learned position table "
                f"(model.max_len={limit})."
            )
        mesh, num_rows = _call_mesh(len(sources), batch_size, hypotheses)
        budget = functools.partial(
            output_budget,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            max_decode_len=max_decode_len,
            position_limit=limit,
            cap=output_cap(trained_len, max_len_a=max_len_a, max_len_b=max_len_b),
        )
        # Replicated on every device once a call (or kept for later calls): not per batch.
        return cls(cfg, limit, mesh, num_rows, _placed(params, mesh, params_cache), budget)

    def first_per_width(self, sources: Sequence[Sequence[int]], batch_size: int) -> list[_Batch]:
        """The first of `batches` at each program width, the widest first (only those are
        padded)."""
        first: dict[int, list[int]] = {}
        for chunk in sorted_batches([len(row) for row in sources], batch_size):
            longest = max(len(sources[i]) for i in chunk)
            first.setdefault(program_width(longest, self.limit), chunk)
        return [self._batch(sources, first[width]) for width in sorted(first, reverse=True)]

    def batches(
        self,
        sources: Sequence[Sequence[int]],
        batch_size: int,
        progress: Callable[[int, int], None] | None,
    ) -> Iterator[_Batch]:
        """The sources sorted by length into padded batches; `progress(done, total)` after
        each batch is decoded (when the caller asks for the next)."""
        done = 0
        for chunk in sorted_batches([len(row) for row in sources], batch_size):
            yield self._batch(sources, chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, len(sources))

    def row_limits(self, batch: _Batch, least: Sequence[int] | None = None) -> np.ndarray:
        """(R,) each row's own output budget: its source's (`output_budget`), at least its
        `least` (a forced prefix's room); 1 for filler rows, which end at once."""
        limits = np.ones((len(batch.src_len),), np.int32)
        for r in range(len(batch.chunk)):
            own = self.budget(round_up(int(batch.src_len[r]), LENGTH_BUCKET))
            limits[r] = max(own, least[r] if least is not None else 0)
        return limits

    def _batch(self, sources: Sequence[Sequence[int]], chunk: list[int]) -> _Batch:
        """The sources of `chunk` padded to their program width and the call's rows (fewer
        for wide sources: `rows_for_width`, rounded up to a multiple of the devices)."""
        rows = [list(sources[i]) for i in chunk]
        longest = max(map(len, rows))
        width = program_width(longest, self.limit)
        devices = self.mesh.devices.size
        num_rows = min(self.num_rows, round_up(rows_for_width(width), devices))
        src, src_len = pad_batch(rows, max(num_rows, len(rows)), width)
        return _Batch(chunk, src, src_len, longest, width)


def decode_config(model_config: Any) -> Any:
    """The deterministic, non-decode config (or tuple of an ensemble's) that decoding takes."""
    if isinstance(model_config, ModelConfig):
        return model_config.replace(deterministic=True, decode=False)
    return tuple(decode_config(c) for c in model_config)


def position_limit(model_config: Any) -> int | None:
    """The longest sequence every member can encode and decode (None: no limit)."""
    configs = (model_config,) if isinstance(model_config, ModelConfig) else model_config
    limits = [c.position_limit for c in configs if c.position_limit is not None]
    return min(limits) if limits else None


class Hypothesis(NamedTuple):
    """One of a source's n-best: ids (`<eos>` kept, no padding; cut at the budget without
    it), log P, and the score log P / ((5 + len) / 6)^alpha the search ranks by."""

    ids: list[int]
    log_prob: float
    score: float


def decode_nbest(
    model_config: ModelConfig | tuple[ModelConfig, ...],
    params: Any,
    sources: Sequence[Sequence[int]],
    *,
    options: DecodeOptions,
    prefixes: Sequence[Sequence[int]] | None = None,
    max_decode_len: int | None,
    max_len_a: float,
    max_len_b: int,
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
    sample_ids: Sequence[int] | Sequence[Sequence[int]] | np.ndarray | None = None,
    params_cache: MutableMapping[Any, Any] | None = None,
    trained_len: int | None = None,
) -> list[list[Hypothesis]]:
    """`decode_ids` with every `DecodeOptions`: the n-best of each source, best first.

    options: search (beam_size, alpha) or sampling (temperature > 0, top_k, top_p, seed:
      source i's samples depend on the seed and sample_ids[i] only, not on its batch), nbest.
    prefixes: forced first target ids per source (no `<eos>`; [] = none). Without a fixed
      `max_decode_len`, a source's output budget is at least its prefix and `max_len_b` more
      tokens.
    trained_len: the longest training source, for `output_cap` (as `decode_ids`').
    sample_ids: each source's random identity when sampling: (num_sources,) or
      (num_sources, K) whole numbers >= 0 (`sampling.row_keys`); default its index.
    params_cache: as `decode_ids`'.
    Returns nbest hypotheses per source (fewer when beam search finishes fewer).
    """
    options.validate()
    prefixes = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in sources]
    if len(prefixes) != len(sources):
        raise ValueError(f"{len(prefixes)} prefixes for {len(sources)} sources.")
    call = _Call.start(
        model_config, params, sources, batch_size=batch_size,
        hypotheses=options.nbest if options.sampling else options.beam_size,
        max_len_a=max_len_a, max_len_b=max_len_b, max_decode_len=max_decode_len,
        trained_len=trained_len, params_cache=params_cache,
    )  # fmt: skip
    limit = call.limit
    out: list[list[Hypothesis]] = [[] for _ in sources]
    forced = any(prefixes)
    ids = _sample_ids(sample_ids, len(sources))  # (num_sources, K)
    for batch in call.batches(sources, batch_size, progress):
        chunk, width, num_rows = batch.chunk, batch.width, len(batch.src_len)
        longest_prefix = max(len(prefixes[i]) for i in chunk)
        # Without a fixed max_decode_len, room for each prefix and max_len_b tokens after it.
        least = [
            len(prefixes[i]) + max_len_b if prefixes[i] and not max_decode_len else 0 for i in chunk
        ]
        room = max(call.budget(width), round_up(max(least), LENGTH_BUCKET))
        room = min(room, limit) if limit is not None else room
        lengths = np.minimum(call.row_limits(batch, least), room)  # (R,) each row's own
        prefix = None
        if forced:
            prefix = np.zeros((num_rows, round_up(max(1, longest_prefix), LENGTH_BUCKET)), np.int32)
            for r, i in enumerate(chunk):
                prefix[r, : len(prefixes[i])] = prefixes[i]
        row_ids = np.zeros((num_rows, ids.shape[1]), np.int32)
        row_ids[: len(chunk)] = ids[chunk]  # a source's samples follow its id (sampling.row_keys)
        decode = sharded.sharded_nbest_decoder(
            call.cfg,
            beam_size=options.beam_size,
            nbest=options.nbest,
            sampling=options.sampling,
            max_decode_len=room,
            forced=forced,
            mesh=call.mesh,
        )
        result = decode(
            call.params,
            batch.src,
            batch.src_len,
            limit=lengths,
            alpha=options.alpha,
            temperature=options.temperature if options.sampling else 1.0,
            top_k=options.top_k,
            top_p=options.top_p,
            seed=options.seed,
            row_ids=row_ids,
            prefix=prefix,
        )
        tokens, log_probs, scores = (np.asarray(x) for x in result)  # (B, N, L), (B, N) twice
        for r, i in enumerate(chunk):
            out[i] = [
                Hypothesis(
                    _hypothesis_ids(tokens[r, n]), float(log_probs[r, n]), float(scores[r, n])
                )
                for n in range(tokens.shape[1])
                if np.isfinite(scores[r, n])
            ]
    return out


def _sample_ids(given: Any, count: int) -> np.ndarray:
    """`decode_nbest`'s sample_ids as a (count, K) int32 array (default: each index)."""
    if given is None:
        return np.arange(count, dtype=np.int32)[:, None]
    ids = np.asarray(given, dtype=np.int64)
    ids = ids[:, None] if ids.ndim == 1 else ids
    if ids.ndim != 2 or len(ids) != count or (ids.size and not 0 <= ids.min() <= ids.max() < 2**31):
        raise ValueError(
            f"sample_ids must hold one whole number >= 0 (or one row of them) per source, "
            f"below 2**31; got shape {np.shape(given)} for {count} sources."
        )
    return ids.astype(np.int32)


def _hypothesis_ids(row: np.ndarray) -> list[int]:
    """(L,) generated ids -> the ids up to and with the first `<eos>` (all of them if none,
    without trailing padding)."""
    ids = [int(t) for t in row]
    if EOS_ID in ids:
        return ids[: ids.index(EOS_ID) + 1]
    while ids and ids[-1] == PAD_ID:
        ids.pop()
    return ids
