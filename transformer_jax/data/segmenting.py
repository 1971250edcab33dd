"""Inputs of several sentences -> parts of whole sentences, translated one by one.

A model translates inputs like those it learnt from: single sentences, mostly short (99.9 %
of the README model's training sources have at most 32 tokens). Given a paragraph as one
line it stops early or drops sentences; translation systems therefore segment their input
into sentences first (Moses' split-sentences, sacremoses, Marian's and CTranslate2's
servers). Here an input longer than `limit` tokens is cut after sentence-ending punctuation
that is followed by whitespace, and consecutive sentences are packed greedily into parts of
at most `limit` tokens. limit 1 (the default of `eval.segment_len`) translates every sentence
on its own, which scored best (benchmarks/LOG.md, "paragraphs"); a larger limit keeps
sentences together as context. A single sentence longer than the limit stays whole: it has
no sentence end to cut at. A full stop after a known abbreviation ("mr .", "e.g .") or a
single letter (an initial) is not a sentence end.

Pure Python (no JAX): the JAX and CTranslate2 engines both use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Sentence-ending punctuation (a run of it, spaced or not: "?!", "...", the book's ". . ."),
# then closing quotes or brackets and any punctuation after them ("(really !) ."), then
# whitespace or the end of the text: a run is never split, so no part is punctuation alone
# ("stop ! ! !" is one sentence, not "stop ! !" and "!"). "3.5" and "e.g." inside a word are
# not ends.
_CLOSERS = "\"'»”’)]"
_SENTENCE_END = re.compile(
    rf"[.!?…]+(?:\s+[.!?…]+)*[{re.escape(_CLOSERS)}]*(?:\s*[.!?…]+)*(?=\s|$)"
)
# Two or more ASCII spaces in a translation (join_translations makes them one).
_SPACES = re.compile(r" {2,}")
# Words whose full stop rarely ends an English sentence (lowercase, without the stop).
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr mt vs etc cf vol fig approx jan feb mar apr jun jul aug sep "
    "sept oct nov dec".split()
)


def _is_abbreviation(text: str, end: re.Match) -> bool:
    """Whether the end is a lone "." after an abbreviation or an initial ("j . k . rowling";
    "i" and "a" are words). The book's spacing turns "e.g." into "e .g .": "g" an initial."""
    if end.group().strip() != ".":
        return False
    words = text[: end.start()].split()
    word = words[-1].lower().strip(".") if words else ""
    initial = len(word) == 1 and word.isalpha() and word not in "ia"
    return word in ABBREVIATIONS or initial


def _is_quoted_exclamation(text: str, end: re.Match) -> bool:
    """Whether the end is "?" or "!" closed by a quote or bracket, then a word: 'tom said
    "go !" and left .' and "i saw it (really !) and left ." go on (as `truecasing` reads
    them). A quote after it opens another sentence: '"how's it going ?" "not bad ."'."""
    marks = end.group().rstrip(_CLOSERS)
    after = text[end.end() :].lstrip()[:1]
    return marks != end.group() and marks.rstrip()[-1:] in "?!" and after.isalnum()


def cut_sentences(text: str) -> list[str]:
    """Sentences of `text`, cut after sentence-ending punctuation followed by whitespace.

    "go . i lost ." -> ["go .", "i lost ."]; "wait . . . ok" -> ["wait . . .", "ok"];
    "mr . smith left ." -> one sentence; 'he said "go !" and left .' -> one sentence; a text
    without such an end -> [text] (stripped). Empty pieces are dropped, and a piece with no
    letter or digit (stray punctuation: ". . . ok" begins with one) joins its neighbour:
    translated alone it would come back as a sentence the input does not have.
    """
    pieces, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        if _is_abbreviation(text, end) or _is_quoted_exclamation(text, end):
            continue
        pieces.append(text[start : end.end()].strip())
        start = end.end()
    pieces.append(text[start:].strip())
    out: list[str] = []
    for piece in (piece for piece in pieces if piece):
        if out and not _has_word(out[-1]):
            out[-1] = f"{out[-1]} {piece}"  # a leading stray joins the next sentence
        elif out and not _has_word(piece):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _has_word(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def pack_sentences(sentences: list[str], lengths: list[int], limit: int) -> list[str]:
    """Consecutive sentences joined (with a space) into parts of at most `limit` tokens.

    lengths: each sentence's tokens with `<eos>`; a part of several sentences counts each
      sentence's tokens without `<eos>`, plus one `<eos>` (exact for tokenizers that never
      join tokens across whitespace: SentencePiece's default and the word tokenizer).
    Greedy, left to right: a sentence starts a new part when adding it would exceed `limit`;
    a sentence longer than `limit` is a part of its own.
    """
    if len(sentences) != len(lengths):
        raise ValueError(f"{len(sentences)} sentences but {len(lengths)} lengths.")
    parts: list[list[str]] = []
    tokens = 0  # of the current part, with its <eos>
    for sentence, length in zip(sentences, lengths, strict=True):
        if parts and tokens + length - 1 <= limit:
            parts[-1].append(sentence)
            tokens += length - 1
        else:
            parts.append([sentence])
            tokens = length
    return [" ".join(part) for part in parts]


def segment(text: str, count_tokens: Callable[[str], int], limit: int) -> list[str]:
    """`text` as parts of at most `limit` tokens cut at sentence ends; [text] if it fits.

    count_tokens: a text's tokens with `<eos>` (the source tokenizer's `encode_text`).
    The parts, joined with spaces, are the text's sentences in order; a text that needs no
    cut, or has no sentence end to cut at, comes back as [text].
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1 token, got {limit}.")
    if count_tokens(text) <= limit:
        return [text]
    sentences = cut_sentences(text)
    if len(sentences) < 2:
        return [text]
    parts = pack_sentences(sentences, [count_tokens(s) for s in sentences], limit)
    return parts if len(parts) > 1 else [text]


def join_translations(parts: list[str]) -> str:
    """The parts' translations as one line: joined by spaces, an empty one leaving no gap.

    Runs of spaces inside a part become one: a model can emit a word-boundary piece on its
    own (SentencePiece's "▁" before "▁rien" decodes to "peu  rien"), which no reader wants.
    Only ASCII spaces are touched; a no-break space (French typography) is kept.
    """
    spaced = (_SPACES.sub(" ", part).strip(" ") for part in parts)
    return " ".join(part for part in spaced if part)
