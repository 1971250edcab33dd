"""translate keeps its output lined up with its input (issue 19): lines split on "\\n" only,
control characters out of the input and off the terminal."""

from __future__ import annotations

import io

import pytest

from transformer_jax.evaluation.text_lines import clean_text, split_lines
from transformer_jax.evaluation.translate_cli import read_sentences

# Every character str.splitlines() breaks a line at, except "\n" and "\r\n".
SEPARATORS = ["\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_only_newline_splits_lines(separator):
    text = f"go .\ni{separator}lost .\nhe's calm .\n"
    assert len(text.splitlines()) == 4  # the old reader's count
    lines = split_lines(text)
    assert len(lines) == 3
    assert lines[0] == "go ." and lines[2] == "he's calm ."
    assert clean_text(lines[1]) == "i lost ."


def test_crlf_blank_lines_and_the_final_newline():
    assert split_lines("a\r\n\r\nb\r\n") == ["a", "", "b"]
    assert split_lines("a\n\nb") == ["a", "", "b"]
    assert split_lines("a\n\n") == ["a", ""]  # a blank last line is a line: one output each
    assert split_lines("") == []
    assert split_lines("\n") == [""]


def test_read_sentences_from_a_file_and_stdin_bytes(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes("go .\r\ni\x0clost .\n\nx\u2028y\n".encode())
    assert read_sentences([], str(path)) == ["go .", "i\x0clost .", "", "x\u2028y"]
    # A text-mode stdin would turn a lone "\r" into a line break: the bytes are read instead.
    stdin = io.TextIOWrapper(io.BytesIO(b"a\rb\nc\n"), encoding="utf-8")
    assert read_sentences([], None, stdin) == ["a\rb", "c"]
    assert read_sentences([], "-", io.StringIO("a\nb")) == ["a", "b"]


def test_an_argument_with_a_newline_is_one_sentence():
    assert read_sentences(["go .\ni lost .", "x"]) == ["go .\ni lost .", "x"]
    assert clean_text("go .\ni lost .") == "go . i lost ."


def test_control_characters_never_pass():
    raw = "\x1b[31mred\x1b[0m \x1b]0;title\x07go\x07 .\r\x00\x7f\x9b2J\u2029"
    cleaned = clean_text(raw)
    assert cleaned.split() == ["red", "go", "."]
    assert all(ch.isprintable() or ch == " " for ch in cleaned)
    assert clean_text("déjà vu — ça va ?") == "déjà vu — ça va ?"  # text is untouched
