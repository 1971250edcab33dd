"""`benchmarks.length_gap`: rare-word rates by source length and the pairs of human translations."""

import pytest

from benchmarks.length_gap import format_rare_rows, rare_word_rows, reference_pairs
from transformer_jax.evaluation.bleu import LENGTH_BINS

TRAIN = [("a b .", "x y ."), ("a c .", "x z ."), ("a b c .", "x y z .")]


def _words(source: str) -> int:
    return len(source.replace(" .", "").split())  # punctuation is not a word, as detokenised


def test_rare_word_rows_count_unseen_and_rare_tokens_per_length_row():
    test = [
        ("a b .", "x y ."),  # 2 words: every token seen (a 3x, b 2x, . 3x)
        ("a q .", "x w ."),  # 2 words: q and w unseen
        (" ".join("a b c d e f g h i j k l m n o p".split()) + " .", "x ."),  # 16 words
    ]
    rows = rare_word_rows(TRAIN, test, rare=2, words_of=_words, bins=LENGTH_BINS)
    assert [r["words"] for r in rows] == ["1-5", "6-10", "11-15", "16+"]
    short, middle, _, long_ = rows
    assert short["pairs"] == 2 and long_["pairs"] == 1
    assert short["src_unseen"] == pytest.approx(100 * 1 / 6)  # q, of a b . a q .
    # seen <= 2 times: b (2x) and q (0x); a and "." (3x each) are common
    assert short["src_rare"] == pytest.approx(100 * 2 / 6)
    assert short["pairs_with_rare_src"] == pytest.approx(100.0)  # both hold b or q
    assert short["tgt_unseen"] == pytest.approx(100 * 1 / 6)  # w
    assert long_["src_unseen"] == pytest.approx(100 * 13 / 17)  # d..p unseen; a b c . seen
    assert middle["pairs"] == 0 and middle["src_unseen"] is None
    lines = format_rare_rows(rows, rare=2)
    assert len(lines) == 2 + 4 and lines[2].startswith("| 1-5 | 2 | 16.67 % |")
    assert "| 6-10 | 0 | - |" in lines[3]


def test_reference_pairs_keep_sources_with_two_distinct_translations_first_two_in_order():
    pairs = [
        ("go .", "va !"),
        ("hi .", "salut ."),
        ("go .", "va !"),  # a repeat is not a second translation
        ("go .", "allez !"),
        ("go .", "file !"),  # a third is ignored
        ("run .", "cours !"),
    ]
    assert reference_pairs(pairs) == (["go ."], ["va !"], ["allez !"])
    assert reference_pairs([("a .", "b ."), ("a .", "b .")]) == ([], [], [])


def test_a_directory_that_is_no_run_is_one_fatal_line_naming_the_fix(tmp_path, capsys):
    from benchmarks.length_gap import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--workdir", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("FATAL:") and "experiments.train" in err
