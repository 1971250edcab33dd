"""Greedy and beam search as pure functions of a step function (d2l §10.8, Wu et al. 2016).

A *step function* feeds one token per row and returns the next-token logits:

    step_fn(tokens (N,) int32, state) -> (logits (N, V), new_state)

`state` is any pytree (the decoder's key/value cache, or a prefix buffer for decoding by full
recomputation). Leaves with a leading axis of N rows are per-row; scalar leaves (cache and
position indices) are shared. Beam search flattens beams into rows, N = B·W, and reorders the
state by gathering along axis 0 of every non-scalar leaf.

Both searches are written for `jax.jit`: the loop is a `lax.while_loop` with fixed shapes, no
host syncs per token, and it exits as soon as every row is done. Given a `grow` function, the
loop runs in segments over a state that grows between them (`cache_lengths`): a decoder cache
then holds 32, 64, ... positions instead of all L from the first step, so early steps attend
to (and beam search reorders) a short cache.

Each row (greedy, sampling) or sentence (beam search) has its own `limit`: it ends there as if
by `<eos>`, so its output never depends on the other rows of its batch. As fairseq's default
`min_len=1`, `<eos>` cannot be the first token: a non-empty source never gets an empty output
(callers never decode empty sources); `<pad>` and `<bos>` are never written (`ruled_out`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID

Array = jnp.ndarray
StepFn = Callable[[Array, Any], tuple[Array, Any]]
# grow(state, n) -> the state with room for n positions (n >= its current room).
GrowFn = Callable[[Any, int], Any]

NEG_INF = -jnp.inf


def length_penalty(length: Array | int, alpha: Array | float, xp: Any = jnp) -> Array:
    """GNMT's length penalty lp(len) = ((5 + len) / 6)^α (Wu et al. 2016, eq. 14).

    A hypothesis scores log P / lp(len); α = 0 ranks by log-probability alone, larger α
    favours longer outputs. xp: the array module, `numpy` to rank on the host (the
    CTranslate2 engine re-ranks its hypotheses with this penalty), in float32 either way.
    """
    return ((5.0 + xp.asarray(length, xp.float32)) / 6.0) ** alpha


def row_limits(limit: Array | int | None, max_len: int, rows: int) -> Array:
    """Each row's most tokens, at most L = max_len: a scalar or (rows,) -> (rows,) int32."""
    if limit is None:
        return jnp.full((rows,), max_len, jnp.int32)
    limit = jnp.broadcast_to(jnp.asarray(limit, jnp.int32), (rows,))
    return jnp.minimum(limit, max_len)


def ruled_out(
    logits: Array,
    i: Array,
    min_len: int,
    *,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
) -> Array:
    """(N, V) logits (or log-probabilities) with what no output may hold at step i at -inf:
    `<pad>` and `<bos>` always (no target holds them; a model that still ranks one first,
    e.g. an untrained one, would otherwise write an empty line, its padding stripped), and
    `<eos>` while i < min_len.

    fairseq does both (pad never; min_len=1 by default): the most probable first token of a
    short, odd source (a lone "I", "<pad>" as text) was `<eos>`, an empty translation of a
    non-empty input.
    """
    ids = jnp.arange(logits.shape[-1])  # (V,)
    never = (ids == pad_id) | (ids == bos_id)
    if min_len >= 1:
        never = never | ((i < min_len) & (ids == eos_id))
    return jnp.where(never, NEG_INF, logits)


def first_argmax(logits: Array) -> Array:
    """`jnp.argmax(logits, axis=-1)` as two plain reductions: (N, V) -> (N,) int32.

    The lowest index holding the row maximum, exactly as `jnp.argmax` (ties go to the
    first). XLA:CPU lowers `argmax` to a variadic (value, index) reduction that runs
    ~10× slower than a max; at V = 8000 it took a tenth of each cached greedy step
    (benchmarks/LOG.md). Rows must be NaN-free (logits are).
    """
    vocab = logits.shape[-1]
    row_max = jnp.max(logits, axis=-1, keepdims=True)  # (N, 1)
    index = jnp.arange(vocab, dtype=jnp.int32)
    return jnp.min(jnp.where(logits == row_max, index, vocab), axis=-1)  # (N,)


def cache_lengths(max_len: int, first: int = 32) -> tuple[int, ...]:
    """Room of the decoding segments: `first`, doubling, ending at `max_len`.

    Step i runs in the first segment whose room exceeds i, so the state holds at most about
    twice the positions written so far. A last segment of less than a quarter more room is
    merged into the one before (a loop body saved for little gain):

        cache_lengths(32) == (32,)          cache_lengths(40) == (32, 40)
        cache_lengths(5) == (5,)            cache_lengths(138) == (32, 64, 138)

    Each segment is one more loop body to compile (~1 s each for the README model's beam
    search on 2 CPU cores). Rooms of 8 and 16 first made the README run's 1,000-sentence
    report compile 22 loop bodies where 32 first compiles 10: its decoding with compilation
    took 19-21 s instead of 27-29, the whole test split 68 s instead of 74-77. A batch that
    stays short reads up to 32 positions instead (`benchmarks.decode`'s 32-token beam, whose
    shapes compile once, is 8-13 % slower; benchmarks/LOG.md).
    """
    if max_len < 1 or first < 1:
        raise ValueError(f"max_len and first must be >= 1, got {max_len} and {first}.")
    lengths = [first]
    while lengths[-1] * 2 < max_len:
        lengths.append(lengths[-1] * 2)
    if 4 * max_len < 5 * lengths[-1]:  # max_len < 1.25 x the last room: merge
        lengths.pop()
    return (*lengths, max_len)


def _segmented_loop(cond, body, carry: tuple, max_len: int, grow: GrowFn | None) -> tuple:
    """`lax.while_loop(cond, body, carry)`, run in `cache_lengths(max_len)` segments when
    `grow` is given: before segment k the state (the carry's last item) grows to its room
    and the loop stops at step index (the carry's first item) = room."""
    if grow is None:
        return jax.lax.while_loop(cond, body, carry)
    for room in cache_lengths(max_len):
        carry = (*carry[:-1], grow(carry[-1], room))
        carry = jax.lax.while_loop(lambda c, r=room: (c[0] < r) & cond(c), body, carry)
    return carry


# pick(logits (N, V), step index ()) -> the next token of each row (N,) int32.
PickFn = Callable[[Array, Array], Array]


def greedy_search(
    step_fn: StepFn,
    state: Any,
    batch_size: int,
    max_len: int,
    *,
    grow: GrowFn | None = None,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    min_len: int = 1,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> Array:
    """Feed `<bos>`, then always the arg-max token, until `<eos>` or `limit` tokens.

    Args:
      step_fn: (tokens (B,), state) -> (logits (B, V), state).
      state: initial step-function state for B rows.
      batch_size: B.
      max_len: L, the most tokens generated per row (`<eos>` included).
      grow: if given, decode in `cache_lengths(L)` segments, growing `state` before each;
        `state` then starts with room for at most the first segment's positions.
      limit: the most tokens to generate, <= L: a scalar, or (B,) one per row (a row that
        reaches its own limit ends there, as by `<eos>`); traced, so one compiled program
        (shapes of L) serves every budget up to L. Default L.
      prefix: (B, P) int32 forced first tokens per row, `<pad>` where a row's prefix has
        ended (see `forced_tokens`); the search continues after them.
      min_len: steps before `<eos>` may be picked (module docstring; 0 = from the first).

    Returns:
      (B, L) int32 generated ids: `<eos>` is kept, positions after it hold `<pad>`.
    """
    return extend_rows(
        step_fn,
        state,
        batch_size,
        max_len,
        lambda logits, i: first_argmax(logits),
        grow=grow,
        limit=limit,
        prefix=prefix,
        min_len=min_len,
        scored=False,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
    )[0]


def forced_tokens(prefix: Array | None, i: Array, pad_id: int = PAD_ID) -> tuple[Array, Array]:
    """Step i's forced token of each row and whether it is forced: (B, P) -> (B,), (B,).

    A row is forced while i < P and its prefix holds a token other than `<pad>` at i.
    """
    if prefix is None:
        return None, None
    width = prefix.shape[1]
    token = jax.lax.dynamic_index_in_dim(prefix, jnp.minimum(i, width - 1), 1, keepdims=False)
    return token, (i < width) & (token != pad_id)


def extend_rows(
    step_fn: StepFn,
    state: Any,
    batch_size: int,
    max_len: int,
    pick: PickFn,
    *,
    grow: GrowFn | None = None,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    min_len: int = 1,
    scored: bool = True,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> tuple[Array, Array]:
    """One hypothesis per row, extended by `pick(logits, i)` (greedy: the arg-max; sampling:
    a draw) after any forced `prefix` tokens, until `<eos>` or the row's `limit` tokens
    (scalar or (B,)); `pick` never sees `<eos>` before step `min_len`, nor ever `<pad>` or
    `<bos>` (`ruled_out`).

    Returns (tokens (B, L) as `greedy_search`'s, log P (B,) of each row's tokens under the
    step function's distribution, `<eos>` included; zeros when not `scored`, which saves a
    log-softmax per step). As fairseq's, log P is not renormalised for the `<eos>` that
    `min_len` rules out.
    """
    limit = row_limits(limit, max_len, batch_size)  # (B,)
    longest = jnp.max(limit)
    tokens = jnp.full((batch_size, max_len), pad_id, jnp.int32)  # (B, L)
    last = jnp.full((batch_size,), bos_id, jnp.int32)  # (B,)
    finished = jnp.zeros((batch_size,), bool)  # (B,)
    # None (no carry at all) unless scored: greedy_search's loop stays as it was.
    log_prob = jnp.zeros((batch_size,), jnp.float32) if scored else None  # (B,)

    def cond(carry):
        i, _, _, finished, _, _ = carry
        return (i < longest) & ~jnp.all(finished)

    def body(carry):
        i, last, tokens, finished, log_prob, state = carry
        logits, state = step_fn(last, state)  # (B, V)
        nxt = pick(ruled_out(logits, i, min_len, eos_id=eos_id, pad_id=pad_id, bos_id=bos_id), i)
        token, forced = forced_tokens(prefix, i, pad_id)
        if prefix is not None:
            nxt = jnp.where(forced, token, nxt)
        # Rows that are done keep emitting <pad>; the model still runs on them (fixed shapes).
        nxt = jnp.where(finished, pad_id, nxt)
        if scored:
            logp = jax.nn.log_softmax(logits.astype(jnp.float32))  # (B, V)
            step_logp = jnp.take_along_axis(logp, nxt[:, None], axis=1)[:, 0]  # (B,)
            log_prob = log_prob + jnp.where(finished, 0.0, step_logp)
        tokens = jax.lax.dynamic_update_slice_in_dim(tokens, nxt[:, None], i, axis=1)
        # A row that reached its own limit is done, as if it had said <eos>.
        finished = finished | (nxt == eos_id) | (i + 1 >= limit)
        return i + 1, nxt, tokens, finished, log_prob, state

    carry = (jnp.array(0, jnp.int32), last, tokens, finished, log_prob, state)
    carry = _segmented_loop(cond, body, carry, max_len, grow)
    return carry[2], carry[4] if scored else jnp.zeros((batch_size,), jnp.float32)


def hypothesis_lengths(tokens: Array, limit: Array | int, eos_id: int = EOS_ID) -> Array:
    """Tokens of each hypothesis, `<eos>` included: (..., L) -> (...,) int32 (the first
    `<eos>`'s position + 1, else `limit`, broadcast to (...,): a hypothesis cut at its
    budget)."""
    is_eos = tokens == eos_id
    first = jnp.argmax(is_eos, axis=-1).astype(jnp.int32)
    return jnp.where(jnp.any(is_eos, axis=-1), first + 1, jnp.asarray(limit, jnp.int32))


def mean_log_probs_step(step_fns: Sequence[StepFn]) -> StepFn:
    """An ensemble's step function: the mean of its members' log-probabilities each step.

    State: a tuple of the members' states. The mean of log-softmaxes is returned as the
    logits (searches normalise them again: the members' normalised geometric mean), so an
    ensemble of one model ranks exactly as the model.
    """

    def step(tokens: Array, states: tuple) -> tuple[Array, tuple]:
        outs = [fn(tokens, s) for fn, s in zip(step_fns, states, strict=True)]
        logps = [jax.nn.log_softmax(logits.astype(jnp.float32)) for logits, _ in outs]
        mean = logps[0] if len(logps) == 1 else sum(logps) / len(logps)  # (N, V)
        return mean, tuple(s for _, s in outs)

    return step


def chunked_top_k(x: Array, k: int, chunk: int = 128) -> tuple[Array, Array]:
    """`jax.lax.top_k(x, k)` over the last axis via chunk maxima: (N, M) -> (N, k) twice.

    The same values and indices as `lax.top_k`, ties included (the lower index first).
    XLA:CPU's top-k runs a partial sort per row; at beam search's (64, 4·8000) it took
    ~3–4 ms per step. Here one vectorised pass takes the maximum of each `chunk` of a
    row, `lax.top_k` picks the k best chunks, and a second `lax.top_k` runs over their
    k·chunk elements only: ~0.8 ms (benchmarks/LOG.md).

    Exact because the k best chunks, ranked by (maximum, lower chunk first), hold the k
    best elements, ranked by (value, lower index first): an element whose chunk is not
    picked is outranked by the maximum of each of k picked chunks. The picked chunks are
    put back in index order so that ties in the second top-k still go to the lower index.
    Rows must be NaN-free; falls back to `lax.top_k` when a row has fewer than 2k chunks.
    """
    n, m = x.shape
    if m < 2 * k * chunk:
        return jax.lax.top_k(x, k)
    pad = -m % chunk
    if pad:  # -inf padding ranks last: after every real element, by value or by index
        x = jnp.pad(x, ((0, 0), (0, pad)), constant_values=NEG_INF)
    blocks = x.reshape(n, -1, chunk)  # (N, C, chunk)
    _, best = jax.lax.top_k(jnp.max(blocks, axis=-1), k)  # (N, k) chunk ids
    best = jnp.sort(best, axis=-1)
    cand = jnp.take_along_axis(blocks, best[:, :, None], axis=1).reshape(n, k * chunk)
    values, pos = jax.lax.top_k(cand, k)  # (N, k)
    index = jnp.take_along_axis(best, pos // chunk, axis=1) * chunk + pos % chunk
    return values, index.astype(jnp.int32)


class BeamResult(NamedTuple):
    """n-best output of `beam_search`, best first.

    tokens: (B, W, L) int32, each hypothesis ends with `<eos>` (or is cut at L), then `<pad>`.
    scores: (B, W) float32 log P / lp(len); -inf marks an empty slot (fewer than W outputs).
    """

    tokens: Array
    scores: Array


def tile_beams(x: Array, beam_size: int) -> Array:
    """(B, ...) -> (B·W, ...), each row repeated W times (row b·W + w is beam w of b)."""
    return jnp.repeat(x, beam_size, axis=0)


def gather_rows(state: Any, rows: Array) -> Any:
    """Reorder every non-scalar leaf of `state` along axis 0: leaf[rows]. Scalars are shared.

    `rows` are in range by construction, so the gather clamps the (N,) indices instead of
    `jnp.take`'s default fill mode, which selects on every gathered element of every cache
    leaf (B·W, H, L, K) each step.
    """

    def gather(x: Array) -> Array:
        return x if jnp.ndim(x) == 0 else jnp.take(x, rows, axis=0, mode="clip")

    return jax.tree.map(gather, state)


def beam_search(
    step_fn: StepFn,
    state: Any,
    batch_size: int,
    beam_size: int,
    max_len: int,
    *,
    alpha: float | Array,
    grow: GrowFn | None = None,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    min_len: int = 1,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> BeamResult:
    """Beam search with the GNMT length penalty and n-best output.

    Each step extends the live hypotheses by every token and keeps the W most probable
    extensions (by log P). Those that end in `<eos>` move to the finished set, scored
    log P / lp(len) with len counting `<eos>`; the others stay live. At step L every kept
    extension is finished (cut at the maximum length). So with W = 1 this is exactly greedy
    search. The loop stops early once no live hypothesis can still enter the W best finished
    ones: log P only falls as a hypothesis grows, so its best reachable score is
    log P / lp(L) for α ≥ 0.

    Args:
      step_fn: (tokens (B·W,), state) -> (logits (B·W, V), state).
      state: initial state for B·W rows, beam-major within each example (see `tile_beams`).
      batch_size: B.
      beam_size: W.
      max_len: L, the most tokens generated per hypothesis (`<eos>` included).
      alpha: α ≥ 0 of the length penalty.
      grow, limit, min_len: as in `greedy_search`; limit is a scalar or (B,), one per
        sentence: its hypotheses are cut at its own limit.
      prefix: (B, P) forced first tokens per sentence, as in `greedy_search`: while forced,
        every extension but the forced token is dropped (scores count the forced tokens'
        log-probabilities).

    Returns:
      BeamResult with tokens (B, W, L) and scores (B, W), best first.
    """
    b, w, length = batch_size, beam_size, max_len
    limit = row_limits(limit, length, b)  # (B,)
    longest = jnp.max(limit)
    alpha = jnp.asarray(alpha, jnp.float32)
    # Only beam 0 is live at the start, so the first step does not pick W copies of one token.
    # (B, W), float32 also where JAX_ENABLE_X64 makes jnp.ones float64.
    live_logp = jnp.where(jnp.arange(w) == 0, 0.0, NEG_INF) * jnp.ones((b, 1), jnp.float32)
    live_seqs = jnp.full((b, w, length), pad_id, jnp.int32)  # (B, W, L)
    last = jnp.full((b, w), bos_id, jnp.int32)  # (B, W)
    fin_scores = jnp.full((b, w), NEG_INF, jnp.float32)  # (B, W)
    fin_seqs = jnp.full((b, w, length), pad_id, jnp.int32)  # (B, W, L)
    best_bound_divisor = length_penalty(limit, alpha)  # (B,)

    def cond(carry):
        i, live_logp, _, _, fin_scores, _, _ = carry
        best_reachable = jnp.max(live_logp, axis=1) / best_bound_divisor  # (B,)
        worst_finished = jnp.min(fin_scores, axis=1)  # (B,), -inf until W have finished
        return (i < longest) & jnp.any(best_reachable > worst_finished)

    def body(carry):
        i, live_logp, live_seqs, last, fin_scores, fin_seqs, state = carry
        logits, state = step_fn(last.reshape(b * w), state)  # (B·W, V)
        vocab = logits.shape[-1]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))  # (B·W, V)
        logp = ruled_out(logp, i, min_len, eos_id=eos_id, pad_id=pad_id, bos_id=bos_id)
        logp = logp.reshape(b, w, vocab)
        token, forced = forced_tokens(prefix, i, pad_id)  # (B,) twice
        if prefix is not None:
            other = jnp.arange(vocab)[None, None, :] != token[:, None, None]  # (B, 1, V)
            logp = jnp.where(forced[:, None, None] & other, NEG_INF, logp)
        cand = (live_logp[:, :, None] + logp).reshape(b, w * vocab)  # (B, W·V)
        top_logp, top_idx = chunked_top_k(cand, w)  # (B, W)
        top_beam, top_tok = top_idx // vocab, (top_idx % vocab).astype(jnp.int32)  # (B, W)
        seqs = jnp.take_along_axis(live_seqs, top_beam[:, :, None], axis=1)  # (B, W, L)
        seqs = jax.lax.dynamic_update_slice_in_dim(seqs, top_tok[:, :, None], i, axis=2)

        # Past a sentence's limit its live scores are all -inf: nothing more ends or enters.
        ends = (top_tok == eos_id) | (i == limit[:, None] - 1)  # (B, W)
        new_scores = jnp.where(ends, top_logp / length_penalty(i + 1, alpha), NEG_INF)
        all_scores = jnp.concatenate([fin_scores, new_scores], axis=1)  # (B, 2W)
        all_seqs = jnp.concatenate([fin_seqs, seqs], axis=1)  # (B, 2W, L)
        fin_scores, pick = jax.lax.top_k(all_scores, w)  # (B, W)
        fin_seqs = jnp.take_along_axis(all_seqs, pick[:, :, None], axis=1)  # (B, W, L)

        live_logp = jnp.where(ends, NEG_INF, top_logp)  # (B, W)
        rows = (jnp.arange(b)[:, None] * w + top_beam).reshape(b * w)  # (B·W,)
        state = gather_rows(state, rows)
        return i + 1, live_logp, seqs, top_tok, fin_scores, fin_seqs, state

    carry = (jnp.array(0, jnp.int32), live_logp, live_seqs, last, fin_scores, fin_seqs, state)
    carry = _segmented_loop(cond, body, carry, length, grow)
    return BeamResult(tokens=carry[5], scores=carry[4])
