"""Greedy and beam search on toy step functions where every sequence can be enumerated."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.decoding import beam_search, cache_lengths, greedy_search, length_penalty

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4
V = 5
WORDS = (A, B)


def prefix_code(prefix) -> int:
    """Base-V code of (<bos>,) + prefix: a unique row of the toy table per prefix."""
    code = 0
    for t in (BOS, *prefix):
        code = code * V + t
    return code


def random_table(seed: int, max_len: int) -> np.ndarray:
    """Log-probabilities (codes, V) of the next token given the whole prefix; only A, B, EOS."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(V ** (max_len + 1), V)) * 2.0
    logits[:, [PAD, BOS]] = -np.inf
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def table_from(probs: dict, max_len: int) -> np.ndarray:
    """A table whose rows for the given prefixes hold the given {token: p}; others uniform."""
    table = np.full((V ** (max_len + 1), V), -np.inf)
    table[:, list(WORDS) + [EOS]] = np.log(1 / 3)
    for prefix, dist in probs.items():
        row = np.full(V, -np.inf)
        for tok, p in dist.items():
            row[tok] = np.log(p)
        table[prefix_code(prefix)] = row
    return table


def table_step(table: np.ndarray):
    """Step function whose logits depend on the row's entire prefix, via its code.

    State: per-row codes (N,) — so a wrong beam reordering gives wrong logits — and a scalar
    step counter (a shared leaf that must not be gathered).
    """
    table = jnp.asarray(table, jnp.float32)

    def step(tokens, state):
        codes, count = state
        codes = codes * V + tokens  # (N,)
        return table[codes], (codes, count + 1)

    return step


def init_state(rows: int):
    return jnp.zeros((rows,), jnp.int32), jnp.array(0, jnp.int32)


def brute_force(table: np.ndarray, max_len: int, alpha: float, min_len: int = 1):
    """All hypotheses (ending in <eos>, or cut at max_len) with log P / lp(len), best first;
    <eos> only after min_len words (the searches' default 1: never a lone <eos>)."""
    out = []
    for n in range(min_len, max_len + 1):
        for words in itertools.product(WORDS, repeat=n):
            seq = words if n == max_len else (*words, EOS)
            logp = sum(table[prefix_code(seq[:i]), seq[i]] for i in range(len(seq)))
            out.append((logp / ((5 + len(seq)) / 6) ** alpha, seq))
    return sorted(out, key=lambda x: -x[0])


def run_beam(table, max_len, beam, alpha, batch=1, min_len=1):
    step = table_step(table)
    fn = jax.jit(
        lambda: beam_search(
            step, init_state(batch * beam), batch, beam, max_len, alpha=alpha, min_len=min_len
        )
    )
    out = fn()
    return np.asarray(out.tokens), np.asarray(out.scores)


def test_length_penalty_formula():
    for length, alpha in [(1, 0.6), (7, 0.6), (12, 1.0), (3, 0.0)]:
        want = ((5 + length) / 6) ** alpha
        assert float(length_penalty(length, alpha)) == pytest.approx(want, rel=1e-6)
    assert float(length_penalty(1, 0.6)) == pytest.approx(1.0)


@pytest.mark.parametrize("min_len", [0, 1])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_wide_beam_equals_brute_force_n_best(alpha, min_len):
    """With W at least the number of live candidates, beam search is exhaustive: its n-best
    list must be exactly the enumerated ranking (tokens and scores, best first)."""
    max_len = 3
    table = random_table(seed=1, max_len=max_len)
    ranked = brute_force(table, max_len, alpha, min_len)  # (1 +) 2 + 4 + 8 hypotheses
    assert len(ranked) == 15 - min_len
    tokens, scores = run_beam(table, max_len, beam=16, alpha=alpha, min_len=min_len)
    for w, (score, seq) in enumerate(ranked):
        got = tokens[0, w]
        assert list(got[: len(seq)]) == list(seq), (w, got, seq)
        assert np.all(got[len(seq) :] == PAD)
        assert scores[0, w] == pytest.approx(score, rel=1e-5)
    assert np.all(scores[0, len(ranked) :] == -np.inf)  # no more hypotheses: empty slots
    assert np.all(np.diff(scores[0, : len(ranked)]) <= 0)  # n-best ordering


def test_beam_finds_the_best_sequence_greedy_misses():
    """Greedy takes A (0.5) and ends with A A (P = 0.2); the best is B <eos> (P = 0.36)."""
    max_len = 2
    table = table_from(
        {
            (): {A: 0.5, B: 0.4, EOS: 0.1},
            (A,): {A: 0.4, B: 0.3, EOS: 0.3},
            (B,): {EOS: 0.9, A: 0.05, B: 0.05},
        },
        max_len,
    )
    greedy = jax.jit(lambda: greedy_search(table_step(table), init_state(1), 1, max_len))()
    assert list(np.asarray(greedy)[0]) == [A, A]
    tokens, scores = run_beam(table, max_len, beam=2, alpha=0.0)
    assert list(tokens[0, 0]) == [B, EOS]
    assert scores[0, 0] == pytest.approx(math.log(0.36), rel=1e-5)
    assert list(tokens[0, 1]) == [A, A]
    assert scores[0, 1] == pytest.approx(math.log(0.2), rel=1e-5)
    assert brute_force(table, max_len, 0.0)[0][1] == (B, EOS)


def test_length_penalty_changes_the_winner():
    """A short hypothesis wins at α = 0; the longer one wins once length is rewarded."""
    max_len = 3
    table = table_from(
        {
            (): {EOS: 0.3, A: 0.7},
            (A,): {B: 1.0 - 1e-6, EOS: 0.5e-6, A: 0.5e-6},
            (A, B): {EOS: 0.4, A: 0.3, B: 0.3},
        },
        max_len,
    )
    # log P: <eos> = log 0.3 = -1.20 (len 1); A B <eos> = log 0.28 = -1.27 (len 3).
    short, _ = run_beam(table, max_len, beam=4, alpha=0.0, min_len=0)
    assert list(short[0, 0][:1]) == [EOS]
    long, _ = run_beam(table, max_len, beam=4, alpha=1.0, min_len=0)
    assert list(long[0, 0]) == [A, B, EOS]


def test_greedy_stops_at_eos_and_pads_after():
    max_len = 4
    table = random_table(seed=3, max_len=max_len)
    out = np.asarray(
        jax.jit(lambda: greedy_search(table_step(table), init_state(1), 1, max_len))()
    )[0]
    # Reference: follow the arg-max by hand.
    seq = []
    while len(seq) < max_len:
        seq.append(int(np.argmax(table[prefix_code(seq)])))
        if seq[-1] == EOS:
            break
    assert list(out[: len(seq)]) == seq
    assert np.all(out[len(seq) :] == PAD)


def test_eos_rows_stop_while_others_continue_in_a_batch():
    """Row 0 ends at once (min_len 0 allows it); row 1 never emits <eos> and runs to
    max_len."""
    max_len = 5

    def step(tokens, state):
        row = jnp.arange(tokens.shape[0])
        logits = jnp.where(row[:, None] == 0, jax.nn.one_hot(EOS, V), jax.nn.one_hot(A, V))
        return logits * 10.0, state

    out = np.asarray(greedy_search(step, (), 2, max_len, min_len=0))
    assert list(out[0]) == [EOS, PAD, PAD, PAD, PAD]
    assert list(out[1]) == [A] * max_len
    result = beam_search(step, (), 2, 1, max_len, alpha=0.6, min_len=0)
    np.testing.assert_array_equal(np.asarray(result.tokens)[:, 0], out)


def test_beam_batch_rows_are_independent():
    """Decoding two examples in one batch equals decoding each alone (beam reorder per row)."""
    max_len = 3
    table = random_table(seed=5, max_len=max_len)
    solo, solo_scores = run_beam(table, max_len, beam=3, alpha=0.6, batch=1)
    both, both_scores = run_beam(table, max_len, beam=3, alpha=0.6, batch=2)
    for b in range(2):
        np.testing.assert_array_equal(both[b], solo[0])
        np.testing.assert_allclose(both_scores[b], solo_scores[0], rtol=1e-6)


def test_first_argmax_equals_jnp_argmax_including_ties():
    from transformer_jax.decoding.search import first_argmax

    rng = np.random.default_rng(7)
    logits = rng.normal(size=(50, 37)).astype(np.float32)
    logits[3, [4, 9, 30]] = 10.0  # a three-way tie: the first index wins, as in argmax
    logits[5] = 0.0  # an all-equal row
    logits = jnp.asarray(logits)
    got = first_argmax(logits)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, jnp.argmax(logits, axis=-1))
    assert int(got[3]) == 4 and int(got[5]) == 0


@pytest.mark.parametrize("m, k, chunk", [(32000, 4, 128), (5000, 4, 128), (300, 3, 8), (97, 5, 4)])
def test_chunked_top_k_equals_lax_top_k_including_ties_and_inf(m, k, chunk):
    from transformer_jax.decoding.search import chunked_top_k

    rng = np.random.default_rng(m)
    x = rng.normal(size=(8, m)).astype(np.float32)
    x[1] = rng.integers(0, 3, size=m)  # heavy ties: the lowest indices must win
    x[2] = -np.inf  # a dead row: -inf ties everywhere
    x[3, :] = -np.inf
    x[3, m - 2 :] = [1.0, 1.0]  # fewer finite values than k, at the very end
    x[4, : m // 2] = -np.inf
    x[5] = 0.5  # all equal
    x[6, [m - 1, 0, m // 2]] = 9.0  # a tie across chunks at the top
    want_values, want_index = jax.lax.top_k(jnp.asarray(x), k)
    values, index = jax.jit(chunked_top_k, static_argnums=(1, 2))(jnp.asarray(x), k, chunk)
    assert index.dtype == jnp.int32
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(index, want_index)


def test_beam_search_with_chunked_top_k_equals_plain_top_k(monkeypatch):
    """A vocabulary large enough for the chunked path: the same n-best lists either way."""
    from transformer_jax.decoding import search

    vocab, rows, beam, batch, max_len = 600, 211, 4, 3, 6
    table = jax.random.normal(jax.random.key(0), (rows, vocab)) * 3.0

    def step(tokens, state):
        codes, count = state
        codes = (codes * 31 + tokens) % rows  # (N,) depends on the whole prefix
        return table[codes], (codes, count + 1)

    def run():
        state = (jnp.arange(batch * beam, dtype=jnp.int32) // beam, jnp.array(0, jnp.int32))
        return jax.jit(lambda: search.beam_search(step, state, batch, beam, max_len, alpha=0.6))()

    assert beam * vocab >= 2 * beam * 128  # the chunked path, not its fallback
    chunked = run()
    monkeypatch.setattr(search, "chunked_top_k", lambda x, k: jax.lax.top_k(x, k))
    plain = run()
    np.testing.assert_array_equal(chunked.tokens, plain.tokens)
    np.testing.assert_array_equal(chunked.scores, plain.scores)
    assert np.isfinite(np.asarray(chunked.scores)).all()


def test_cache_lengths_double_from_32_and_end_at_max_len():
    assert cache_lengths(5) == (5,)
    assert cache_lengths(32) == (32,)
    assert cache_lengths(40) == (32, 40)
    assert cache_lengths(41) == (32, 41)
    assert cache_lengths(72) == (32, 72)  # 32, 64 then 72 would compile a body for 8 steps
    assert cache_lengths(138) == (32, 64, 138)
    assert cache_lengths(10, first=8) == (8, 10)
    assert cache_lengths(9, first=8) == (9,)  # 8 then 9 would compile a loop body for one step
    assert cache_lengths(40, first=8) == (8, 16, 32, 40)
    for max_len in range(1, 600):
        rooms = cache_lengths(max_len)
        assert rooms[-1] == max_len and list(rooms) == sorted(set(rooms))
        # Room stays within 2.5x the positions written before the segment (40 at first).
        for before, room in itertools.pairwise((0, *rooms)):
            assert room <= max(40, 2.5 * before), (max_len, rooms)
    with pytest.raises(ValueError, match="max_len"):
        cache_lengths(0)
