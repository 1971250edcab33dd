"""Concatenation augmentation (data/augment.py) and its place in the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_jax.data.augment import concatenated_pairs
from transformer_jax.data.encoding import TokenizedPairs
from transformer_jax.data.vocab import EOS_ID


def _pairs(n: int, seed: int = 0) -> TokenizedPairs:
    rng = np.random.default_rng(seed)
    src = [[int(t) for t in rng.integers(5, 50, rng.integers(1, 8))] + [EOS_ID] for _ in range(n)]
    tgt = [[int(t) for t in rng.integers(5, 50, rng.integers(1, 10))] + [EOS_ID] for _ in range(n)]
    lens = lambda rows: np.array([len(r) for r in rows], np.int32)  # noqa: E731
    return TokenizedPairs(src, tgt, lens(src), lens(tgt))


def test_zero_fraction_returns_the_input():
    pairs = _pairs(10)
    assert concatenated_pairs(pairs, 0.0, max_src_len=64, max_tgt_len=64, seed=0) is pairs


def test_joined_pairs_are_two_real_pairs_side_by_side():
    pairs = _pairs(200)
    out = concatenated_pairs(pairs, 0.5, max_src_len=64, max_tgt_len=64, seed=1)
    assert out.src[:200] == pairs.src and out.tgt[:200] == pairs.tgt  # the real pairs, first
    added = len(out) - 200
    assert 90 <= added <= 100  # 100 draws, minus the rare draws of one pair with itself
    real = {(tuple(s), tuple(t)) for s, t in zip(pairs.src, pairs.tgt, strict=True)}
    for src, tgt, s_len, t_len in zip(
        out.src[200:], out.tgt[200:], out.src_len[200:], out.tgt_len[200:], strict=True
    ):
        assert len(src) == s_len and len(tgt) == t_len
        assert src[-1] == EOS_ID and src.count(EOS_ID) == 1  # one <eos>, at the end
        # Some split point makes both halves a real pair (the first without its <eos>).
        splits = [
            (i, j)
            for i in range(1, len(src))
            for j in range(1, len(tgt))
            if (tuple(src[:i]) + (EOS_ID,), tuple(tgt[:j]) + (EOS_ID,)) in real
            and (tuple(src[i:]), tuple(tgt[j:])) in real
        ]
        assert splits, (src, tgt)


def test_joined_pairs_respect_the_limits_and_are_deterministic():
    pairs = _pairs(300)
    a = concatenated_pairs(pairs, 1.0, max_src_len=10, max_tgt_len=12, seed=3)
    b = concatenated_pairs(pairs, 1.0, max_src_len=10, max_tgt_len=12, seed=3)
    c = concatenated_pairs(pairs, 1.0, max_src_len=10, max_tgt_len=12, seed=4)
    assert a.src == b.src and a.tgt == b.tgt
    assert a.src != c.src
    assert len(a) > 300
    assert a.src_len[300:].max() <= 10 and a.tgt_len[300:].max() <= 12


def test_negative_fraction_is_an_error():
    with pytest.raises(ValueError, match="concat_fraction"):
        concatenated_pairs(_pairs(5), -0.1, max_src_len=64, max_tgt_len=64, seed=0)


def test_config_validation_names_the_key():
    from transformer_jax.data.config import data_config, validate_data_config

    cfg = data_config()
    cfg.concat_fraction = 1.5
    with pytest.raises(ValueError, match="concat_fraction=1.5"):
        validate_data_config(cfg)
    cfg.concat_fraction, cfg.long_pairs = 0.1, "truncate"
    with pytest.raises(ValueError, match="long_pairs='skip'"):
        validate_data_config(cfg)
