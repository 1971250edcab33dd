"""translate keeps its output lined up with its input (issues 18, 19): lines split on "\\n"
only, invalid UTF-8 replaced (and named), control characters out of the input and off the
terminal; plain or tsv output, one line per input line."""

from __future__ import annotations

import io

import pytest

from transformer_jax.data.text_form import clean_text
from transformer_jax.evaluation.output_file import write_lines
from transformer_jax.evaluation.text_lines import decode_lines, split_lines
from transformer_jax.evaluation.translate_cli import (
    STDIN_PROMPT,
    check_format,
    format_lines,
    read_sentences,
)

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


def test_bytes_split_like_text_and_each_line_decodes_alone():
    assert split_lines(b"a\r\n\nb\n") == [b"a", b"", b"b"]
    lines, invalid = decode_lines(b"ok\ncaf\xe9\n\xff\xfe\n\xc3\xa9t\xc3\xa9\n")
    assert lines == ["ok", "caf\ufffd", "\ufffd\ufffd", "\u00e9t\u00e9"]
    assert invalid == [2, 3]  # 1-based, the lines a user would count


def test_invalid_utf8_is_replaced_with_a_warning_naming_the_lines(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"go .\ni lost \xe9 .\n\nhe's calm .\n")
    stderr = io.StringIO()
    assert read_sentences([], str(path), stderr=stderr) == [
        "go .", "i lost \ufffd .", "", "he's calm ."
    ]  # fmt: skip
    assert f"{path}: line 2 not valid UTF-8" in stderr.getvalue()
    stdin = io.TextIOWrapper(io.BytesIO(b"\xff\na\n\xfe\n"), encoding="utf-8")
    stderr = io.StringIO()
    assert read_sentences([], None, stdin, stderr=stderr) == ["\ufffd", "a", "\ufffd"]
    assert "stdin: lines 1, 3 not valid UTF-8" in stderr.getvalue()
    quiet = io.StringIO()
    read_sentences([], None, io.TextIOWrapper(io.BytesIO(b"a\n")), stderr=quiet)
    assert quiet.getvalue() == ""


class _Terminal(io.BytesIO):
    def isatty(self):
        return True


def test_a_terminal_on_stdin_is_told_how_to_end_the_input():
    stderr = io.StringIO()
    stdin = io.TextIOWrapper(_Terminal(b"go .\n"), encoding="utf-8")
    assert read_sentences([], None, stdin, stderr=stderr) == ["go ."]
    assert stderr.getvalue() == STDIN_PROMPT + "\n" and "Ctrl-D" in STDIN_PROMPT
    piped = io.StringIO()
    read_sentences([], None, io.TextIOWrapper(io.BytesIO(b"go .\n")), stderr=piped)
    assert piped.getvalue() == ""  # a pipe or file gets no prompt


def test_plain_and_tsv_output_one_line_per_input():
    sources = ["go .", "", "i\tlost\x1b[1m .", "x"]
    translations = ["va !", "", "j'ai\nperdu .", " "]
    assert format_lines(sources, translations) == ["va !", "", "j'ai perdu .", ""]
    assert format_lines(sources, translations, "tsv") == [
        "go .\tva !", "\t", "i lost .\tj'ai perdu .", "x\t"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="--format='json'; choose one of plain, tsv"):
        check_format("json")


def test_write_lines_to_a_file_or_stdout(tmp_path):
    path = tmp_path / "out.txt"
    write_lines(["va !", "", "ça"], path, io.StringIO())
    assert path.read_bytes() == "va !\n\nça\n".encode()
    stdout = io.StringIO()
    write_lines(["a", ""], None, stdout)
    assert stdout.getvalue() == "a\n\n"
