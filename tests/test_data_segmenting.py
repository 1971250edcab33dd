"""`data.segmenting`: long inputs cut at sentence ends into parts that fit a length."""

import numpy as np
import pytest

from transformer_jax.data.segmenting import (
    cut_sentences,
    join_translations,
    pack_sentences,
    segment,
)


def words(text: str) -> int:
    """Tokens with <eos> of a whitespace tokenizer."""
    return len(text.split()) + 1


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("go . i lost .", ["go .", "i lost ."]),  # the book's spaced punctuation
        ("Go. I lost!  He's calm?", ["Go.", "I lost!", "He's calm?"]),  # raw text
        ("wait . . . ok then", ["wait . . .", "ok then"]),  # the book's spaced ellipsis
        ("what ?! no … yes", ["what ?!", "no …", "yes"]),
        ('he said "go." then left', ['he said "go."', "then left"]),  # closing quote kept
        ("pi is 3.14 . e is 2.72", ["pi is 3.14 .", "e is 2.72"]),  # no cut inside a number
        ("no end here", ["no end here"]),
        ("  ", []),
        # A run of marks at the end of the text is one end, not a sentence and a stray "!".
        ("stop ! ! !", ["stop ! ! !"]),
        ("how are you ? ? ? fine .", ["how are you ? ? ?", "fine ."]),
        ("i'm here . . .", ["i'm here . . ."]),
        # Punctuation after a closing bracket ends the sentence with it.
        ("i saw it (really !) . then i left .", ["i saw it (really !) .", "then i left ."]),
        # "?" or "!" closed by a quote, a word after it: the sentence goes on.
        ('tom said "go !" and left .', ['tom said "go !" and left .']),
        ("i saw it (really !) and left .", ["i saw it (really !) and left ."]),
        # ... but a quote after it opens the next sentence (a dialogue).
        ('"how\'s it going ?" "not too bad ."', ['"how\'s it going ?"', '"not too bad ."']),
        # A piece without a letter or digit joins its neighbour.
        (". . . hello . bye .", [". . . hello .", "bye ."]),
        (". . .", [". . ."]),
    ],
)
def test_cut_sentences(text, sentences):
    assert cut_sentences(text) == sentences


def test_pack_sentences_is_greedy_and_counts_one_eos_per_part():
    sentences = ["a b .", "c .", "d e f g .", "h ."]
    lengths = [words(s) for s in sentences]  # 4, 3, 6, 3
    # "a b . c ." = 5 tokens + <eos> = 6 <= 6; "d e f g ." alone = 6; then "h ." (3).
    assert pack_sentences(sentences, lengths, 6) == ["a b . c .", "d e f g .", "h ."]
    assert pack_sentences(sentences, lengths, 100) == ["a b . c . d e f g . h ."]
    # A sentence longer than the limit is a part of its own, never cut.
    assert pack_sentences(sentences, lengths, 3) == ["a b .", "c .", "d e f g .", "h ."]
    with pytest.raises(ValueError, match="3 sentences but 2 lengths"):
        pack_sentences(sentences[:3], lengths[:2], 6)


def test_segment_leaves_fitting_and_single_sentence_inputs_whole():
    assert segment("go . i lost .", words, 6) == ["go . i lost ."]  # 6 tokens fit
    one_long = " ".join(["go"] * 30) + " ."
    assert segment(one_long, words, 8) == [one_long]  # nothing to cut at
    with pytest.raises(ValueError, match="limit must be >= 1"):
        segment("go .", words, 0)


def test_segments_fit_the_limit_and_rejoin_to_the_input():
    """Random paragraphs: every part of several sentences fits, parts are as few as greedy
    packing allows, and joined they are the input's sentences in order."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        sentences = [
            " ".join(["w"] * int(rng.integers(1, 12))) + " " + str(rng.choice([".", "!", "?"]))
            for _ in range(int(rng.integers(1, 10)))
        ]
        text = " ".join(sentences)
        limit = int(rng.integers(4, 40))
        parts = segment(text, words, limit)
        assert " ".join(parts) == text
        if words(text) <= limit or len(sentences) == 1:
            assert parts == [text]
            continue
        for part in parts:
            assert words(part) <= limit or len(cut_sentences(part)) == 1
        for left, right in zip(parts, parts[1:], strict=False):  # greedy: no two parts merge
            first_of_right = cut_sentences(right)[0]
            assert words(left) + words(first_of_right) - 1 > limit


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("mr . smith left . he won't come back .", ["mr . smith left .", "he won't come back ."]),
        ("Dr. Who is here. So is Mrs. Hudson.", ["Dr. Who is here.", "So is Mrs. Hudson."]),
        ("j . k . rowling wrote it . i read it .", ["j . k . rowling wrote it .", "i read it ."]),
        (
            "fruit , e .g . apples . neither do i . no . so a .",
            ["fruit , e .g . apples .", "neither do i .", "no .", "so a ."],
        ),  # fmt: skip
    ],
)
def test_abbreviations_and_initials_do_not_end_sentences(text, sentences):
    assert cut_sentences(text) == sentences


def test_join_translations_leaves_no_gap_for_an_empty_part():
    assert join_translations(["va !", "", "je suis là ."]) == "va ! je suis là ."
    assert join_translations(["", ""]) == ""


def test_join_translations_collapses_runs_of_spaces_but_keeps_no_break_spaces():
    # A lone word-boundary piece before another decodes to two spaces ("peu  rien").
    assert join_translations(["à peu  rien !", "  ", "oui   "]) == "à peu rien ! oui"
    assert join_translations(["bonjour\u202f!"]) == "bonjour\u202f!"
