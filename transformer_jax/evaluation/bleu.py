"""Translation scores: the book's sentence BLEU, and corpus BLEU / chrF with sacrebleu.

The book's BLEU (d2l §9.7.4 / 10.7 "Evaluation of Predicted Sequences") is for single
sentences of space-separated tokens:

    BLEU = exp(min(0, 1 - len_label / len_pred)) · Π_{n=1..k} p_n^(1 / 2^n)

where p_n is the clipped n-gram precision. Corpus scores for reports use sacrebleu on
detokenised text, so they are comparable with published numbers.
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Sequence

import sacrebleu

# The book's preprocessing puts a space before , . ! ? (`"go."` -> `"go ."`); undo it.
_SPACED_PUNCTUATION = re.compile(r" ([,.!?])")


def book_bleu(pred: str, label: str, k: int = 2) -> float:
    """The book's `bleu(pred_seq, label_seq, k)` (d2l 1.0 §10.7.6), on single-space tokens.

    Edge behaviour, kept as the book has it: only n ≤ min(k, len_pred) are used, so a
    prediction shorter than k is scored on its available n-grams (d2l 0.17 looped to k and
    divided by zero there); tokens come from `split(' ')`, so an empty prediction is one empty
    token with precision 0, and score 0.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    pred_tokens, label_tokens = pred.split(" "), label.split(" ")
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    score = math.exp(min(0.0, 1.0 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        label_ngrams = collections.Counter(
            tuple(label_tokens[i : i + n]) for i in range(len_label - n + 1)
        )
        matches = 0
        for i in range(len_pred - n + 1):
            gram = tuple(pred_tokens[i : i + n])
            if label_ngrams[gram] > 0:  # clipped: each label n-gram matches once
                matches += 1
                label_ngrams[gram] -= 1
        score *= math.pow(matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def detokenize_book(text: str) -> str:
    """Undo the book's punctuation spacing: `"je suis chez moi ."` -> `"je suis chez moi."`."""
    return _SPACED_PUNCTUATION.sub(r"\1", text)


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("pass lists of sentences, not a single string.")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up."
        )
    if not hypotheses:
        raise ValueError("no sentences to score.")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus BLEU (0–100; 13a tokenisation, 4-grams) with one reference each."""
    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus chrF (0–100; character 6-grams, β = 2) with one reference each."""
    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)
