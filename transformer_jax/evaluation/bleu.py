"""Translation scores: the book's sentence BLEU, and corpus BLEU / chrF with sacrebleu.

The book's BLEU (d2l §9.7.4 / 10.7 "Evaluation of Predicted Sequences") is for single
sentences of space-separated tokens:

    BLEU = exp(min(0, 1 - len_label / len_pred)) · Π_{n=1..k} p_n^(1 / 2^n)

where p_n is the clipped n-gram precision. Corpus scores for reports use sacrebleu on
detokenised text, so they are comparable with published numbers.
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sacrebleu


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


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("pass lists of sentences, not a single string.")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up."
        )
    if not hypotheses:
        raise ValueError("no sentences to score.")


# Resamples behind the 95 % intervals of the reports (sacreBLEU's default for --confidence).
BOOTSTRAP_RESAMPLES = 1000


def corpus_scores(
    hypotheses: Sequence[str], references: Sequence[str], *, n_bootstrap: int = 0
) -> dict[str, Any]:
    """sacreBLEU BLEU and chrF with their signatures (what a paper should print beside them).

    Returns {"bleu", "chrf": float 0-100, "bleu_signature", "chrf_signature": str}, e.g.
    `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`. With `n_bootstrap` > 1
    also "bleu_ci95": the half-width of BLEU's 95 % interval over `n_bootstrap` resamples of
    the sentences (`bleu_interval`).
    """
    _check_pairs(hypotheses, references)
    refs = [list(references)]
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    scores = {
        "bleu": float(bleu.corpus_score(list(hypotheses), refs).score),
        "chrf": float(chrf.corpus_score(list(hypotheses), refs).score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
    if n_bootstrap > 1:
        scores["bleu_ci95"] = bleu_interval(hypotheses, references, n_bootstrap)
    return scores


def bleu_interval(
    hypotheses: Sequence[str], references: Sequence[str], n_bootstrap: int = BOOTSTRAP_RESAMPLES
) -> float:
    """Half-width of corpus BLEU's 95 % bootstrap interval, as `sacrebleu --confidence` prints.

    sacreBLEU draws `n_bootstrap` sets of as many sentences as given, with replacement (its
    fixed seed, 12345, unless SACREBLEU_SEED says otherwise), scores each and reports half
    the spread between the 2.5th and 97.5th percentile scores. It says how far a score on
    these few sentences may be from the score on more of the same kind: about ±1 BLEU for
    thousands of test pairs, ±5 or more for a few dozen. 0.0 for a single sentence.
    """
    _check_pairs(hypotheses, references)
    if n_bootstrap < 2:
        raise ValueError(f"n_bootstrap must be >= 2 resamples, got {n_bootstrap}.")
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(list(hypotheses), [list(references)], n_bootstrap=n_bootstrap)
    # `format(is_json=True)` is the public face of the interval sacreBLEU stored on the score;
    # it leaves the interval out when every resample scored 0 (then the interval is 0 wide).
    shown = json.loads(score.format(width=4, signature=str(bleu.get_signature()), is_json=True))
    return float(shown.get("confidence_var", 0.0))


# Source-length rows of `bleu_by_length`: (first, last) words, None = no upper end.
LENGTH_BINS: tuple[tuple[int, int | None], ...] = ((1, 5), (6, 10), (11, 15), (16, None))


def length_bin_name(first: int, last: int | None) -> str:
    """A `LENGTH_BINS` row's name: "1-5", or "16+" for a row with no upper end."""
    return f"{first}-{last}" if last else f"{first}+"


def bleu_by_length(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    bins: Sequence[tuple[int, int | None]] = LENGTH_BINS,
    *,
    n_bootstrap: int = BOOTSTRAP_RESAMPLES,
) -> list[dict[str, Any]]:
    """Corpus BLEU and chrF of the pairs whose source has a number of words in each bin.

    Words are whitespace-separated tokens of the source as given (pass detokenised text, so
    punctuation is not counted as a word). A source of 0 words (empty) falls in no bin.
    Returns one row per bin: {"words": "1-5" | "16+", "count", "bleu", "bleu_ci95",
    "chrf"}, with the scores None for an empty bin. "bleu_ci95" is the half-width of the
    row's 95 % bootstrap interval (`bleu_interval`; None if `n_bootstrap` < 2): a row of a
    few dozen pairs is a rough estimate, and the interval says how rough.
    """
    _check_pairs(hypotheses, references)
    if len(sources) != len(hypotheses):
        raise ValueError(f"{len(sources)} sources but {len(hypotheses)} hypotheses.")
    words = np.array([len(s.split()) for s in sources])
    rows = []
    for first, last in bins:
        chosen = np.flatnonzero((words >= first) & (words <= (last if last else words.max())))
        hyps = [hypotheses[i] for i in chosen]
        refs = [references[i] for i in chosen]
        scores = corpus_scores(hyps, refs, n_bootstrap=n_bootstrap) if len(chosen) else {}
        rows.append(
            {
                "words": length_bin_name(first, last),
                "count": int(len(chosen)),
                "bleu": scores.get("bleu"),
                "bleu_ci95": scores.get("bleu_ci95"),
                "chrf": scores.get("chrf"),
            }
        )
    return rows


def format_length_table(rows: Sequence[dict[str, Any]], total: dict[str, Any]) -> list[str]:
    """Markdown lines of `bleu_by_length` rows, then the whole set (`total`: count, bleu, chrf,
    optionally bleu_ci95). BLEU reads "15.47 ± 5.12" where the row has its 95 % interval."""
    cell = lambda x: "-" if x is None else f"{x:.2f}"

    def bleu(row: dict[str, Any]) -> str:
        ci = row.get("bleu_ci95")
        return cell(row["bleu"]) + ("" if ci is None or row["bleu"] is None else f" ± {ci:.2f}")

    lines = ["| source words | pairs | BLEU (± 95 % interval) | chrF |", "|---|---|---|---|"]
    for row in [*rows, {"words": "all", **total}]:
        lines.append(f"| {row['words']} | {row['count']:,} | {bleu(row)} | {cell(row['chrf'])} |")
    return lines


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus BLEU (0–100; 13a tokenisation, 4-grams) with one reference each."""
    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus chrF (0–100; character 6-grams, β = 2) with one reference each."""
    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)
