"""`evaluation.progress.progress_bar` and the `progress` callback of `decoding.decode_ids`
(issue 41, rough edge 9): long decoding shows a bar with a rate and ETA on a terminal."""

from __future__ import annotations

import io

import numpy as np

from transformer_jax.decoding.batch_decode import decode_ids
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.evaluation import progress
from transformer_jax.evaluation.progress import progress_bar
from transformer_jax.testing import random_params, tiny_config


def test_the_bar_counts_to_the_total_with_a_rate():
    out = io.StringIO()
    with progress_bar("Translating", file=out, enabled=True, delay=0) as update:
        update(4, 10)
        update(10, 10)
    text = out.getvalue()
    assert "Translating" in text and "10/10" in text and "sentence/s" in text, text


def test_no_bar_off_a_terminal_or_before_the_delay():
    not_a_terminal = io.StringIO()  # isatty() is False: a pipe or a log file
    with progress_bar("Translating", file=not_a_terminal, delay=0) as update:
        update(10, 10)
    assert not_a_terminal.getvalue() == ""
    quick = io.StringIO()
    with progress_bar("Translating", file=quick, enabled=True, delay=60) as update:
        update(10, 10)  # done long before the bar's delay
    assert quick.getvalue() == ""


def test_the_delay_default_is_read_when_the_bar_starts(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    out = io.StringIO()
    with progress_bar("Decoding", file=out, enabled=True) as update:
        update(1, 1)
    assert "Decoding" in out.getvalue()


def test_decode_ids_reports_each_batch_and_decodes_the_same_tokens():
    cfg = tiny_config(20, 20)
    params = random_params(cfg, bias_std=0.0)
    sources = [[5, 6, 2], [7, 2], [8, 9, 10, 11, 2], [12, 2], [13, 14, 2]]
    settings = {k: DEFAULTS[k] for k in ("beam_size", "alpha", "max_len_a", "max_len_b")}
    calls: list[tuple[int, int]] = []
    tokens = decode_ids(
        cfg,
        params,
        sources,
        max_decode_len=6,
        batch_size=2,
        progress=lambda done, total: calls.append((done, total)),
        **settings,
    )
    assert calls == [(2, 5), (4, 5), (5, 5)]  # after each batch of 2, the last one short
    quiet = decode_ids(cfg, params, sources, max_decode_len=6, batch_size=2, **settings)
    assert all(np.array_equal(a, b) for a, b in zip(tokens, quiet, strict=True))
