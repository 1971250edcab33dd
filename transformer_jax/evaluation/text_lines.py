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
    """(`text` as valid Unicode, whether its bytes were valid UTF-8): a command-line argument
    whose bytes the locale could not decode (lone surrogates U+DC80-U+DCFF, Python's
    `surrogateescape`) has them read as UTF-8, as `decode_lines` reads a line; invalid bytes
    become U+FFFD, as does any other lone surrogate.

    Under an ASCII locale (`LC_ALL=C`) every non-ASCII byte is escaped, valid UTF-8 ("où")
    too: the bytes are put back together and decoded strictly first, so such an argument is
    valid and no warning names it."""
    try:
        text.encode("utf-8")
        return text, True
    except UnicodeEncodeError:
        pass
    other_surrogate = False

    def raw(ch: str) -> bytes:
        nonlocal other_surrogate
        if "\udc80" <= ch <= "\udcff":
            return ch.encode("utf-8", "surrogateescape")  # the byte the locale could not read
        if "\ud800" <= ch <= "\udfff":
            other_surrogate = True
            return "\ufffd".encode()
        return ch.encode("utf-8")

    data = b"".join(raw(ch) for ch in text)
    try:
        return data.decode("utf-8"), not other_surrogate
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), False
