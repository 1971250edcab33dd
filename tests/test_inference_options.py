"""inference/translator.py with decoding options: translate_options (n-best with scores,
sampling, prefixes), ensembles (from_workdirs' vocabulary check; an ensemble of one or two
copies equals the model), and translate unchanged by the new keywords' defaults."""

import dataclasses

import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax.data.tokenizers import WordTokenizer
from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.decoding.options import DecodeOptions, Hypotheses
from transformer_jax.inference import Translator
from transformer_jax.inference.translator import check_vocabularies
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

WORDS = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(30))])
LINES = ["w1 w2 w3", "w4 w5", "", "w7 w8 w9 w10 w11"]


@pytest.fixture(scope="module")
def translator():
    cfg = tiny_config(len(SPECIAL_TOKENS) + 30, len(SPECIAL_TOKENS) + 30)
    return Translator.from_params(
        cfg, random_params(cfg, seed=3, bias_std=0.0), WORDS, WORDS, max_decode_len=8
    )


def test_defaults_leave_translate_unchanged(translator):
    plain = translator.translate(LINES)
    assert translator.translate(LINES, nbest=1, temperature=0.0, prefix=None) == plain
    best = translator.translate_options(LINES, DecodeOptions())
    assert [h.best for h in best] == plain
    assert best[2] == Hypotheses(("",), (0.0,), (0.0,))


def test_nbest_with_scores_best_first(translator):
    out = translator.translate_options(LINES, {"beam_size": 4, "nbest": 3})
    assert [len(h.texts) for h in out] == [3, 3, 1, 3]
    assert [h.best for h in out] == translator.translate(LINES, beam_size=4)
    for h in (out[0], out[1], out[3]):
        assert list(h.scores) == sorted(h.scores, reverse=True)
        assert all(lp < 0 for lp in h.log_probs)
        assert len(set(h.texts)) == 3  # three different hypotheses
        # score = log P / ((5 + len) / 6)^0.6, len = words + <eos>
        for text, lp, score in zip(h.texts, h.log_probs, h.scores, strict=True):
            length = len(text.split()) + 1 if len(text.split()) < 8 else 8
            assert score == pytest.approx(lp / ((5 + length) / 6) ** 0.6, rel=1e-4)
    with pytest.raises(ValueError, match="nbest=5 is more than beam_size=4"):
        translator.translate_options(LINES, {"beam_size": 4, "nbest": 5})


def test_sampling_is_seeded_and_samples_differ(translator):
    options = DecodeOptions(temperature=2.0, nbest=4, seed=1)
    first = translator.translate_options(LINES, options)
    assert translator.translate_options(LINES, options) == first
    assert translator.translate_options(LINES, options.replace(seed=2)) != first
    assert any(len(set(h.texts)) > 1 for h in first)
    # A sentence samples the same alone as in a batch (keys follow the input index): the
    # first line is index 0 in both calls.
    alone = translator.translate_options(LINES[:1], options)[0]
    assert alone.texts == first[0].texts
    np.testing.assert_allclose(alone.log_probs, first[0].log_probs, rtol=1e-5)


def test_a_cut_input_gets_its_parts_best_combinations(translator):
    """n-best and a prefix keep an input's cut at sentence ends: rank 1 is the plain
    translation, each hypothesis joins one of each part's (log P and scores summed), and a
    prefix starts the first part only. Decoded whole, the model dropped or repeated
    sentences."""
    marks = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(29)), "."])
    cut = dataclasses.replace(translator, src_tokenizer=marks, tgt_tokenizer=marks)
    line, sentences = "w1 w2 . w3 w4 w5 .", ["w1 w2 .", "w3 w4 w5 ."]
    options = DecodeOptions(beam_size=4, nbest=3)
    out = cut.translate_options([line], options)[0]
    assert out.best == cut.translate([line], beam_size=4)[0]
    first, second = cut.translate_options(sentences, options)
    joined = {
        f"{a} {b}": (la + lb, sa + sb)
        for a, la, sa in zip(first.texts, first.log_probs, first.scores, strict=True)
        for b, lb, sb in zip(second.texts, second.log_probs, second.scores, strict=True)
    }
    best3 = sorted((score for _, score in joined.values()), reverse=True)[:3]
    np.testing.assert_allclose(out.scores, best3, rtol=1e-5)
    for text, log_prob, score in zip(out.texts, out.log_probs, out.scores, strict=True):
        np.testing.assert_allclose((log_prob, score), joined[text], rtol=1e-5)
    forced = cut.translate([line], prefix="w20 w21")[0]
    assert forced.startswith("w20 w21 ") and forced.endswith(" " + cut.translate(sentences)[1])


def test_a_sentences_samples_follow_its_own_id_not_its_neighbours(translator):
    """Draws are keyed by (the sentence's id, its part): not shifted when an earlier input is
    cut into parts, and a caller (a server merging requests) can give each sentence its id."""
    marks = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(29)), "."])
    cut = dataclasses.replace(translator, src_tokenizer=marks, tgt_tokenizer=marks)
    options = DecodeOptions(temperature=2.0, seed=7)
    lines = ["w1 w2 . w3 w4 .", "w5 w6 w7", "w8 w9"]
    assert 0 in cut.translate_detailed(lines, temperature=2.0).sources.parts  # 2 parts
    both = cut.translate_options(lines, options)
    alone = cut.translate_options(["w5 w6 w7"], options, sample_ids=[1])
    assert alone[0].texts == both[1].texts
    np.testing.assert_allclose(alone[0].log_probs, both[1].log_probs, rtol=1e-5)
    swapped = cut.translate_options(lines[::-1], options, sample_ids=[2, 1, 0])
    assert [h.texts for h in swapped[::-1]] == [h.texts for h in both]
    others = cut.translate_options(lines, options, sample_ids=[10, 11, 12])
    assert [h.texts for h in others] != [h.texts for h in both]  # the id is what keys them
    with pytest.raises(ValueError, match="2 sample_ids for 3 sentences"):
        cut.translate_options(lines, options, sample_ids=[0, 1])


def test_prefix_is_forced_then_the_search_continues(translator):
    free = translator.translate(LINES)
    out = translator.translate(LINES[:2], prefix="w20 w21")
    assert all(text.startswith("w20 w21") for text in out)
    # The first k words of the model's own output as the prefix: the same output.
    for line, text in zip(LINES[3:], free[3:], strict=True):
        k = min(2, len(text.split()))
        prefix = " ".join(text.split()[:k])
        assert translator.translate([line], prefix=prefix) == [text]
    per_sentence = translator.translate_options(LINES[:2], {"prefix": ["w20", None]})
    assert per_sentence[0].best != free[0]
    assert per_sentence[0].best.startswith("w20") and per_sentence[1].best == free[1]


def test_an_ensemble_of_one_or_two_copies_is_the_model(translator):
    want = translator.translate_options(LINES, {"beam_size": 3, "nbest": 2})
    two = dataclasses.replace(translator, ensemble=((translator.model_config, translator.params),))
    got = two.translate_options(LINES, {"beam_size": 3, "nbest": 2})
    assert [h.texts for h in got] == [h.texts for h in want]
    np.testing.assert_allclose(
        [s for h in got for s in h.scores], [s for h in want for s in h.scores], rtol=1e-5
    )
    assert two.translate(LINES) == translator.translate(LINES)


def test_ensemble_members_must_share_vocabularies(translator):
    other = WordTokenizer([*SPECIAL_TOKENS, *(f"v{i}" for i in range(30))])
    check_vocabularies([translator, translator], ["a", "b"])
    with pytest.raises(ValueError, match="^b has another target vocabulary than a: "):
        check_vocabularies(
            [translator, dataclasses.replace(translator, tgt_tokenizer=other)], ["a", "b"]
        )
    with pytest.raises(ValueError, match="^b has another source vocabulary than a: "):
        check_vocabularies(
            [translator, dataclasses.replace(translator, src_tokenizer=other)], ["a", "b"]
        )


def test_sampling_after_a_prefix_and_nbest_samples_keep_it(translator):
    out = translator.translate_options(
        LINES[:2], {"temperature": 1.5, "nbest": 3, "seed": 4, "prefix": "w20 w21"}
    )
    assert all(text.startswith("w20 w21") for h in out for text in h.texts)
    assert any(len(set(h.texts)) > 1 for h in out)
