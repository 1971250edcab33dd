"""Decoding's limits, found by a user: a sentence's output budget is its own (not its
batch's), capped for sources far longer than training's; very wide sources decode in few
rows; `<eos>` is never the first token; a seed must fit sampling's uint32."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.decoding import batch_decode, model_decode, search, shapes
from transformer_jax.decoding.options import DecodeOptions
from transformer_jax.inference import Translator
from transformer_jax.inference.notes import cut_note, output_notes
from transformer_jax.inference.source_ids import DecodingWarning
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

WORDS = [f"w{i}" for i in range(20)]


@pytest.fixture(scope="module")
def translator():
    """A tiny random model (sinusoidal positions), the README budget a·W + b = 2·W + 10,
    trained on sources of up to 8 tokens: no output beyond the budget of 4 x 8 = 32 tokens,
    2·32 + 10 -> 80 (`output_cap`). It rarely says `<eos>`, so outputs run to their budget."""
    tokenizer = WordTokenizer([*SPECIAL_TOKENS, *WORDS])
    cfg = tiny_config(tokenizer.vocab_size, tokenizer.vocab_size)
    return Translator.from_params(
        cfg, random_params(cfg, seed=3), tokenizer, tokenizer, max_decode_len=None,
        max_len_a=2.0, max_len_b=10, trained_len=8, segment_len=0,
    )  # fmt: skip


def sentence(n: int, offset: int = 0) -> str:
    return " ".join(WORDS[(offset + k) % len(WORDS)] for k in range(n))


# --- 1. one very long input --------------------------------------------------------------


def test_wide_sources_pad_to_multiples_of_1024_and_decode_in_few_rows():
    assert [shapes.program_width(n) for n in (3, 17, 200, 1000)] == [16, 64, 256, 1024]
    # A 5,001-token word padded to 16,384 with 64 rows asked for 550 GB.
    assert shapes.program_width(5001) == 5120
    assert shapes.program_width(5001, position_limit=4096) == 4096
    assert [shapes.rows_for_width(w) for w in (16, 256, 1024, 2048, 5120)] == [
        64 * 256 * 256 // 256,  # far more than a batch: batch_size decides
        64,
        4,
        1,
        1,
    ]
    lengths = [4] * 70 + [5001, 900, 900, 900, 900, 900]
    batches = shapes.sorted_batches(lengths, 64)
    assert [len(b) for b in batches] == [64, 6, 4, 1, 1]
    assert batches[-1] == [70] and sorted(sum(batches, [])) == list(range(len(lengths)))


def test_output_budget_has_a_cap_tied_to_the_training_length():
    cap = shapes.output_cap(64, max_len_a=2.0, max_len_b=10)
    assert cap == 2 * 256 + 10 + 6  # the budget of a 256-token source, rounded up to 8
    assert shapes.output_budget(5008, max_len_a=2.0, max_len_b=10, cap=cap) == cap
    assert shapes.output_budget(8, max_len_a=2.0, max_len_b=10, cap=cap) == 32
    # A fixed max_decode_len is the user's: not capped.
    assert shapes.output_budget(8, max_len_a=2, max_len_b=10, max_decode_len=900, cap=cap)
    assert shapes.output_cap(None, max_len_a=2.0, max_len_b=10) is None


def test_a_very_long_input_among_short_ones_is_translated_in_a_small_batch_and_capped(
    translator, monkeypatch
):
    padded = []
    pad = batch_decode.pad_batch
    monkeypatch.setattr(
        batch_decode, "pad_batch", lambda *a: padded.append((a[1], a[2])) or pad(*a)
    )
    lines = ["w1 w2"] * 70 + [sentence(1100)]
    # The random model rarely says <eos>: every output is cut at its budget (one warning).
    with pytest.warns(DecodingWarning, match=r"#0's translation was cut at 32 .*and 70 more"):
        out = translator.translate_detailed(lines)
    assert all(out.texts) and len(out.texts) == 71
    # The 1,101-token source: its own batch of width 2048, one row (or one per device, a
    # multiple of which every batch has), output cut at the cap.
    wide = [rows for rows, width in padded if width == 2048]
    assert wide and max(wide) <= len(jax.local_devices())
    assert len(out.target_ids[70]) == 80 and out.unfinished[70] == 80
    assert output_notes(out.unfinished, first_number=1)[-1] == cut_note(71, 80)
    assert "sentence 71's translation was cut at 80 tokens" in cut_note(71, 80)


# --- 2. a sentence's output does not depend on its batch ---------------------------------

CASES = {
    "greedy": {"beam_size": 1},
    "beam": {"beam_size": 3, "nbest": 2},
    "sampling": {"temperature": 1.0, "nbest": 2, "seed": 5},
}


@pytest.mark.parametrize("case", CASES)
def test_a_sentence_translates_the_same_alone_and_batched_with_long_ones(translator, case):
    short = "w3"  # budget 2·8 + 10 -> 32 alone; the batch's 40 tokens would give 96
    batched = [short, sentence(39, 1), sentence(30, 2), "w4 w5"]
    alone = translator.translate_options([short], CASES[case], warn=False)[0]
    together = translator.translate_options(batched, CASES[case], warn=False)
    assert together[0].texts == alone.texts
    np.testing.assert_allclose(together[0].scores, alone.scores, rtol=1e-5)
    # Not vacuous: the random model runs to the budget, and this one is the short one's.
    best = translator.translate_detailed([short], warn=False, **CASES[case])
    assert len(best.target_ids[0]) <= 32
    if case != "sampling":
        assert best.unfinished == {0: 32}


def test_decode_ids_gives_each_row_its_own_budget(translator):
    cfg, params = translator.decode_model
    ids = [[5, EOS_ID], [*range(4, 24), *range(4, 24), EOS_ID]]
    settings = dict(beam_size=1, max_decode_len=None, max_len_a=2.0, max_len_b=10, alpha=0.6)
    both = batch_decode.decode_ids(cfg, params, ids, batch_size=64, **settings)
    alone = batch_decode.decode_ids(cfg, params, ids[:1], batch_size=64, **settings)
    assert int(np.sum(both[0] != PAD_ID)) == 32 == int(np.sum(alone[0] != PAD_ID))
    np.testing.assert_array_equal(both[0][:32], alone[0][:32])


def test_per_row_limits_end_each_row_at_its_own(translator):
    """greedy_search / beam_search with a (B,) limit equal each row run with its limit."""
    cfg, params = translator.decode_model
    src = jnp.asarray([[5, 6, EOS_ID], [7, EOS_ID, 0]], jnp.int32)
    src_len = jnp.asarray([3, 2], jnp.int32)
    limits = jnp.asarray([4, 9], jnp.int32)
    greedy = model_decode.greedy_decode(cfg, params, src, src_len, max_decode_len=12, limit=limits)
    greedy = np.asarray(greedy)
    beam = model_decode.beam_decode(
        cfg, params, src, src_len, beam_size=2, max_decode_len=12, alpha=0.6, limit=limits
    )
    for r, n in enumerate([4, 9]):
        one = model_decode.greedy_decode(
            cfg, params, src[r : r + 1], src_len[r : r + 1], max_decode_len=12, limit=n
        )
        np.testing.assert_array_equal(greedy[r], np.asarray(one)[0])
        assert np.all(greedy[r, n:] == PAD_ID)
        solo = model_decode.beam_decode(
            cfg, params, src[r : r + 1], src_len[r : r + 1], beam_size=2, max_decode_len=12,
            alpha=0.6, limit=n,
        )  # fmt: skip
        np.testing.assert_array_equal(np.asarray(beam.tokens)[r], np.asarray(solo.tokens)[0])
        np.testing.assert_allclose(np.asarray(beam.scores)[r], np.asarray(solo.scores)[0], 1e-5)


# --- 3. seeds ----------------------------------------------------------------------------


def test_a_seed_beyond_uint32_is_one_line_naming_the_range():
    DecodeOptions(temperature=1.0, seed=2**32 - 1).validate()
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*32\), got"):
        DecodeOptions(temperature=1.0, seed=2**32).validate()


def test_the_server_answers_400_for_a_seed_beyond_uint32():
    requests = pytest.importorskip("transformer_jax.serving.requests")
    with pytest.raises(requests.RequestError) as error:
        requests.decode_options({"beam_size": 2}, {"temperature": 1.0, "seed": 2**32})
    assert error.value.status == 400 and "seed must be an integer in [0, 2**32)" in str(error.value)


def test_the_largest_seed_samples(translator):
    out = translator.translate(["w1 w2"], temperature=1.0, seed=2**32 - 1, max_decode_len=4)
    assert len(out) == 1


# --- 4. no empty translation of a non-empty source ---------------------------------------


def eos_first_model(translator):
    """The translator's model with the output bias of `<eos>` raised: its first choice at
    every step is `<eos>`, so without min_len every translation is empty."""
    cfg, params = translator.decode_model
    params = jax.tree.map(np.array, params)
    leaves = jax.tree_util.tree_leaves_with_path(params)
    bias = [x for path, x in leaves if x.ndim == 1 and x.shape[0] == cfg.tgt_vocab_size]
    assert bias, "no output bias of the vocabulary's size"
    for b in bias:
        b[EOS_ID] += 50.0
    return cfg, params


@pytest.mark.parametrize("use_cache", [True, False])
def test_eos_is_never_the_first_token(translator, use_cache):
    cfg, params = eos_first_model(translator)
    src = jnp.asarray([[5, EOS_ID], [6, EOS_ID]], jnp.int32)
    src_len = jnp.asarray([2, 2], jnp.int32)
    kw = dict(max_decode_len=6, alpha=0.6, use_cache=use_cache)
    greedy = model_decode.nbest_decode(cfg, params, src, src_len, beam_size=1, nbest=1, **kw)
    beam = model_decode.nbest_decode(cfg, params, src, src_len, beam_size=3, nbest=3, **kw)
    drawn = model_decode.nbest_decode(
        cfg, params, src, src_len, beam_size=1, nbest=3, sampling=True, seed=1, **kw
    )
    for out in (greedy, beam, drawn):
        tokens = np.asarray(out.tokens)  # (B, N, L)
        assert np.all(tokens[..., 0] != EOS_ID) and np.all(tokens[..., 0] != PAD_ID)
        # The very next token is <eos>: the model's choice, allowed from step 1.
        assert np.all(tokens[..., 1] == EOS_ID)
        assert np.all(np.isfinite(np.asarray(out.scores)))
    # Cached and recomputed decoding agree (the other test case recomputes).
    if use_cache:
        full = model_decode.nbest_decode(
            cfg, params, src, src_len, beam_size=3, nbest=3, **{**kw, "use_cache": False}
        )
        np.testing.assert_array_equal(np.asarray(full.tokens), np.asarray(beam.tokens))


def test_a_translation_is_never_empty_nor_an_empty_nbest(translator):
    cfg, params = eos_first_model(translator)
    eager = Translator.from_params(
        cfg, params, translator.src_tokenizer, translator.tgt_tokenizer,
        max_decode_len=6, segment_len=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecodingWarning)
        assert all(eager.translate(["w1", "w2 w3"], beam_size=1))
    hyps = eager.translate_options(["w1"], {"beam_size": 3, "nbest": 3})[0]
    assert all(hyps.texts) and len(hyps.texts) == 3
    # An empty source still gets an empty translation.
    assert eager.translate_detailed([""], warn=False).texts == [""]


def test_search_never_ends_at_the_first_step_unless_asked():
    """A toy step function whose first choice is always `<eos>` (then A = 3)."""
    vocab = 5

    def step(tokens, state):
        logits = jnp.where(jnp.arange(vocab) == EOS_ID, 5.0, 0.0)
        logits = logits.at[3].set(1.0)
        return jnp.broadcast_to(logits, (tokens.shape[0], vocab)), state

    out = np.asarray(search.greedy_search(step, (), 2, 4))
    assert out[:, :2].tolist() == [[3, EOS_ID]] * 2
    early = np.asarray(search.greedy_search(step, (), 2, 4, min_len=0))
    assert early[:, 0].tolist() == [EOS_ID] * 2
    beam = np.asarray(search.beam_search(step, (), 1, 2, 4, alpha=0.6).tokens)  # (1, 2, 4)
    assert beam[0, 0, :2].tolist() == [3, EOS_ID] and np.all(beam[0, :, 0] != EOS_ID)


def test_search_never_writes_pad_or_bos():
    """A toy step function that ranks `<pad>` first and `<bos>` second at every step (an
    untrained model can): greedy, beam and sampling write the best real token instead (its
    output was an empty line: the padding is stripped)."""
    vocab = 6

    def step(tokens, state):
        logits = jnp.zeros((vocab,)).at[PAD_ID].set(9.0).at[BOS_ID].set(8.0).at[4].set(1.0)
        return jnp.broadcast_to(logits, (tokens.shape[0], vocab)), state

    out = np.asarray(search.greedy_search(step, (), 2, 3))
    assert out.tolist() == [[4, 4, 4]] * 2
    beam = np.asarray(search.beam_search(step, (), 1, 2, 3, alpha=0.6).tokens)  # (1, 2, 3)
    for hyp in beam[0].tolist():  # <pad> only after <eos>, as padding
        written = hyp[: hyp.index(EOS_ID)] if EOS_ID in hyp else hyp
        assert written and not set(written) & {PAD_ID, BOS_ID}, beam
    logits = search.ruled_out(jnp.zeros((1, vocab)), jnp.asarray(5), 1)
    assert np.isinf(np.asarray(logits)[0, [PAD_ID, BOS_ID]]).all()
    assert np.isfinite(np.asarray(logits)[0, EOS_ID])  # past min_len, <eos> may end it


# --- 64-bit JAX -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [dict(beam_size=1), dict(beam_size=3, nbest=2), dict(beam_size=1, temperature=0.8, seed=4)],
    ids=["greedy", "beam_nbest", "sampling"],
)
def test_a_process_with_64_bit_jax_decodes_the_same(translator, settings):
    """JAX_ENABLE_X64=1 (a user's setting for other work) made Python ints int64: the cache
    update mixed int32 and int64 start indices, and beam search's carry became float64."""
    sources = [sentence(3), sentence(6, offset=2)]
    expected = translator.translate_detailed(sources, **settings)
    with jax.enable_x64(True):
        got = translator.translate_detailed(sources, **settings)
    assert got.texts == expected.texts
    assert got.hypotheses == expected.hypotheses
