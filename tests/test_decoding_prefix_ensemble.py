"""Forced target prefixes and ensembles in decoding/search.py and model_decode.py, on
random-initialised Transformers: cached decoding equals full recomputation, a prefix of the
model's own greedy output changes nothing, an ensemble of one (or of two copies) is the model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax.data.vocab import PAD_ID
from transformer_jax.decoding import model_decode, steps
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

L = 10


@pytest.fixture(scope="module")
def model():
    cfg = tiny_config(23, 13, max_len=32)
    rng = np.random.default_rng(1)
    src = jnp.asarray(rng.integers(4, 23, (4, 6)), jnp.int32)
    src_len = jnp.asarray([6, 4, 2, 5], jnp.int32)
    return cfg, random_params(cfg, 0, bias_std=0.0), src, src_len


def greedy(cfg, params, src, src_len, **kw):
    return np.asarray(model_decode.greedy_decode(cfg, params, src, src_len, max_decode_len=L, **kw))


def beam(cfg, params, src, src_len, **kw):
    out = model_decode.beam_decode(
        cfg, params, src, src_len, beam_size=3, max_decode_len=L, alpha=0.6, **kw
    )
    return jax.tree.map(np.asarray, out)


def test_a_prefix_of_the_greedy_output_changes_nothing(model):
    cfg, params, src, src_len = model
    free = greedy(cfg, params, src, src_len)
    assert (free != PAD_ID).sum(axis=1).min() >= 3  # every row has 3 tokens to force
    for k in (1, 3):
        prefix = jnp.asarray(free[:, :k])
        np.testing.assert_array_equal(greedy(cfg, params, src, src_len, prefix=prefix), free)


def test_outputs_start_with_the_prefix_and_cache_equals_recomputation(model):
    cfg, params, src, src_len = model
    # Per-row prefixes of different lengths (<pad> after each); row 3 has none.
    prefix = np.array([[5, 6, 7], [8, 0, 0], [9, 9, 0], [0, 0, 0]], np.int32)
    free = greedy(cfg, params, src, src_len)
    out = greedy(cfg, params, src, src_len, prefix=jnp.asarray(prefix))
    for row, p in zip(out, prefix, strict=True):
        forced = p[p != PAD_ID]
        np.testing.assert_array_equal(row[: len(forced)], forced)
    np.testing.assert_array_equal(out[3], free[3])
    assert not np.array_equal(out[:3], free[:3])
    full = greedy(cfg, params, src, src_len, prefix=jnp.asarray(prefix), use_cache=False)
    np.testing.assert_array_equal(out, full)
    b = beam(cfg, params, src, src_len, prefix=jnp.asarray(prefix))
    b_full = beam(cfg, params, src, src_len, prefix=jnp.asarray(prefix), use_cache=False)
    np.testing.assert_array_equal(b.tokens, b_full.tokens)
    np.testing.assert_allclose(b.scores, b_full.scores, rtol=1e-5)
    for w in range(3):  # every finished hypothesis of the beam starts with its prefix
        for r, p in enumerate(prefix[:3]):
            forced = p[p != PAD_ID]
            if np.isfinite(b.scores[r, w]):
                np.testing.assert_array_equal(b.tokens[r, w, : len(forced)], forced)


def test_beam_prefix_of_its_own_best_scores_at_least_as_well(model):
    """Forcing the best hypothesis' first tokens spends every beam on its continuations:
    the search finds that hypothesis again or a better one (beam search is not exact)."""
    cfg, params, src, src_len = model
    free = beam(cfg, params, src, src_len)
    forced = beam(cfg, params, src, src_len, prefix=jnp.asarray(free.tokens[:, 0, :2]))
    np.testing.assert_array_equal(forced.tokens[:, :, :2], np.repeat(free.tokens[:, :1, :2], 3, 1))
    assert np.all(forced.scores[:, 0] >= free.scores[:, 0] - 1e-5)
    same = np.all(forced.tokens[:, 0] == free.tokens[:, 0], axis=1)
    np.testing.assert_allclose(forced.scores[same, 0], free.scores[same, 0], rtol=1e-5)
    assert same.any()


def test_nbest_scores_are_log_probs_over_the_length_penalty(model):
    cfg, params, src, src_len = model
    out = jax.tree.map(
        np.asarray,
        model_decode.nbest_decode(
            cfg, params, src, src_len, beam_size=3, nbest=2, max_decode_len=L, alpha=0.6
        ),
    )
    best = beam(cfg, params, src, src_len)
    np.testing.assert_array_equal(out.tokens, best.tokens[:, :2])
    np.testing.assert_allclose(out.scores, best.scores[:, :2])
    lengths = np.where((out.tokens == 2).any(-1), (out.tokens == 2).argmax(-1) + 1, L)
    np.testing.assert_allclose(out.log_probs, out.scores * ((5 + lengths) / 6) ** 0.6, rtol=1e-5)
    one = jax.tree.map(
        np.asarray,
        model_decode.nbest_decode(
            cfg, params, src, src_len, beam_size=1, nbest=1, max_decode_len=L, alpha=0.6
        ),
    )
    np.testing.assert_array_equal(one.tokens[:, 0], greedy(cfg, params, src, src_len))
    assert np.all(one.log_probs < 0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_an_ensemble_of_one_or_two_copies_is_the_model(model, use_cache):
    cfg, params, src, src_len = model
    want_greedy = greedy(cfg, params, src, src_len, use_cache=use_cache)
    want_beam = beam(cfg, params, src, src_len, use_cache=use_cache)
    for configs, plist in (((cfg,), (params,)), ((cfg, cfg), (params, params))):
        got = greedy(configs, plist, src, src_len, use_cache=use_cache)
        np.testing.assert_array_equal(got, want_greedy)
        b = beam(configs, plist, src, src_len, use_cache=use_cache)
        np.testing.assert_array_equal(b.tokens, want_beam.tokens)
        np.testing.assert_allclose(b.scores, want_beam.scores, rtol=1e-5, atol=1e-6)


def test_an_ensemble_averages_log_probs(model):
    """Two different models: greedy follows argmax of the mean log-probabilities, checked
    step by step against each member's own recomputed distribution."""
    cfg, params, src, src_len = model
    other_cfg = cfg.replace(num_decoder_layers=1)
    other = random_params(other_cfg, 7, bias_std=0.0)
    ensemble = greedy((cfg, other_cfg), (params, other), src, src_len)
    assert not np.array_equal(ensemble, greedy(cfg, params, src, src_len))
    prefix = np.concatenate([np.ones((4, 1), np.int32), ensemble[:, :-1]], axis=1)
    mean = 0
    for c, p in ((cfg, params), (other_cfg, other)):
        step = steps.recompute_step(c, p, steps.encode(c, p, src, src_len), src_len)
        logps = []
        state = steps.recompute_state(4, L)
        for i in range(L):
            logits, state = step(jnp.asarray(prefix[:, i]), state)
            logps.append(np.asarray(jax.nn.log_softmax(logits)))
        mean = mean + np.stack(logps, 1) / 2  # (B, L, V)
    alive = np.cumsum(ensemble == 2, axis=1) - (ensemble == 2) == 0  # up to <eos>
    np.testing.assert_array_equal(mean.argmax(-1)[alive], ensemble[alive])
