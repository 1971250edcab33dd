"""Length statistics of a split, and the evenly spaced fixed subsets used for evaluation."""

import numpy as np
import pytest

from transformer_jax.data import lengths, spread_subset


def test_length_stats_percentiles_and_coverage_match_numpy():
    rng = np.random.default_rng(0)
    src = rng.integers(2, 60, 5000)
    tgt = rng.integers(2, 80, 5000)
    stats = lengths.length_stats(src, tgt, 50, 70)
    assert stats.src_percentiles[99.9] == pytest.approx(np.percentile(src, 99.9))
    assert stats.tgt_percentiles[50] == pytest.approx(np.percentile(tgt, 50))
    assert stats.src_max == src.max() and stats.tgt_max == tgt.max()
    assert stats.num_within == np.sum((src <= 50) & (tgt <= 70))
    assert stats.coverage == pytest.approx(stats.num_within / 5000)
    lines = lengths.format_stats(stats, split="train", long_pairs="skip")
    assert lines[0].startswith("train source tokens (with <eos>): p50 ")
    assert f"{5000 - stats.num_within:,} longer pairs skipped (never cut)" in lines[2]
    warning = lengths.coverage_warning(stats)  # ~75 % < 99.9 %: names the percentiles to use
    need = int(np.ceil(np.percentile(src, 99.9)))
    assert warning is not None and f"at least the 99.9th percentiles {need} /" in warning
    assert lengths.coverage_warning(lengths.length_stats(src, tgt, 60, 80)) is None


def test_spread_subset_is_fixed_evenly_spaced_and_keeps_order():
    items = list(range(100))
    assert spread_subset(items, 0) == items and spread_subset(items, 500) == items
    picked = spread_subset(items, 10)
    assert picked == [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]
    assert spread_subset(items, 10) == picked  # no randomness
    assert spread_subset(items, 1) == [0]
    with pytest.raises(ValueError, match=">= 0"):
        spread_subset(items, -1)
