"""Input lines for translate: split on `\\n` only, invalid UTF-8 replaced, control characters out.

`str.splitlines()` also splits on `\\r`, `\\v`, `\\f`, `\\x1c`-`\\x1e`, U+0085, U+2028 and U+2029,
so a file with any of those gave more outputs than it has lines, and the outputs no longer
lined up with the inputs. Lines here are what `wc -l` and `paste` count: split on `\\n`,
with a `\\r` before it (a `\\r\\n` file) removed. Whatever control characters remain (C0
and C1 controls, ANSI escape sequences, a lone `\\r`, U+2028/U+2029) become a space before
tokenisation (`data.text_form.clean_text`), so they reach neither the model nor the
terminal.
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


def decode_lines(data: bytes) -> tuple[list[str], list[int]]:
    """(lines, numbers of the lines that were not valid UTF-8), lines as in `split_lines`.

    Each line is decoded on its own, so one bad byte costs one line's characters (each
    invalid byte becomes U+FFFD) and not the whole input; line numbers start at 1.
    """
    lines, invalid = [], []
    for number, raw in enumerate(split_lines(data), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(raw.decode("utf-8", errors="replace"))
            invalid.append(number)
    return lines, invalid
