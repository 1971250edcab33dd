"""Decoding a random-initialised Transformer: cache vs full recomputation, beam 1 vs greedy,
and the batch split over two (forced host) devices."""

import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls, subprocess_env
from transformer_jax.data.vocab import EOS_ID
from transformer_jax.decoding import beam_decode, cache_lengths, greedy_decode
from transformer_jax.nn import Transformer
from transformer_jax.testing import random_params, tiny_config

# cached against recomputed decoding, token for token: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

REPO = Path(__file__).resolve().parents[1]
MAX_DECODE_LEN = 12
# The output budget a·W + b of decoding/defaults.py, no fixed length.
BUDGET = dict(max_len_a=2.0, max_len_b=10, max_decode_len=None)


def make_model(seed: int = 0, layers: int = 2):
    cfg = tiny_config(23, 13, num_encoder_layers=layers, num_decoder_layers=layers, max_len=32)
    rng = np.random.default_rng(seed)
    src = jnp.asarray(rng.integers(4, cfg.src_vocab_size, (6, 7)), jnp.int32)  # (B, S)
    src_len = jnp.asarray([7, 5, 3, 1, 7, 2], jnp.int32)  # (B,)
    return cfg, random_params(cfg, seed), src, src_len


@pytest.fixture(scope="module")
def model():
    return make_model()


def test_cached_greedy_equals_full_recomputation(model):
    cfg, params, src, src_len = model
    cached = np.asarray(greedy_decode(cfg, params, src, src_len, max_decode_len=MAX_DECODE_LEN))
    full = np.asarray(
        greedy_decode(cfg, params, src, src_len, max_decode_len=MAX_DECODE_LEN, use_cache=False)
    )
    np.testing.assert_array_equal(cached, full)
    # Not a vacuous comparison: some rows decode several tokens before stopping.
    assert (cached != cfg.pad_id).sum(axis=1).max() >= 5


def test_greedy_matches_step_by_step_argmax_of_the_parallel_model(model):
    """An independent reference: grow the prefix on the host, argmax of the full model."""
    cfg, params, src, src_len = model
    steps = 6
    tokens = np.asarray(greedy_decode(cfg, params, src, src_len, max_decode_len=steps))
    forward = jax.jit(
        lambda prefix: Transformer(cfg).apply({"params": params}, src, src_len, prefix)
    )
    # One fixed width: the causal decoder's logits at i ignore the <pad> tail of the prefix.
    prefix = np.zeros((src.shape[0], steps), np.int32)
    prefix[:, 0] = 1  # <bos>
    for i in range(steps):
        nxt = np.asarray(jnp.argmax(forward(jnp.asarray(prefix))[:, i], axis=-1))
        done = (tokens[:, :i] == 2).any(axis=1)
        np.testing.assert_array_equal(tokens[~done, i], nxt[~done])
        if i + 1 < steps:
            prefix[:, i + 1] = nxt


def test_cached_beam_equals_full_recomputation(model):
    cfg, params, src, src_len = model
    kw = dict(beam_size=3, max_decode_len=MAX_DECODE_LEN, alpha=0.6)
    cached = beam_decode(cfg, params, src, src_len, **kw)
    full = beam_decode(cfg, params, src, src_len, use_cache=False, **kw)
    np.testing.assert_array_equal(np.asarray(cached.tokens), np.asarray(full.tokens))
    np.testing.assert_allclose(np.asarray(cached.scores), np.asarray(full.scores), rtol=1e-5)
    scores = np.asarray(cached.scores)
    assert np.all(np.diff(scores, axis=1) <= 0)  # n-best, best first


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_equals_greedy(model, alpha):
    cfg, params, src, src_len = model
    greedy = greedy_decode(cfg, params, src, src_len, max_decode_len=MAX_DECODE_LEN)
    beam = beam_decode(
        cfg, params, src, src_len, beam_size=1, max_decode_len=MAX_DECODE_LEN, alpha=alpha
    )
    np.testing.assert_array_equal(np.asarray(beam.tokens)[:, 0], np.asarray(greedy))


def test_decode_length_beyond_a_learned_table_is_rejected(model):
    cfg, _, src, src_len = model
    learned = cfg.replace(positional="learned")
    params = random_params(learned, seed=1)
    with pytest.raises(ValueError, match=r"learned position table \(model.max_len=32\)"):
        greedy_decode(learned, params, src, src_len, max_decode_len=33)


def test_sinusoidal_decoding_beyond_max_len_equals_recomputation(model):
    """Positions past model.max_len are computed, and the cache still equals recomputation."""
    cfg, params, src, src_len = model
    length = cfg.max_len + 8
    cached = greedy_decode(cfg, params, src, src_len, max_decode_len=length)
    full = greedy_decode(cfg, params, src, src_len, max_decode_len=length, use_cache=False)
    assert cached.shape == (src.shape[0], length)
    np.testing.assert_array_equal(np.asarray(cached), np.asarray(full))


def _without_eos(params):
    """A copy whose `<eos>` never wins: every row decodes all L tokens, every segment runs."""
    params = jax.tree.map(np.array, params)
    params["output"]["dense"]["bias"][EOS_ID] = -1e9
    return params


@pytest.mark.parametrize("beam", [1, 3])
def test_growing_cache_equals_a_full_size_cache_and_recomputation(model, beam):
    """L = 140 decodes in three segments (cache room 32, 64, 140): the tokens and scores of
    one cache of 140 positions and of recomputing the prefix at every step."""
    cfg, params, src, src_len = model
    params, length = _without_eos(params), 140
    assert cache_lengths(length) == (32, 64, 140)

    def run(**kw):
        if beam == 1:
            return greedy_decode(cfg, params, src, src_len, max_decode_len=length, **kw), None
        out = beam_decode(
            cfg, params, src, src_len, beam_size=beam, max_decode_len=length, alpha=0.6, **kw
        )
        return out.tokens, out.scores

    (grown, grown_scores), (full, full_scores), (recomputed, recomputed_scores) = (
        run(grow_cache=True),
        run(grow_cache=False),
        run(use_cache=False),
    )
    assert (np.asarray(grown) != cfg.pad_id).all()  # every position decoded
    np.testing.assert_array_equal(np.asarray(grown), np.asarray(full))
    np.testing.assert_array_equal(np.asarray(grown), np.asarray(recomputed))
    if beam > 1:
        np.testing.assert_allclose(np.asarray(grown_scores), np.asarray(full_scores), rtol=1e-5)
        np.testing.assert_allclose(
            np.asarray(grown_scores), np.asarray(recomputed_scores), rtol=1e-5
        )


def test_sharded_decoding_on_two_devices_matches_one_device(model, tmp_path):
    """The batch split over two host devices gives the tokens of the one-device decode.

    XLA_FLAGS must be set before jax starts, so the sharded run is a subprocess; it rebuilds
    the same model (same seed) and compares with the tokens decoded here.
    """
    cfg, params, src, src_len = model
    want = tmp_path / "want.npz"
    np.savez(
        want,
        greedy=np.asarray(greedy_decode(cfg, params, src, src_len, max_decode_len=MAX_DECODE_LEN)),
        beam=np.asarray(
            beam_decode(
                cfg, params, src, src_len, beam_size=3, max_decode_len=MAX_DECODE_LEN, alpha=0.6
            ).tokens
        ),
    )
    script = textwrap.dedent(
        f"""
        import jax, numpy as np
        from tests.test_decoding_model import make_model
        from transformer_jax.decoding import sharded_decoder
        assert jax.local_device_count() == 2, jax.devices()
        cfg, params, src, src_len = make_model()
        want = np.load({str(want)!r})
        for beam, key in ((1, "greedy"), (3, "beam")):
            fn = sharded_decoder(cfg, beam_size=beam, max_decode_len={MAX_DECODE_LEN}, alpha=0.6)
            got = fn(params, src, src_len)
            assert len(got.sharding.device_set) == 2, got.sharding
            np.testing.assert_array_equal(np.asarray(got), want[key])
        print("OK")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=subprocess_env(devices=2),  # 2 host devices, compilation cache, fast compiles
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout


@pytest.mark.parametrize("beam", [1, 3])
def test_a_traced_limit_equals_a_shorter_static_length(model, beam):
    """One program (room L) with a budget of 5 as an argument: the same tokens and scores as
    a program compiled for L = 5, padded after; a limit of L changes nothing."""
    cfg, params, src, src_len = model
    short, room = 5, MAX_DECODE_LEN
    if beam == 1:
        want = np.asarray(greedy_decode(cfg, params, src, src_len, max_decode_len=short))
        got = np.asarray(
            greedy_decode(cfg, params, src, src_len, max_decode_len=room, limit=jnp.int32(short))
        )
        full = greedy_decode(cfg, params, src, src_len, max_decode_len=room)
        same = greedy_decode(cfg, params, src, src_len, max_decode_len=room, limit=room)
    else:
        kw = dict(beam_size=beam, alpha=0.6)
        result = beam_decode(cfg, params, src, src_len, max_decode_len=short, **kw)
        limited = beam_decode(
            cfg, params, src, src_len, max_decode_len=room, limit=jnp.int32(short), **kw
        )
        np.testing.assert_allclose(limited.scores, result.scores, rtol=1e-6)
        want, got = np.asarray(result.tokens), np.asarray(limited.tokens)
        full = beam_decode(cfg, params, src, src_len, max_decode_len=room, **kw).tokens
        same = beam_decode(cfg, params, src, src_len, max_decode_len=room, limit=room, **kw)
        same = same.tokens
    np.testing.assert_array_equal(got[..., :short], want)
    assert np.all(got[..., short:] == cfg.pad_id)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(full))
    # Not vacuous: without the limit some row runs past it.
    assert np.any(np.asarray(full)[..., short:] != cfg.pad_id)


def test_a_large_call_decodes_with_one_program_per_width(model):
    """100 sources of 2..60 tokens, batches of 16: two programs (widths 16 and 64, every
    batch 16 rows, the last too), and the tokens of decoding the sources of each length
    rounded to 8 together, with their budget compiled in: each source's own budget, whatever
    its batch holds."""
    from transformer_jax.decoding import batch_decode, shapes
    from transformer_jax.runtime import compile_log

    cfg, params, _, _ = model
    rng = np.random.default_rng(7)
    lengths = np.concatenate([rng.integers(2, 16, 80), rng.integers(17, 61, 20)])
    sources = [[*rng.integers(4, cfg.src_vocab_size, n - 1).tolist(), EOS_ID] for n in lengths]
    with compile_log.recording() as log:
        out = batch_decode.decode_ids(
            cfg, params, sources, beam_size=2, batch_size=16, alpha=0.6, **BUDGET
        )
    names = [p.name for p in log.programs if "per_device" in p.name]
    assert len(names) == 2, log.programs
    widths = [shapes.round_up(len(row), 8) for row in sources]
    for width in sorted(set(widths)):
        chunk = [i for i in range(len(sources)) if widths[i] == width]
        budget = shapes.output_budget(width, **BUDGET)
        src, src_len = shapes.pad_batch([sources[i] for i in chunk], len(chunk), width)
        want = np.asarray(
            beam_decode(
                cfg, params, src, src_len, beam_size=2, max_decode_len=budget, alpha=0.6
            ).tokens
        )[:, 0]
        for r, i in enumerate(chunk):
            np.testing.assert_array_equal(out[i][:budget], want[r])
            assert np.all(out[i][budget:] == cfg.pad_id)
