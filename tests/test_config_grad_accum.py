"""grad_accum_steps is checked against the rows every training batch gives a device.

With `data.batch_tokens` the rows of a batch come from the token budget (packed rows, or
each length bucket's width), not from `data.batch_size`: the check and the train iterator
share `data.config.train_batch_rows`, and the iterator's real batches have those rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from configs import fra_eng
from transformer_jax.data import batching, encoding
from transformer_jax.data.config import data_config, train_batch_rows
from transformer_jax.training.config import validate_config

MAX_LEN = 12


def _encoded(n: int = 400, seed: int = 0) -> encoding.EncodedPairs:
    rng = np.random.default_rng(seed)
    src_len = rng.integers(2, MAX_LEN + 1, n).astype(np.int32)
    tgt_len = rng.integers(2, MAX_LEN + 1, n).astype(np.int32)

    def fill(lengths):
        out = np.zeros((n, MAX_LEN), np.int32)
        for i, length in enumerate(lengths):
            out[i, :length] = 5 + np.arange(length)
        return out

    return encoding.EncodedPairs(fill(src_len), src_len, fill(tgt_len), tgt_len)


@pytest.mark.parametrize(
    "setup",
    [
        dict(batch_tokens=0, packing=False, bucketing=False),
        dict(batch_tokens=100, packing=True, bucketing=False),
        dict(batch_tokens=100, packing=False, bucketing=True, bucket_boundaries=(4, 8)),
    ],
)
def test_the_rows_named_are_the_rows_the_iterator_makes(setup):
    cfg = data_config()
    cfg.update(dict(batch_size=8, max_src_len=MAX_LEN, max_tgt_len=MAX_LEN, **setup))
    named = sorted(set(train_batch_rows(cfg, shards=2).values()))
    boundaries = (4, 8, MAX_LEN) if setup["bucketing"] else None
    iterator = batching.TrainIterator(
        _encoded(),
        global_batch=8,
        row_multiple=2,
        bucket_boundaries=boundaries,
        batch_tokens=setup["batch_tokens"],
        packing=setup["packing"],
    )
    made = sorted({next(iterator)["src"].shape[0] for _ in range(60)})
    assert made == named, (made, named)


def test_packed_rows_not_batch_size_decide_what_divides():
    config = fra_eng.get_config()  # packed rows: 2,048 tokens of 64 = 32 rows
    config.grad_accum_steps = 64  # divides data.batch_size=128: the old check passed it
    with pytest.raises(ValueError, match=r"packed rows of 64 tokens: 32\); choose one of \[1, 2"):
        validate_config(config)
    config.data.batch_tokens = 48 * 64  # 48 rows: 3 divides them, not data.batch_size=128
    config.grad_accum_steps = 3
    validate_config(config)


def test_length_buckets_name_each_width_and_packing_as_the_way_out():
    config = fra_eng.get_config("variant=small")
    config.data.batch_tokens, config.grad_accum_steps = 4096, 2
    with pytest.raises(ValueError, match="bucket of 24 tokens: 85") as caught:
        validate_config(config, num_devices=2)
    assert "choose one of [1]; data.packing=True makes one row count." in str(caught.value)
