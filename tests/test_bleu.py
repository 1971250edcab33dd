"""The book's sentence BLEU against hand-computed values, and the sacrebleu wrappers."""

import math

import numpy as np
import pytest
import sacrebleu

from transformer_jax.evaluation import book_bleu, corpus_bleu, corpus_chrf, detokenize_book
from transformer_jax.evaluation.bleu import (
    bleu_by_length,
    bleu_interval,
    corpus_scores,
    format_length_table,
)


def test_exact_match_is_one():
    assert book_bleu("il est calme .", "il est calme .", k=2) == 1.0
    assert book_bleu("va !", "va !", k=2) == 1.0


def test_book_examples_by_hand():
    # pred "il est bon ." vs label "il est calme .": p1 = 3/4 (il, est, .); of the bigrams
    # "il est", "est bon", "bon ." only "il est" matches: p2 = 1/3. No brevity penalty.
    want = (3 / 4) ** 0.5 * (1 / 3) ** 0.25
    assert book_bleu("il est bon .", "il est calme .", k=2) == pytest.approx(want)
    # pred "je suis chez moi" (4) vs label "je suis chez moi ." (5): BP = exp(1 - 5/4);
    # p1 = 4/4, p2 = 3/3.
    assert book_bleu("je suis chez moi", "je suis chez moi .", k=2) == pytest.approx(
        math.exp(1 - 5 / 4)
    )
    # "j'ai perdu ." vs "j'ai perdu ." is exact; a longer prediction gets no bonus:
    # "j'ai perdu perdu ." (4) vs label (3): p1 = 3/4 (clipped: "perdu" counted once),
    # p2 = 2/3 ("j'ai perdu", "perdu perdu", "perdu ." -> 2 match); BP = 1.
    want = (3 / 4) ** 0.5 * (2 / 3) ** 0.25
    assert book_bleu("j'ai perdu perdu .", "j'ai perdu .", k=2) == pytest.approx(want)


def test_k_weights_higher_orders_by_one_over_two_to_the_n():
    # "a b c e" vs "a b c d": p1 = 3/4, p2 = 2/3 ("a b", "b c"), p3 = 1/2 ("a b c").
    pred, label = "a b c e", "a b c d"
    p = [3 / 4, 2 / 3, 1 / 2]
    for k in (1, 2, 3):
        want = math.prod(p[n - 1] ** (0.5**n) for n in range(1, k + 1))
        assert book_bleu(pred, label, k=k) == pytest.approx(want)


def test_prediction_shorter_than_k_uses_only_available_ngrams():
    # d2l 1.0: n runs to min(k, len_pred). "va" (1 token) vs "va !": BP = exp(1 - 2/1),
    # p1 = 1; no bigram term (the 0.17 code would divide by zero here).
    assert book_bleu("va", "va !", k=2) == pytest.approx(math.exp(-1.0))
    assert book_bleu("va", "va !", k=4) == pytest.approx(math.exp(-1.0))


def test_no_overlap_and_empty_prediction_score_zero():
    assert book_bleu("bonjour", "va !", k=2) == 0.0
    # "".split(" ") == [""]: one empty token, precision 0.
    assert book_bleu("", "va !", k=2) == 0.0


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be"):
        book_bleu("a", "a", k=0)


def test_detokenize_book_undoes_punctuation_spacing():
    assert detokenize_book("je suis chez moi .") == "je suis chez moi."
    assert detokenize_book("va , vite !") == "va, vite!"
    assert detokenize_book("qui ? moi .") == "qui? moi."


def test_corpus_scores_match_sacrebleu():
    hyps = ["Le chat est sur le tapis.", "Il fait beau aujourd'hui."]
    refs = ["Le chat est sur le tapis.", "Il fait très beau aujourd'hui."]
    assert corpus_bleu(hyps, refs) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert corpus_chrf(hyps, refs) == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert 0.0 < corpus_bleu(hyps, refs) < 100.0
    assert 0.0 < corpus_chrf(hyps, refs) < 100.0


def test_corpus_scores_reject_mismatched_inputs():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError, match="lists of sentences"):
        corpus_chrf("a b", "a b")
    with pytest.raises(ValueError, match="no sentences"):
        corpus_bleu([], [])


def test_corpus_scores_carry_sacrebleu_signatures():
    hyps, refs = ["le chat est noir.", "il pleut."], ["le chat est noir.", "il pleut fort."]
    scores = corpus_scores(hyps, refs)
    assert scores["bleu"] == pytest.approx(corpus_bleu(hyps, refs))
    assert scores["chrf"] == pytest.approx(corpus_chrf(hyps, refs))
    assert scores["bleu_signature"] == (
        f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    )
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0")


def test_bleu_by_length_rows_are_the_scores_of_their_pairs_and_add_up():
    sources = ["go.", "i am at home now.", "a b c d e f g", "one two three four five six seven "
               "eight nine ten eleven", "x " * 17, "he runs."]  # fmt: skip
    hyps = ["va !", "je suis chez moi.", "a b c", "un deux trois", "x x x", "il court."]
    refs = ["va !", "je suis à la maison.", "a b c d", "un deux trois quatre", "x x", "il court."]
    rows = bleu_by_length(sources, hyps, refs)
    assert [(r["words"], r["count"]) for r in rows] == [
        ("1-5", 3), ("6-10", 1), ("11-15", 1), ("16+", 1)
    ]  # fmt: skip
    assert sum(r["count"] for r in rows) == len(sources)
    short = [0, 1, 5]  # 1, 5 and 2 words
    assert rows[0]["bleu"] == pytest.approx(
        corpus_bleu([hyps[i] for i in short], [refs[i] for i in short])
    )
    assert rows[3]["bleu"] == pytest.approx(corpus_bleu([hyps[4]], [refs[4]]))
    empty = bleu_by_length(["go."], ["va !"], ["va !"])
    assert empty[1] == {"words": "6-10", "count": 0, "bleu": None, "bleu_ci95": None, "chrf": None}
    assert rows[0]["bleu_ci95"] == pytest.approx(
        bleu_interval([hyps[i] for i in short], [refs[i] for i in short])
    )
    assert rows[3]["bleu_ci95"] == 0.0  # one sentence: every resample is that sentence
    table = format_length_table(rows, {"count": 6, "bleu": 1.0, "chrf": 2.0})
    assert table[2].startswith(f"| 1-5 | 3 | {rows[0]['bleu']:.2f} ± {rows[0]['bleu_ci95']:.2f} |")
    assert table[-1] == "| all | 6 | 1.00 | 2.00 |"  # a total without an interval
    assert (
        format_length_table([], {"count": 6, "bleu": 1.0, "bleu_ci95": 0.5, "chrf": 2.0})[-1]
        == "| all | 6 | 1.00 ± 0.50 | 2.00 |"
    )
    plain = bleu_by_length(sources, hyps, refs, n_bootstrap=0)
    assert [r["bleu_ci95"] for r in plain] == [None] * 4
    assert [r["bleu"] for r in plain] == [r["bleu"] for r in rows]


# Ten pairs of mixed quality: corpus BLEU moves when the set of sentences does.
_HYPS = [
    "le chat est noir.", "il pleut beaucoup.", "je suis fatigué.", "nous allons à paris.",
    "elle lit un livre.", "tu es en retard.", "le train part.", "j'aime le café noir.",
    "ils sont partis hier.", "c'est une belle maison.",
]  # fmt: skip
_REFS = [
    "le chat est noir.", "il pleut fort.", "je suis très fatigué.", "nous partons pour paris.",
    "elle lit un livre.", "vous êtes en retard.", "le train s'en va.", "j'aime le café.",
    "ils sont partis hier soir.", "c'est une jolie maison.",
]  # fmt: skip


def test_bleu_interval_is_half_the_central_95_percent_of_resampled_corpus_bleu():
    # The definition, rebuilt from corpus_bleu on explicit resamples drawn as sacreBLEU draws
    # them (numpy's default_rng with its seed 12345, indices of shape (resamples, sentences)).
    n = 200
    idx = np.random.default_rng(12345).choice(len(_HYPS), size=(n, len(_HYPS)), replace=True)
    scores = sorted(corpus_bleu([_HYPS[i] for i in row], [_REFS[i] for i in row]) for row in idx)
    lower, upper = scores[n // 40], scores[n - n // 40 - 1]
    assert bleu_interval(_HYPS, _REFS, n) == pytest.approx(0.5 * (upper - lower), abs=1e-3)
    assert bleu_interval(_HYPS, _REFS, n) > 1.0  # ten sentences of mixed quality: wide


def test_bleu_interval_narrows_with_more_sentences_and_vanishes_when_all_agree():
    few = bleu_interval(_HYPS, _REFS)
    many = bleu_interval(_HYPS * 16, _REFS * 16)  # the same mix, 16 times as many sentences
    assert many < few / 2  # ~ 1 / sqrt(16) of it
    assert bleu_interval(_REFS, _REFS) == 0.0  # every resample scores 100
    scores = corpus_scores(_HYPS, _REFS, n_bootstrap=1000)
    assert scores["bleu_ci95"] == pytest.approx(few)
    assert "bleu_ci95" not in corpus_scores(_HYPS, _REFS)  # by default, no resampling
    with pytest.raises(ValueError, match="n_bootstrap must be >= 2"):
        bleu_interval(_HYPS, _REFS, 1)
