"""Packed rows (data/packing.py): the plan, the arrays, the iterator, and the model's view.

The model check is the one that matters: a packed batch must give every pair the logits it
gets in a row of its own, and the train objective (loss and gradients) must equal the one of
the same pairs in one-pair rows.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax import ops
from transformer_jax.data import batching, encoding, packing
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.nn import Packing, Transformer
from transformer_jax.testing import random_params, tiny_config
from transformer_jax.training.losses import weighted_loss_sums
from transformer_jax.workdir import state_checks

# packed against one-pair rows (other shapes) at 2e-5: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

V = 60


def _encoded(n=97, max_len=12, seed=0):
    """Pair i: source tokens 100 + i, target tokens 1000 + i (to identify them), random
    lengths with <eos> in [2, max_len]."""
    rng = np.random.default_rng(seed)
    src_len = rng.integers(2, max_len + 1, n).astype(np.int32)
    tgt_len = rng.integers(2, max_len + 1, n).astype(np.int32)

    def fill(lengths, base):
        out = np.full((n, max_len), PAD_ID, np.int32)
        for i, length in enumerate(lengths):
            out[i, : length - 1] = base + i
            out[i, length - 1] = EOS_ID
        return out

    return encoding.EncodedPairs(fill(src_len, 100), src_len, fill(tgt_len, 1000), tgt_len)


def _plan(enc, rows=4, width=12, drop_remainder=False, seed=0):
    order = np.random.default_rng(seed).permutation(len(enc))
    return packing.plan_epoch(
        order,
        enc.src_len,
        enc.tgt_len,
        rows=rows,
        src_width=width,
        tgt_width=width,
        drop_remainder=drop_remainder,
    )


def test_plan_places_every_pair_once_and_no_row_overflows():
    enc = _encoded()
    plan = _plan(enc)
    placed = np.concatenate([pairs for pairs, _ in plan])
    assert sorted(placed.tolist()) == list(range(len(enc)))
    for pairs, row_of in plan:
        assert np.all(np.diff(row_of) >= 0)  # grouped by row
        for lengths in (enc.src_len, enc.tgt_len):
            assert np.bincount(row_of, lengths[pairs]).max() <= 12
    # Rows are used well: more than 3/4 of the target slots of the full batches.
    fill = packing.plan_fill(plan[:-1], enc, rows=4)
    assert fill["tgt"] > 0.75 and fill["batches"] == len(plan) - 1


def test_plan_drops_only_the_partial_tail_and_is_deterministic():
    enc = _encoded()
    kept, dropped = _plan(enc), _plan(enc, drop_remainder=True)
    # The full batches are the same; the tail (pairs left when the order ran out) is left
    # out, or kept as partly filled batches.
    assert 0 < len(dropped) < len(kept)
    for (a, ra), (b, rb) in zip(dropped, kept, strict=False):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ra, rb)
    tail = np.concatenate([pairs for pairs, _ in kept[len(dropped) :]])
    placed = np.concatenate([pairs for pairs, _ in dropped])
    assert sorted([*tail.tolist(), *placed.tolist()]) == list(range(len(enc)))
    again = _plan(enc, drop_remainder=True)
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(again, dropped, strict=True))


def test_plan_rejects_a_pair_longer_than_a_row():
    enc = _encoded(max_len=12)
    with pytest.raises(ValueError, match="more than a packed row holds"):
        _plan(enc, width=8)


def test_packed_keys_are_what_the_model_reads():
    assert packing.PACKED_KEYS == Packing._fields  # the data's keys are nn.Packing's fields
    enc = _encoded()
    pairs, row_of = _plan(enc)[0]
    kw = dict(first_row=0, num_rows=4, src_width=12, tgt_width=12)
    batch = packing.packed_batch(enc, pairs, row_of, **kw)
    assert set(batch) == {*encoding.BATCH_KEYS, *packing.PACKED_KEYS}


def test_packed_batch_lays_out_whole_pairs_with_segments_and_positions():
    enc = _encoded()
    pairs, row_of = _plan(enc)[0]
    batch = packing.packed_batch(
        enc, pairs, row_of, first_row=0, num_rows=4, src_width=12, tgt_width=12
    )
    seen = []
    for r in range(4):
        for k in range(1, batch["src_segment"][r].max() + 1):
            s = batch["src_segment"][r] == k
            t = batch["tgt_segment"][r] == k
            src, tgt_out = batch["src"][r][s], batch["tgt_out"][r][t]
            i = int(src[0]) - 100 if len(src) > 1 else int(tgt_out[0]) - 1000
            seen.append(i)
            np.testing.assert_array_equal(src, enc.src[i, : enc.src_len[i]])
            np.testing.assert_array_equal(tgt_out, enc.tgt[i, : enc.tgt_len[i]])
            np.testing.assert_array_equal(batch["tgt_in"][r][t], [BOS_ID, *tgt_out[:-1]])
            np.testing.assert_array_equal(batch["src_position"][r][s], np.arange(s.sum()))
            np.testing.assert_array_equal(batch["tgt_position"][r][t], np.arange(t.sum()))
        # Each side's pairs are contiguous from the row's start; padding after them.
        used = int((batch["src_segment"][r] > 0).sum())
        assert batch["src_len"][r] == used and np.all(batch["src"][r][used:] == PAD_ID)
        assert np.all(batch["src_segment"][r][:used] > 0)
    assert sorted(seen) == sorted(pairs.tolist())
    np.testing.assert_array_equal(batch["tgt_weight"], batch["tgt_segment"] > 0)


def test_packed_batch_rows_split_over_processes():
    enc = _encoded()
    pairs, row_of = _plan(enc)[1]
    kw = dict(src_width=12, tgt_width=12)
    whole = packing.packed_batch(enc, pairs, row_of, first_row=0, num_rows=4, **kw)
    halves = [
        packing.packed_batch(enc, pairs, row_of, first_row=r, num_rows=2, **kw) for r in (0, 2)
    ]
    for key, value in whole.items():
        np.testing.assert_array_equal(value, np.concatenate([h[key] for h in halves]), key)


def test_packed_iterator_resumes_and_sees_each_pair_once_an_epoch():
    enc = _encoded(n=203)
    kwargs = dict(global_batch=4, seed=5, packing=True, drop_remainder=False)
    it = batching.TrainIterator(enc, **kwargs)
    n = it.batches_per_epoch
    batches = [next(it) for _ in range(n + 3)]
    ids = [
        int(row[0]) - 100
        for b in batches[:n]
        for r, row in enumerate(b["src"])
        for row in np.split(row, np.flatnonzero(np.diff(b["src_segment"][r])) + 1)
        if row[0] != PAD_ID
    ]
    assert sorted(ids) == list(range(203))
    assert {b["src"].shape for b in batches} == {(4, 12)}  # one shape: one compiled step
    resumed = batching.TrainIterator(enc, **kwargs)
    it2 = batching.TrainIterator(enc, **kwargs)
    for _ in range(n - 1):
        next(it2)
    resumed.set_state(it2.get_state())
    for expected in batches[n - 1 :]:
        got = next(resumed)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    unpacked = batching.TrainIterator(enc, global_batch=4, seed=5, drop_remainder=False)
    with pytest.raises(ValueError, match="packing"):
        unpacked.set_state(it2.get_state())


def test_a_saved_position_is_its_step_though_packed_epochs_differ_in_length():
    """Packed epochs differ by a batch or so; a checkpoint's data position must still check
    out as its step after many epochs (it once counted epoch · the first epoch's length and
    moved every good checkpoint aside), for states with and without `batches_before`."""
    enc = _encoded(n=203)
    kwargs = dict(global_batch=4, seed=5, packing=True, drop_remainder=False)
    it = batching.TrainIterator(enc, **kwargs)
    lengths = [it.epoch_length(e) for e in range(6)]
    assert len(set(lengths)) > 1  # the case: not one length for every epoch
    step = sum(lengths[:5]) + 7
    for _ in range(step):
        next(it)
    state = it.get_state()
    assert (state["epoch"], state["position"], state["batches_before"]) == (5, 7, step - 7)
    fresh = batching.TrainIterator(enc, **kwargs)
    old = {k: v for k, v in state.items() if k != "batches_before"}  # saved before it existed
    for saved in (state, old):
        check = dict(step=step, epoch_length=fresh.epoch_length)
        state_checks.check_restored(*_saved(step), data_state=saved, **check)
        with pytest.raises(state_checks.CorruptCheckpointError, match="is not step"):
            state_checks.check_restored(*_saved(step), data_state={**saved, "position": 6}, **check)
    resumed = batching.TrainIterator(enc, **kwargs)
    resumed.set_state(old)  # its count of earlier batches recomputed, then carried on
    for _ in range(lengths[5] - 7 + 2):
        want = next(it)
        np.testing.assert_array_equal(next(resumed)["src"], want["src"])
    assert resumed.get_state() == it.get_state()


class _State(NamedTuple):
    step: np.ndarray
    w: np.ndarray


def _saved(step):
    """(state, abstract state, meta) of a tiny state saved at `step`, its digests in meta."""
    state = _State(np.asarray(step, np.int32), np.ones((2,), np.float32))
    return state, state, {state_checks.DIGEST_KEY: state_checks.leaf_digests(state)}


def test_packed_rows_follow_the_token_budget_and_refuse_buckets():
    enc = _encoded(n=203)
    it = batching.TrainIterator(enc, global_batch=4, packing=True, batch_tokens=100)
    assert it.packed_rows == 8 and next(it)["src"].shape == (8, 12)  # 100 // 12
    with pytest.raises(ValueError, match="bucketing=False"):
        batching.TrainIterator(enc, global_batch=4, packing=True, bucket_boundaries=(8, 12))


def test_a_position_is_refused_where_another_device_count_makes_other_batches():
    """With a token budget, rows are rounded down to a multiple of the devices: 8 rows on 1,
    2 or 4 devices, 6 on 3. A run resumed on 3 would read another plan from its position;
    on 2 the same batches (the position is taken)."""
    enc = _encoded(n=203)
    make = lambda devices: batching.TrainIterator(
        enc, global_batch=12, packing=True, batch_tokens=100, row_multiple=devices
    )
    state = make(1).get_state()
    assert state["batch_rows"] == [8] and state["shards"] == 1
    with pytest.raises(batching.DataPositionError, match=r"held 8 rows, made on 1 device \("):
        make(3).set_state(state)
    with pytest.raises(
        batching.DataPositionError, match=r"on 3 they would hold 6 .* Resume on 1 device,"
    ):
        make(3).set_state(state)
    resumed = make(2)
    resumed.set_state({**state, "position": 2})
    assert resumed.get_state()["position"] == 2
    older = {k: v for k, v in state.items() if k not in ("batch_rows", "shards")}
    resumed.set_state(older)  # saved before the rows were recorded: taken as before


def _ids_of(lengths, token, width=8):
    """Rows of `token` repeated to each length (then padding): (N, width)."""
    return np.where(np.arange(width) < np.asarray(lengths)[:, None], token, PAD_ID).astype(np.int32)


def test_fit_rows_gives_back_the_most_grown_draws_until_each_row_fits():
    best_len = np.array([2, 3, 4, 2, 2], np.int32)
    drawn_len = np.array([3, 5, 5, 3, 3], np.int32)  # grew by 1, 2, 1, 1, 1
    best = encoding.EncodedPairs(_ids_of(best_len, 5), best_len, _ids_of(best_len, 5), best_len)
    drawn = encoding.EncodedPairs(
        _ids_of(drawn_len, 7), drawn_len, _ids_of(best_len, 5), best_len.copy()
    )
    pairs, row_of = np.arange(5), np.array([0, 0, 0, 1, 1], np.int32)
    # Row 0: best 9, drawn 13, width 10 -> give back the +2 pair, then one +1 pair (the first).
    # Row 1: drawn 6 fits.
    out, given_back = packing.fit_rows(drawn, best, pairs, row_of, src_width=10, tgt_width=10)
    np.testing.assert_array_equal(out.src_len, [2, 3, 5, 3, 3])
    np.testing.assert_array_equal(out.src[:2], best.src[:2])
    np.testing.assert_array_equal(out.src[2:], drawn.src[2:])
    assert given_back == 2
    assert np.bincount(row_of, out.src_len).max() <= 10


def test_sampling_plans_rows_with_room_for_longer_draws():
    np.testing.assert_array_equal(
        packing.planned_lengths(np.array([2, 8, 10, 12], np.int32), 12, 0.125), [3, 9, 12, 12]
    )


# --- the model on packed rows ---------------------------------------------------------------


def _model_cfg(**kw):
    return tiny_config(V, V, **kw)


def _small_pairs(n=7, seed=1):
    """n pairs of random tokens in [4, V) with <eos>, lengths 2..6 / 2..7."""
    rng = np.random.default_rng(seed)
    src_len = rng.integers(2, 7, n).astype(np.int32)
    tgt_len = rng.integers(2, 8, n).astype(np.int32)

    def fill(lengths, width):
        out = np.full((n, width), PAD_ID, np.int32)
        for i, length in enumerate(lengths):
            out[i, : length - 1] = rng.integers(4, V, length - 1)
            out[i, length - 1] = EOS_ID
        return out

    return encoding.EncodedPairs(fill(src_len, 16), src_len, fill(tgt_len, 16), tgt_len)


@pytest.mark.parametrize(
    "options",
    [
        dict(norm_placement="post"),
        dict(norm_placement="pre", positional="learned", max_len=16),
        dict(norm_placement="pre", share_embeddings=True, tie_output=True),
        dict(norm_placement="pre", attention_kind="additive", remat=True),
    ],
)
def test_packed_rows_give_each_pair_its_own_logits_loss_and_gradients(options):
    cfg = _model_cfg(**options)
    enc = _small_pairs()
    n = len(enc)
    # 7 pairs in 3 rows of 16, one row partly empty.
    pairs, row_of = np.arange(n), np.array([0, 0, 0, 1, 1, 1, 2], np.int32)
    packed = packing.packed_batch(
        enc, pairs, row_of, first_row=0, num_rows=3, src_width=16, tgt_width=16
    )
    single = encoding.make_batch(enc, pairs, 16, 16)
    model = Transformer(cfg)
    params = random_params(cfg, seed=3)

    @jax.jit  # one program a batch layout (op by op, ~1,000 small ops compiled one by one)
    def logits(p, batch):
        args = (batch["src"], batch["src_len"], batch["tgt_in"], Packing.from_batch(batch))
        return model.apply({"params": p}, *args)

    got, want = np.asarray(logits(params, packed)), np.asarray(logits(params, single))
    for i, r in zip(pairs, row_of, strict=True):
        t = packed["tgt_segment"][r] == (i - np.flatnonzero(row_of == r)[0] + 1)
        np.testing.assert_allclose(got[r][t], want[i, : enc.tgt_len[i]], rtol=2e-5, atol=2e-5)

    def objective(p, batch):
        sums = weighted_loss_sums(logits(p, batch), batch["tgt_out"], batch["tgt_weight"], 0.1)
        return sums["loss"] / sums["weight"]

    (loss_p, grad_p), (loss_s, grad_s) = (
        jax.jit(jax.value_and_grad(objective))(params, b) for b in (packed, single)
    )
    np.testing.assert_allclose(loss_p, loss_s, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(grad_p), jax.tree.leaves(grad_s), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_explicit_positions_are_refused_in_decode_mode():
    cfg = _model_cfg(decode=True)
    src = jnp.full((1, 4), 5, jnp.int32)
    packing_arrays = Packing(*(jnp.ones((1, 4), jnp.int32) for _ in range(4)))
    with pytest.raises(ValueError, match="not decode mode"):
        Transformer(cfg).init(jax.random.key(0), src, jnp.array([4]), src, packing_arrays)


def test_segment_mask_matches_a_loop_over_positions():
    q = np.array([[1, 1, 2, 2, 0], [1, 2, 3, 0, 0]])
    k = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 2, 3, 3, 3]])
    want = np.array([[[q[b, t] == k[b, s] for s in range(6)] for t in range(5)] for b in range(2)])[
        :, None
    ]
    np.testing.assert_array_equal(ops.segment_mask(jnp.asarray(q), jnp.asarray(k)), want)


def test_sinusoidal_rows_of_per_sentence_positions_match_the_float64_table():
    positions = np.array([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]], np.int32)
    dim = 10
    i = np.arange(0, dim, 2) / dim
    angles = positions[..., None] / np.power(10000.0, i)  # float64 reference
    want = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(2, 6, dim)
    got = ops.sinusoidal_rows(jnp.asarray(positions), dim)
    assert got.shape == (2, 6, dim)
    np.testing.assert_allclose(got, want, atol=1e-6)
