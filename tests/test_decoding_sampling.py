"""decoding/sampling.py: temperature, top-k and top-p filters against a numpy reference, and
seeded sampling over a random-initialised Transformer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax.decoding import model_decode, sampling, search, steps
from transformer_jax.nn import Transformer
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)


def reference_filter(logits, temperature, top_k, top_p):
    """float64 numpy: the kept tokens of each row after temperature, top-k and top-p."""
    x = np.asarray(logits, np.float64) / temperature
    out = np.full_like(x, -np.inf)
    for r, row in enumerate(x):
        keep = np.ones(row.shape, bool)
        if top_k > 0:
            kth = np.sort(row)[::-1][min(top_k, row.size) - 1]
            keep &= row >= kth
        masked = np.where(keep, row, -np.inf)
        if top_p < 1:
            order = np.argsort(-masked, kind="stable")
            probs = np.exp(masked[order] - masked[order][0])
            probs /= probs.sum()
            before = np.cumsum(probs) - probs
            n = int(np.sum(before < top_p))
            keep &= masked >= masked[order][n - 1]
        out[r] = np.where(keep, row, -np.inf)
    return out


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, 0, 1.0), (0.7, 3, 1.0), (1.3, 0, 0.5), (1.0, 5, 0.8), (0.5, 1, 1.0), (1.0, 0, 0.01)],
)
def test_filters_match_the_numpy_reference(temperature, top_k, top_p):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(7, 20)).astype(np.float32) * 3
    logits[0, [3, 5]] = 9.0  # a tie at the top
    got = np.asarray(sampling.filter_logits(jnp.asarray(logits), temperature, top_k, top_p))
    want = reference_filter(logits, temperature, top_k, top_p)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[~np.isinf(got)], want[~np.isinf(want)], rtol=1e-6)
    kept = (~np.isinf(got)).sum(axis=1)
    if top_k == 1 or top_p == 0.01:
        assert kept[1:].max() == 1 and kept[0] == 2  # the tied maxima are both kept
    if top_k == 0 and top_p == 1.0:
        assert kept.min() == 20


def test_top_p_keeps_the_nucleus():
    probs = np.array([[0.5, 0.3, 0.15, 0.05]])
    logits = jnp.asarray(np.log(probs), jnp.float32)
    kept = lambda p: int(np.isfinite(np.asarray(sampling.top_p_filter(logits, p))).sum())
    assert [kept(p) for p in (0.4, 0.5, 0.6, 0.8, 0.9, 1.0)] == [1, 1, 2, 2, 3, 4]


def test_draws_follow_the_filtered_distribution():
    logits = jnp.asarray(np.log([[0.6, 0.25, 0.1, 0.05]]), jnp.float32)
    n = 4000
    keys = jax.random.split(jax.random.key(0), n)
    draw = jax.jit(
        lambda k, t, kk, p: sampling.sample_tokens(jnp.repeat(logits, n, 0), k, t, kk, p)
    )
    counts = np.bincount(np.asarray(draw(keys, 1.0, 0, 1.0)), minlength=4) / n
    np.testing.assert_allclose(counts, [0.6, 0.25, 0.1, 0.05], atol=0.03)
    top2 = np.bincount(np.asarray(draw(keys, 1.0, 2, 1.0)), minlength=4) / n
    np.testing.assert_allclose(top2, [0.6 / 0.85, 0.25 / 0.85, 0, 0], atol=0.03)
    sharp = np.bincount(np.asarray(draw(keys, 0.25, 0, 1.0)), minlength=4) / n
    assert sharp[0] > 0.95  # p^4 renormalised: 0.6^4 / sum = 0.977


@pytest.fixture(scope="module")
def model():
    cfg = tiny_config(23, 13, max_len=32)
    rng = np.random.default_rng(0)
    src = jnp.asarray(rng.integers(4, 23, (4, 6)), jnp.int32)
    src_len = jnp.asarray([6, 4, 2, 5], jnp.int32)
    return cfg, random_params(cfg, 0, bias_std=0.0), src, src_len


def sample(model, seed, nbest=3, **kw):
    cfg, params, src, src_len = model
    out = model_decode.nbest_decode(
        cfg,
        params,
        src,
        src_len,
        beam_size=1,
        nbest=nbest,
        max_decode_len=10,
        alpha=0.6,
        sampling=True,
        temperature=kw.pop("temperature", 1.5),
        seed=seed,
        **kw,
    )
    return jax.tree.map(np.asarray, out)


def test_sampling_is_seeded(model):
    first, again, other = sample(model, 1), sample(model, 1), sample(model, 2)
    np.testing.assert_array_equal(first.tokens, again.tokens)
    np.testing.assert_array_equal(first.log_probs, again.log_probs)
    assert not np.array_equal(first.tokens, other.tokens)
    # nbest samples per sentence, ranked by score; not all the same sample.
    assert first.tokens.shape == (4, 3, 10)
    assert np.all(np.diff(first.scores, axis=1) <= 0)
    assert any(len({t.tobytes() for t in first.tokens[b]}) > 1 for b in range(4))


def test_sample_log_probs_are_the_models(model):
    """Teacher-forced log P of each sample under the model, recomputed independently."""
    cfg, params, src, src_len = model
    out = sample(model, 5, nbest=2, top_k=4)
    for j in range(2):
        tokens = out.tokens[:, j]  # (B, L)
        memory = steps.encode(cfg, params, src, src_len)
        tgt_in = np.concatenate([np.ones((4, 1), np.int32), tokens[:, :-1]], axis=1)
        logits = Transformer(cfg.replace(decode=False)).apply(
            {"params": params}, memory, src_len, jnp.asarray(tgt_in), method="decode"
        )
        logp = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32)))
        lengths = np.asarray(search.hypothesis_lengths(jnp.asarray(tokens), 10))
        want = [logp[b, np.arange(n), tokens[b, :n]].sum() for b, n in enumerate(lengths)]
        np.testing.assert_allclose(out.log_probs[:, j], want, rtol=1e-4, atol=1e-4)


def test_a_row_draws_the_same_in_any_batch(model):
    """Keys follow row ids, so a sentence's samples do not depend on its batch."""
    cfg, params, src, src_len = model
    whole = sample(model, 3, nbest=2)
    alone = model_decode.nbest_decode(
        cfg,
        params,
        src[2:3],
        src_len[2:3],
        beam_size=1,
        nbest=2,
        max_decode_len=10,
        alpha=0.6,
        sampling=True,
        temperature=1.5,
        seed=3,
        row_ids=jnp.asarray([2], jnp.int32),
    )
    np.testing.assert_array_equal(np.asarray(alone.tokens)[0], whole.tokens[2])


def test_top_k_of_one_is_greedy(model):
    cfg, params, src, src_len = model
    greedy = np.asarray(model_decode.greedy_decode(cfg, params, src, src_len, max_decode_len=10))
    drawn = sample(model, 7, nbest=2, top_k=1)
    for j in range(2):
        np.testing.assert_array_equal(drawn.tokens[:, j], greedy)
