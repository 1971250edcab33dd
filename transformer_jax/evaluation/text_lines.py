"""Input lines for translate: split on `\\n` only, invalid UTF-8 replaced, control characters out.

`str.splitlines()` also splits on `\\r`, `\\v`, `\\f`, `\\x1c`-`\\x1e`, U+0085, U+2028 and U+2029,
so a file with any of those gave more outputs than it has lines, and the outputs no longer
lined up with the inputs. Lines here are what `wc -l` and `paste` count: split on `\\n`,
with a `\\r` before it (a `\\r\\n` file) removed. Whatever control characters remain (C0
and C1 controls, ANSI escape sequences, a lone `\\r`, U+2028/U+2029) become a space before
tokenisation (`data.text_form.clean_text`), so they reach neither the model nor the
terminal. A UTF-8 byte-order mark that starts the input (Windows editors write one) is
dropped: it is a mark of the file, not text of its first line. A command-line argument holds
the bytes it was given: bytes that are not UTF-8 come to Python as lone surrogates
(`surrogateescape`), which no tokenizer takes; `argument_text` reads them as a file's.
"""

from __future__ import annotations

from typing import AnyStr


def split_lines(text: AnyStr) -> list[AnyStr]:
    """Lines of a text file or stream (str or bytes): split on `\\n` only, a trailing `\\r`
    of each removed.

    The `\\n` that ends the last line does not start another one, so "a\\n\\nb\\n" has three
    lines ("a", "", "b"); other separators stay inside their line (see `data.text_form.clean_text`).
    """
    newline, cr = ("\n", "\r") if isinstance(text, str) else (b"\n", b"\r")
    if not text:
        return []
    lines = text.split(newline)
    if not lines[-1]:
        lines.pop()  # the file's final newline
    return [line[:-1] if line.endswith(cr) else line for line in lines]


BOM = b"\xef\xbb\xbf"  # U+FEFF encoded in UTF-8


def decode_lines(data: bytes, *, start: bool = True) -> tuple[list[str], list[int]]:
    """(lines, numbers of the lines that were not valid UTF-8), lines as in `split_lines`.

    Each line is decoded on its own, so one bad byte costs one line's characters (each
    invalid byte becomes U+FFFD) and not the whole input; line numbers start at 1. `start`:
    `data` begins the input, so a byte-order mark there is dropped (a stream's later chunks:
    False).
    """
    if start and data.startswith(BOM):
        data = data[len(BOM) :]
    lines, invalid = [], []
    for number, raw in enumerate(split_lines(data), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(raw.decode("utf-8", errors="replace"))
            invalid.append(number)
    return lines, invalid


def argument_text(text: str) -> tuple[str, bool]:
    """(`text` as valid Unicode, whether it already was): a command-line argument's bytes
    that were not UTF-8 (lone surrogates U+DC80-U+DCFF, Python's `surrogateescape`) decoded as
    `decode_lines` decodes a line, each invalid byte U+FFFD; any other lone surrogate
    U+FFFD too."""
    try:
        text.encode("utf-8")
        return text, True
    except UnicodeEncodeError:
        pass
    raw = b"".join(
        ch.encode("utf-8", "surrogateescape") if "\udc80" <= ch <= "\udcff" else
        "\ufffd".encode() if "\ud800" <= ch <= "\udfff" else ch.encode("utf-8")
        for ch in text
    )  # fmt: skip
    return raw.decode("utf-8", errors="replace"), False
