"""Encoding, train iterator (shuffle, buckets, resume, multi-host), eval batches, padding."""

import json

import numpy as np
import pytest

from transformer_jax.data import batching, bucketing, encoding
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_jax.data.word_tokenizer import WordTokenizer


def test_encode_pairs_appends_eos_truncates_and_pads():
    tok = WordTokenizer.train(["a b c d e", "x y"], min_freq=1)
    a, b, c, d, e, x, y = (tok.token_to_id(t) for t in "abcdexy")
    enc = encoding.encode_pairs([("a b", "x y"), ("a b c d e", "zz")], tok, tok, 4, 3)
    np.testing.assert_array_equal(enc.src, [[a, b, EOS_ID, PAD_ID], [a, b, c, d]])
    np.testing.assert_array_equal(enc.src_len, [3, 4])  # like the book, <eos> may be cut off
    np.testing.assert_array_equal(enc.tgt, [[x, y, EOS_ID], [UNK_ID, EOS_ID, PAD_ID]])
    np.testing.assert_array_equal(enc.tgt_len, [3, 2])


def test_make_batch_shifts_target_right_and_weights_non_pad():
    enc = encoding.EncodedPairs(
        src=np.array([[5, 6, 2, 0], [7, 2, 0, 0]], np.int32),
        src_len=np.array([3, 2], np.int32),
        tgt=np.array([[8, 9, 2, 0], [10, 2, 0, 0]], np.int32),
        tgt_len=np.array([3, 2], np.int32),
    )
    batch = encoding.make_batch(enc, np.array([1, 0]), src_width=3, tgt_width=4)
    np.testing.assert_array_equal(batch["src"], [[7, 2, 0], [5, 6, 2]])
    np.testing.assert_array_equal(batch["src_len"], [2, 3])
    np.testing.assert_array_equal(batch["tgt_out"], [[10, 2, 0, 0], [8, 9, 2, 0]])
    np.testing.assert_array_equal(batch["tgt_in"], [[BOS_ID, 10, 2, 0], [BOS_ID, 8, 9, 2]])
    np.testing.assert_array_equal(batch["tgt_weight"], [[1, 1, 0, 0], [1, 1, 1, 0]])
    assert batch["tgt_weight"].dtype == np.float32 and batch["src"].dtype == np.int32


def _fake_encoded(n=103, max_len=12, seed=0):
    """Example i has first token 100 + i (to identify it) and a random length in [2, max_len]."""
    rng = np.random.default_rng(seed)
    src_len = rng.integers(2, max_len + 1, n).astype(np.int32)
    tgt_len = np.clip(src_len + rng.integers(-2, 3, n), 2, max_len).astype(np.int32)

    def fill(lengths):
        out = np.zeros((n, max_len), np.int32)
        for i, length in enumerate(lengths):
            out[i, : length - 1] = 100 + i
            out[i, length - 1] = EOS_ID
        return out

    return encoding.EncodedPairs(fill(src_len), src_len, fill(tgt_len), tgt_len)


def _ids(batch):
    """Example ids of a per-process batch (B_proc, S), in row order."""
    return batch["src"][:, 0] - 100


def test_unbucketed_batches_follow_the_seeded_permutation():
    enc = _fake_encoded()
    it = batching.TrainIterator(enc, global_batch=16, row_multiple=2, seed=7)
    assert it.batches_per_epoch == 103 // 16
    first_epoch = [next(it) for _ in range(6)]
    expected = np.random.default_rng([7, 0]).permutation(103)[:96].reshape(6, 16)
    for batch, want in zip(first_epoch, expected, strict=True):
        # Per-process rows, no device axis: DataParallel.put_batch splits them.
        assert batch["src"].shape == (16, 12) and batch["tgt_out"].shape == (16, 12)
        assert batch["src_len"].shape == (16,)
        np.testing.assert_array_equal(_ids(batch), want)
    # The next batch starts epoch 1, with a fresh permutation.
    np.testing.assert_array_equal(
        _ids(next(it)), np.random.default_rng([7, 1]).permutation(103)[:16]
    )
    assert it.epoch == 1


BOUNDARIES = (4, 8, 12)


def test_bucketed_batches_use_fixed_shapes_and_cover_the_epoch():
    enc = _fake_encoded(n=300)
    it = batching.TrainIterator(enc, global_batch=8, seed=0, bucket_boundaries=BOUNDARIES)
    seen = []
    for _ in range(it.batches_per_epoch):
        batch = next(it)
        width = batch["src"].shape[-1]
        assert width in BOUNDARIES and batch["tgt_out"].shape[-1] == width
        ids = _ids(batch)
        # No example is truncated by its bucket.
        assert (enc.src_len[ids] <= width).all() and (enc.tgt_len[ids] <= width).all()
        np.testing.assert_array_equal(batch["src_len"], enc.src_len[ids])
        seen.extend(ids.tolist())
    assert len(seen) == len(set(seen))  # each example at most once per epoch
    assert 300 - len(seen) < 8  # only the last partial global batch is dropped
    assert it.epoch == 0


def test_bucketing_cuts_padding():
    enc = _fake_encoded(n=400)

    def fraction(boundaries):
        it = batching.TrainIterator(enc, global_batch=8, bucket_boundaries=boundaries)
        return bucketing.padding_fraction(it.epoch_batches(0))

    without, with_buckets = fraction(None), fraction(BOUNDARIES)
    # Independent estimate of the unbucketed padding: lengths vs 12 per side.
    expected_without = 1 - (enc.src_len.sum() + enc.tgt_len.sum()) / (2 * 12 * 400)
    assert without == pytest.approx(expected_without, abs=0.02)  # 400 - 400 // 8 * 8 = 0 dropped
    assert with_buckets < without - 0.15


def test_padding_fraction_by_hand():
    batch = {
        "src": np.zeros((2, 4)),
        "src_len": np.array([4, 1]),
        "tgt_out": np.zeros((2, 3)),
        "tgt_weight": np.array([[1, 1, 1], [1, 0, 0]], np.float32),
    }
    # real tokens 5 + 4 = 9 of 8 + 6 = 14
    assert bucketing.padding_fraction([batch]) == pytest.approx(5 / 14)


@pytest.mark.parametrize("boundaries", [None, BOUNDARIES])
def test_resumed_iterator_sees_exactly_the_uninterrupted_batches(boundaries):
    enc = _fake_encoded()
    kwargs = dict(global_batch=8, row_multiple=2, seed=3, bucket_boundaries=boundaries)
    uninterrupted = batching.TrainIterator(enc, **kwargs)
    reference = [next(uninterrupted) for _ in range(40)]  # crosses epoch boundaries (12/epoch)

    it = batching.TrainIterator(enc, **kwargs)
    for _ in range(17):
        next(it)
    state = json.loads(json.dumps(it.get_state()))  # what a checkpoint would store
    assert state["epoch"] == 1 and state["position"] == 17 - it.batches_per_epoch
    resumed = batching.TrainIterator(enc, **kwargs)
    resumed.set_state(state)
    for want in reference[17:]:
        got = next(resumed)
        for key in encoding.BATCH_KEYS:
            np.testing.assert_array_equal(got[key], want[key])


def test_set_state_refuses_a_different_setup():
    enc = _fake_encoded()
    state = batching.TrainIterator(enc, global_batch=8, seed=3).get_state()
    other = batching.TrainIterator(enc, global_batch=8, seed=4)
    with pytest.raises(ValueError, match=r"seed=3 but this pipeline has seed=4"):
        other.set_state(state)


@pytest.mark.parametrize("boundaries", [None, BOUNDARIES])
def test_two_processes_one_device_equal_one_process_two_devices(boundaries):
    """Each process takes its contiguous half of the global batch: together, row for row, the
    batch of one process with two devices."""
    enc = _fake_encoded()
    one = batching.TrainIterator(
        enc, global_batch=8, row_multiple=2, seed=1, bucket_boundaries=boundaries
    )
    procs = [
        batching.TrainIterator(
            enc,
            global_batch=8,
            process_index=p,
            process_count=2,
            seed=1,
            bucket_boundaries=boundaries,
        )
        for p in range(2)
    ]
    for _ in range(30):
        whole = next(one)
        parts = [next(p) for p in procs]
        for key in encoding.BATCH_KEYS:
            assert parts[0][key].shape[0] == whole[key].shape[0] // 2 == 4
            np.testing.assert_array_equal(np.concatenate([q[key] for q in parts]), whole[key])
        # Disjoint shards.
        assert not set(_ids(parts[0])) & set(_ids(parts[1]))


def test_layout_errors_name_the_fix():
    enc = _fake_encoded()
    with pytest.raises(ValueError, match=r"global batch 10 .* 1 \* 4; change data.batch_size"):
        batching.TrainIterator(enc, global_batch=10, row_multiple=4)
    with pytest.raises(ValueError, match=r"global batch 10 .* 4 \* 1; change data.batch_size"):
        batching.TrainIterator(enc, global_batch=10, process_count=4)
    with pytest.raises(ValueError, match=r"103 examples, fewer than one global batch \(128\)"):
        batching.TrainIterator(enc, global_batch=128)


@pytest.mark.parametrize(("process_count", "row_multiple"), [(1, 1), (1, 2), (2, 2)])
def test_eval_batches_count_every_example_once(process_count, row_multiple):
    enc = _fake_encoded(n=21)
    per_process = [
        list(
            batching.eval_batches(
                enc,
                global_batch=8,
                row_multiple=row_multiple,
                process_index=p,
                process_count=process_count,
            )
        )
        for p in range(process_count)
    ]
    indices, weight_total = [], 0.0
    for batches in per_process:
        assert len(batches) == 3  # ceil(21 / 8), on every process
        for batch in batches:
            assert batch["src"].shape == (8 // process_count, 12)
            assert batch["index"].shape == (8 // process_count,)
            real = batch["index"] >= 0
            ids = batch["index"][real]
            np.testing.assert_array_equal(batch["src"][real][:, 0] - 100, ids)
            assert (batch["tgt_weight"][~real] == 0).all()
            assert (batch["src_len"][~real] == 1).all()
            assert (batch["tgt_in"][~real][:, 0] == BOS_ID).all()
            indices.extend(ids.tolist())
            weight_total += batch["tgt_weight"].sum()
    assert sorted(indices) == list(range(21))
    assert weight_total == enc.tgt_len.sum()


def test_resolve_boundaries():
    assert bucketing.resolve_boundaries((), 8, 32, 20) == (8, 16, 24, 32)
    assert bucketing.resolve_boundaries((), 8, 10, 10) == (8, 10)
    assert bucketing.resolve_boundaries((5, 10, 40), 8, 32, 32) == (5, 10, 32)


LAYOUTS = [(1, 1), (1, 2), (2, 2)]  # (process_count, row_multiple = devices per process)


@pytest.mark.parametrize("boundaries", [None, BOUNDARIES])
@pytest.mark.parametrize(("process_count", "row_multiple"), LAYOUTS)
def test_kept_remainder_sees_every_example_once_with_zero_weight_dummies(
    boundaries, process_count, row_multiple
):
    enc = _fake_encoded(n=103)
    procs = [
        batching.TrainIterator(
            enc,
            global_batch=16,
            row_multiple=row_multiple,
            process_index=p,
            process_count=process_count,
            seed=5,
            bucket_boundaries=boundaries,
            drop_remainder=False,
        )
        for p in range(process_count)
    ]
    assert all(it.batches_per_epoch == 7 for it in procs)  # ceil(103 / 16), not 103 // 16 = 6
    seen, real_rows, shapes = [], [], set()
    for _ in range(7):
        # The global batch: the processes' contiguous slices, in process order.
        parts = [next(it) for it in procs]
        batch = {k: np.concatenate([q[k] for q in parts]).reshape(16, -1) for k in parts[0]}
        shapes.add(parts[0]["src"].shape[:1])
        real = batch["tgt_weight"].sum(-1) > 0
        ids = batch["src"][real, 0] - 100
        np.testing.assert_array_equal(batch["src_len"][real].ravel(), enc.src_len[ids])
        assert batch["tgt_weight"][real].sum() == enc.tgt_len[ids].sum()
        # Dummies: zero weight, src = <eos> (length 1), tgt_in = <bos>, nothing else.
        assert (batch["src"][~real, 0] == EOS_ID).all() and (batch["src"][~real, 1:] == 0).all()
        assert (batch["src_len"][~real] == 1).all()
        assert (batch["tgt_in"][~real, 0] == BOS_ID).all() and (
            batch["tgt_in"][~real, 1:] == 0
        ).all()
        assert (batch["tgt_out"][~real] == 0).all() and (batch["tgt_weight"][~real] == 0).all()
        seen.extend(ids.tolist())
        real_rows.append(int(real.sum()))
    assert sorted(seen) == list(range(103))  # every example exactly once in the epoch
    assert sorted(real_rows) == [7] + [16] * 6  # one partial batch: 103 - 6 * 16 real rows
    if boundaries is None:
        assert real_rows[-1] == 7  # without buckets it is the last one, as in a DataLoader
        assert seen[:96] == np.random.default_rng([5, 0]).permutation(103)[:96].tolist()
    assert shapes == {(16 // process_count,)}
    assert all(it.epoch == 0 for it in procs)
    next(procs[0])
    assert procs[0].epoch == 1


def test_kept_remainder_of_a_split_smaller_than_one_batch():
    enc = _fake_encoded(n=5)
    it = batching.TrainIterator(enc, global_batch=8, row_multiple=2, drop_remainder=False)
    assert it.batches_per_epoch == 1
    batch = next(it)
    assert batch["src"].shape == (8, 12)
    assert sorted(_ids(batch)[batch["tgt_weight"].sum(-1) > 0]) == list(range(5))
    with pytest.raises(ValueError, match=r"drop_remainder=False"):
        batching.TrainIterator(enc, global_batch=8, row_multiple=2)


@pytest.mark.parametrize("boundaries", [None, BOUNDARIES])
def test_resume_with_a_kept_remainder(boundaries):
    enc = _fake_encoded()
    kwargs = dict(
        global_batch=8, row_multiple=2, seed=3, bucket_boundaries=boundaries, drop_remainder=False
    )
    reference = batching.TrainIterator(enc, **kwargs)
    want = [next(reference) for _ in range(40)]  # 13 batches an epoch: crosses two boundaries
    it = batching.TrainIterator(enc, **kwargs)
    assert it.batches_per_epoch == 13
    for _ in range(26):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert (state["epoch"], state["position"], state["drop_remainder"]) == (1, 13, False)
    resumed = batching.TrainIterator(enc, **kwargs)
    resumed.set_state(state)
    for expected in want[26:]:
        got = next(resumed)
        for key in encoding.BATCH_KEYS:
            np.testing.assert_array_equal(got[key], expected[key])


def test_set_state_checks_drop_remainder_and_reads_older_states():
    enc = _fake_encoded()
    dropping = batching.TrainIterator(enc, global_batch=8)
    keeping = batching.TrainIterator(enc, global_batch=8, drop_remainder=False)
    with pytest.raises(ValueError, match=r"drop_remainder=True but this pipeline has .*False"):
        keeping.set_state(dropping.get_state())
    old = {k: v for k, v in dropping.get_state().items() if k != "drop_remainder"}
    old["position"] = 3
    dropping.set_state(old)  # saved before the option existed: it always dropped
    assert dropping.get_state()["position"] == 3
    with pytest.raises(ValueError, match=r"drop_remainder"):
        keeping.set_state(old)


def test_token_batches_fill_a_token_budget_per_bucket_and_cover_the_epoch():
    """batch_tokens: rows = budget // width (a multiple of processes · row_multiple), every
    example at most once an epoch, only the last bucket's leftovers (< its rows) dropped."""
    enc = _fake_encoded(n=400)
    it = batching.TrainIterator(
        enc, global_batch=8, row_multiple=2, seed=3, bucket_boundaries=BOUNDARIES, batch_tokens=48
    )
    assert [it.bucket_rows(b) for b in range(3)] == [12, 6, 4]  # 48 // 4, 48 // 8, 48 // 12
    seen = []
    for _ in range(it.batches_per_epoch):
        batch = next(it)
        width = batch["src"].shape[-1]
        rows = batch["src"].shape[0]
        assert rows % 2 == 0 and rows == 48 // width
        ids = _ids(batch)
        assert (enc.src_len[ids] <= width).all() and (enc.tgt_len[ids] <= width).all()
        seen.extend(ids.tolist())
    assert len(seen) == len(set(seen))
    assert 400 - len(seen) < 4  # the widest bucket's rows
    assert it.epoch == 0
    # Resuming mid-epoch continues with the same batches; a different budget is refused.
    state_it = batching.TrainIterator(
        enc, global_batch=8, row_multiple=2, seed=3, bucket_boundaries=BOUNDARIES, batch_tokens=48
    )
    for _ in range(5):
        next(state_it)
    resumed = batching.TrainIterator(
        enc, global_batch=8, row_multiple=2, seed=3, bucket_boundaries=BOUNDARIES, batch_tokens=48
    )
    resumed.set_state(state_it.get_state())
    np.testing.assert_array_equal(next(resumed)["src"], next(state_it)["src"])
    other = batching.TrainIterator(
        enc, global_batch=8, row_multiple=2, seed=3, bucket_boundaries=BOUNDARIES, batch_tokens=96
    )
    with pytest.raises(ValueError, match="batch_tokens"):
        other.set_state(state_it.get_state())


def test_token_batches_split_over_processes_like_over_devices():
    enc = _fake_encoded(n=200)
    kw = dict(global_batch=8, seed=5, bucket_boundaries=BOUNDARIES, batch_tokens=48)
    one = batching.TrainIterator(enc, row_multiple=2, **kw)
    procs = [batching.TrainIterator(enc, process_index=p, process_count=2, **kw) for p in range(2)]
    for _ in range(one.batches_per_epoch):
        whole, parts = next(one), [next(p) for p in procs]
        for key in encoding.BATCH_KEYS:
            np.testing.assert_array_equal(np.concatenate([q[key] for q in parts]), whole[key])


def test_token_batches_need_buckets():
    with pytest.raises(ValueError, match="needs length buckets"):
        batching.TrainIterator(_fake_encoded(), global_batch=8, batch_tokens=64)


def test_token_batches_keep_rows_a_multiple_of_row_multiple():
    """So DataParallel.put_batch can split every batch evenly over 4 local devices."""
    enc = _fake_encoded(n=200)
    it = batching.TrainIterator(
        enc, global_batch=8, row_multiple=4, bucket_boundaries=BOUNDARIES, batch_tokens=48
    )
    assert [it.bucket_rows(b) for b in range(3)] == [12, 4, 4]  # 48 // 8 = 6 rounds down to 4
    assert all(batch["src"].shape[0] % 4 == 0 for batch in it.epoch_batches(0))
