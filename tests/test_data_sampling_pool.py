"""Subword draws made ahead by worker processes (data/sampling_pool.py): the same batches as
drawn inline, with any number of workers, across epochs, resumption and a worker's death."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tests.helpers import subprocess_env
from transformer_jax.data import batching, config, encoding, sampling_pool
from transformer_jax.data.sampling import SubwordSampling
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer

SYLLABLES = "ka to ri mu se la no pi ve du".split()


def _sentences(n, seed):
    rng = np.random.default_rng(seed)
    word = lambda: "".join(rng.choice(SYLLABLES, rng.integers(1, 4)))  # noqa: E731
    return [" ".join(word() for _ in range(rng.integers(2, 9))) + " ." for _ in range(n)]


@pytest.fixture(scope="module")
def data():
    src_tok = SentencePieceTokenizer.train(_sentences(300, 0), vocab_size=60)
    tgt_tok = SentencePieceTokenizer.train(_sentences(300, 1), vocab_size=50)  # its own model
    pairs = list(zip(_sentences(120, 2), _sentences(120, 3), strict=True))
    tokenized = encoding.tokenize_pairs(pairs, src_tok, tgt_tok)
    return pairs, tokenized, encoding.pad_pairs(tokenized, 32, 32), src_tok, tgt_tok


def _iterator(data, workers, packing):
    pairs, tokenized, encoded, src_tok, tgt_tok = data
    sampling = SubwordSampling.for_pairs(
        pairs, tokenized, src_tok, tgt_tok, alpha=0.1, workers=workers
    )
    layout = dict(packing=True) if packing else dict(bucket_boundaries=(8, 16, 32))
    return batching.TrainIterator(encoded, global_batch=8, seed=3, sampling=sampling, **layout)


def _same(a, b):
    for key in encoding.BATCH_KEYS:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("packing", [False, True])
def test_workers_draw_the_batches_drawn_inline_across_epochs_and_a_resume(data, packing):
    inline, pooled = _iterator(data, 0, packing), _iterator(data, 2, packing)
    try:
        steps = 2 * inline.batches_per_epoch + 3  # into a third epoch
        for _ in range(steps):
            _same(next(inline), next(pooled))
        assert pooled._sampling._pool is not None  # the pool did the drawing
        assert (pooled._sampling.sides_total, pooled._sampling.sides_sampled) == (
            inline._sampling.sides_total,
            inline._sampling.sides_sampled,
        )
        # A report's look at another epoch neither takes nor spoils the pool's draws.
        for a, b in zip(inline.epoch_batches(5), pooled.epoch_batches(5), strict=True):
            _same(a, b)
        # Resumed at an earlier position, with draws made ahead for later ones pending.
        state = json.loads(json.dumps(inline.get_state()))
        want = [next(inline) for _ in range(5)]
        pooled.set_state(state)
        for batch in want:
            _same(batch, next(pooled))
    finally:
        pooled.close()


def test_a_dead_worker_leaves_the_draws_to_the_training_process(data, caplog):
    inline, pooled = _iterator(data, 0, False), _iterator(data, 1, False)
    try:
        _same(next(inline), next(pooled))  # starts the worker and has it draw ahead
        for process in pooled._sampling._pool._executor._processes.values():
            process.kill()
        for _ in range(inline.batches_per_epoch + 2):
            _same(next(inline), next(pooled))
        assert pooled._sampling.workers == 0 and pooled._sampling._pool is None
        assert "drawing in the training process" in caplog.text
    finally:
        pooled.close()


def test_workers_that_cannot_start_leave_the_draws_to_the_training_process(
    data, caplog, monkeypatch
):
    # A container without a usable /dev/shm: multiprocessing's locks are POSIX semaphores.
    import multiprocessing

    def no_semaphores(*args, **kwargs):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(type(multiprocessing.get_context("spawn")), "Lock", no_semaphores)
    inline, pooled = _iterator(data, 0, False), _iterator(data, 2, False)
    try:
        for _ in range(inline.batches_per_epoch + 2):
            _same(next(inline), next(pooled))
        assert pooled._sampling.workers == 0 and pooled._sampling._pool is None
        assert "workers cannot start (OSError: [Errno 38] Function not implemented)" in (
            caplog.text
        )
    finally:
        pooled.close()


def test_auto_workers_are_none_on_a_cpu_and_a_few_on_an_accelerator():
    assert sampling_pool.resolve_workers(-1, "cpu", cpu_count=64) == 0
    assert sampling_pool.resolve_workers(-1, "gpu", cpu_count=16) == 4
    assert sampling_pool.resolve_workers(-1, "tpu", cpu_count=3) == 2  # a core for training
    assert sampling_pool.resolve_workers(-1, "gpu", cpu_count=1) == 0
    assert sampling_pool.resolve_workers(3, "cpu", cpu_count=2) == 3  # asked for: given


def test_auto_workers_count_the_cores_this_process_may_use(monkeypatch):
    """`taskset -c 0` on a 16-core GPU host: one core, so no worker (os.cpu_count() said
    16, and 4 workers shared the training process's core)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert sampling_pool.resolve_workers(-1, "gpu") == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert sampling_pool.resolve_workers(-1, "gpu") == 4


@pytest.mark.parametrize("value", [-2, -8])  # the config's type check refuses a non-int
def test_a_bad_worker_count_is_refused_with_the_fix(value):
    cfg = config.data_config()
    cfg.sp_sampling_alpha = 0.1
    cfg.sampling_workers = value
    with pytest.raises(ValueError, match="data.sampling_workers=.*-1 for auto"):
        config.validate_data_config(cfg)


_POOL_THEN_SLEEP = textwrap.dedent("""
    import time
    from transformer_jax.data.sampling_pool import DrawPool
    from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer

    if __name__ == "__main__":
        text = ["ka to ri mu se la no pi ve du ."] * 50 + ["la no pi ka ."] * 50
        tok = SentencePieceTokenizer.train(text, vocab_size=22)
        pool = DrawPool([tok.model_proto, tok.model_proto], 1)
        pool.submit(0, ["ka to ."], alpha=0.1, nbest=-1, seed=1).result()
        print(*pool._executor._processes, flush=True)
        time.sleep(120)
""")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_workers_leave_when_the_training_process_is_killed(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(_POOL_THEN_SLEEP)
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=subprocess_env()
    )
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert workers and all(_alive(pid) for pid in workers)
    finally:
        parent.send_signal(signal.SIGKILL)  # no clean-up runs in the parent
        parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers), "a worker outlived the killed parent"
