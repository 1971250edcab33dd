"""What a text stream's encoding can hold: translate refuses before decoding, reports escape.

A stream's encoding comes from the locale (`LC_ALL=C`: ASCII; `fr_FR.ISO-8859-1`: Latin-1)
unless PYTHONIOENCODING or Python's UTF-8 mode says otherwise, and a character it cannot hold
raises `UnicodeEncodeError` where it is written. Two kinds of output meet that differently:

- translations are the output itself, and a French one on an ASCII stdout failed only after
  every line was decoded, losing them all. translate checks first (`check_translations_fit`)
  that the stream holds every character the model can write (`output_characters`: the
  target vocabulary's), and names the fixes; an ASCII vocabulary on an ASCII stdout passes.
- reports and summaries printed to a terminal are also written to files (UTF-8), so there a
  character the terminal cannot show ("±", "α") is printed as a backslash escape
  (`printable`; `lenient_stdout` for a launcher's whole stdout).

Files the project writes are UTF-8 whatever the locale (`output_file.open_output`).
"""

from __future__ import annotations

import codecs
import collections
import functools
import sys
import unicodedata
from collections.abc import Iterable
from typing import Any, TextIO

from transformer_jax.data import vocab
from transformer_jax.data.tokenizers import Tokenizer
from transformer_jax.data.truecasing import Truecaser

# Error handlers that never raise on a character the encoding lacks: a stream set up with one
# (PYTHONIOENCODING=ascii:backslashreplace) has chosen what it gets. The C locale's stdout
# uses "surrogateescape", which still raises for any character that is not an escaped byte.
_LENIENT = frozenset({"replace", "ignore", "backslashreplace", "xmlcharrefreplace", "namereplace"})
# Pieces that are no text: the framework's special tokens and other conventions' names.
_SPECIAL_PIECES = frozenset(
    {*vocab.SPECIAL_TOKENS, "<unk>", "<pad>", "<s>", "</s>", "<eos>", "<bos>"}
)
WORD_MARKER = "\u2581"  # SentencePiece's "▁": a space when decoded
EXAMPLES = 3  # characters named in the error


class OutputEncodingError(ValueError):
    """The output stream's encoding cannot hold what would be written to it (a ValueError:
    translate prints it as one FATAL line)."""


def strict_encoding(stream: Any) -> str | None:
    """The codec name of `stream`'s encoding ("ascii", "iso8859-1", "utf-8") if writing a
    character it lacks raises; None for a stream without an encoding (io.StringIO holds
    any text) or with a lenient error handler."""
    encoding = getattr(stream, "encoding", None)
    if not encoding or getattr(stream, "errors", None) in _LENIENT:
        return None
    try:
        return codecs.lookup(encoding).name
    except LookupError:  # an encoding Python does not know: writing says so itself
        return None


def unencodable(characters: Iterable[str], encoding: str) -> list[str]:
    """The characters among `characters` that `encoding` cannot encode, in their order."""
    characters = list(characters)
    try:
        "".join(characters).encode(encoding)  # the common case at once: all fit
        return []
    except UnicodeEncodeError:
        pass
    missing = []
    for character in characters:
        try:
            character.encode(encoding)
        except UnicodeEncodeError:
            missing.append(character)
    return missing


def vocabulary_characters(tokenizer: Tokenizer) -> collections.Counter[str]:
    """{character: number of vocabulary entries holding it} of the text `tokenizer` can
    decode: its pieces (words) without SentencePiece's word marker "▁" and without special
    tokens (`<pad>`, `<unk>`, ...). The counts put a language's common letters first."""
    return collections.Counter(_vocabulary_characters(tokenizer))


@functools.lru_cache(maxsize=8)
def _vocabulary_characters(tokenizer: Tokenizer) -> dict[str, int]:
    """`vocabulary_characters`, read once per tokenizer (~6 ms for 4000 pieces): translate's
    stream checks each chunk's output against it."""
    counts: collections.Counter[str] = collections.Counter()
    for index in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_token(index)
        if index < vocab.NUM_SPECIAL or piece in _SPECIAL_PIECES:
            continue
        counts.update(set(piece.replace(WORD_MARKER, "")))
    return dict(counts)


def output_characters(
    tokenizer: Tokenizer, truecaser: Truecaser | None = None, sources: Iterable[str] = ()
) -> collections.Counter[str]:
    """The characters translate may write: the target vocabulary's (`vocabulary_characters`),
    with a `truecaser` (natural text) their capitals and its learned forms' too ("é" -> "É"),
    and those of `sources` (TSV output echoes them)."""
    counts = vocabulary_characters(tokenizer)
    if truecaser is not None:
        counts.update(u for c in list(counts) for u in c.upper() if u not in counts)
        counts.update(c for form in truecaser.forms.values() for c in form if c not in counts)
    counts.update(c for source in sources for c in source if c not in counts)
    return counts


def stream_name(stream: Any) -> str:
    """ "stdout" for the process's standard output, else the stream's file name."""
    if stream is sys.stdout or stream is sys.__stdout__:
        return "stdout"
    return str(getattr(stream, "name", "the output"))


def encoding_problem(stream: Any, examples: Iterable[str], more: int = 0) -> str:
    """The message for `stream`, whose encoding cannot hold `examples` (and `more` other
    characters): what its encoding is and the three ways out."""
    # The code point and name too: a stderr of the same encoding shows "é" as "\xe9".
    named = ", ".join(f"{c!r} (U+{ord(c):04X} {unicodedata.name(c, '?')})" for c in examples)
    others = f" and {more} other character{'s' if more != 1 else ''}" if more else ""
    encoding = getattr(stream, "encoding", "?")
    canonical = strict_encoding(stream)
    spelled = encoding if canonical in (None, encoding) else f"{encoding} ({canonical})"
    return (
        f"{stream_name(stream)}'s encoding is {spelled}, set by the locale or "
        f"PYTHONIOENCODING, which cannot hold {named}{others} that the translations may "
        "contain. Use a UTF-8 locale (e.g. LC_ALL=C.UTF-8), or set PYTHONIOENCODING=utf-8, "
        "or write the translations with --output_file=FILE (always UTF-8)."
    )


def check_translations_fit(stream: TextIO, characters: collections.Counter[str]) -> None:
    """An `OutputEncodingError` naming `stream`'s encoding, the most common of `characters`
    it cannot hold, and the fixes, unless it holds them all (a file of `open_output`, a
    UTF-8 stdout and an ASCII model on an ASCII stdout do). Called before decoding: the
    alternative is a failure at the first write, after all the work."""
    encoding = strict_encoding(stream)
    if encoding is None:
        return
    missing = unencodable(characters, encoding)
    if missing:
        missing.sort(key=lambda c: (-characters[c], c))
        shown = missing[:EXAMPLES]
        raise OutputEncodingError(encoding_problem(stream, shown, len(missing) - len(shown)))


def printable(text: str, stream: Any = None) -> str:
    """`text` with each character `stream` (default sys.stdout) cannot encode written as a
    backslash escape ("±" -> "\\xb1"): for a report printed to a terminal and also written
    to a file, where an escape is better than a traceback that loses the rest."""
    encoding = strict_encoding(sys.stdout if stream is None else stream)
    if encoding is None or not unencodable(set(text), encoding):
        return text
    return text.encode(encoding, "backslashreplace").decode(encoding)


def lenient_stdout() -> None:
    """sys.stdout prints a character its (non-UTF-8) encoding lacks as a backslash escape
    instead of raising: for launchers whose stdout shows what is also written to files
    (train's closing report, evaluate's report, sweep's table). Not for translate: its
    stdout is the translations themselves, refused up front (`check_translations_fit`)."""
    encoding = strict_encoding(sys.stdout)
    if encoding is not None and encoding != "utf-8" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
