"""The forms a sentence's text takes between a user and the model, and back.

- Raw input -> one clean line: `clean_text` (ANSI escapes removed, every other control
  character a space), before any tokenisation, in translate, evaluate and the CTranslate2
  engine alike; `input_form` then gives it the form the data stores.
- The book's form (d2l §10.5 `preprocess_nmt`: lowercased, `, . ! ?` spaced off) for
  fra_eng and any dataset with `data.book_preprocessing`: `book_style(config)` says whether
  a run's text has it; `detokenize_book` joins the punctuation back, as sacreBLEU should
  score it.

Text-to-read forms with capitals restored are `data.truecasing`'s.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from transformer_jax.data.config import is_book_style
from transformer_jax.data.preprocessing import preprocess_nmt
from transformer_jax.data.typography import with_plain_forms

# ANSI escape sequences, removed whole (not only their ESC): CSI ("ESC [ ... final byte"),
# OSC ("ESC ] ... BEL or ESC \\"), and two-character escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI, e.g. colours: ESC[31m
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, e.g. a window title
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the one-byte (C1) CSI
)
_SEPARATORS = ("Zl", "Zp")  # U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR

# The book's preprocessing puts a space before , . ! ? (`"go."` -> `"go ."`); undo it.
_SPACED_PUNCTUATION = re.compile(r" ([,.!?])")


def clean_text(text: str) -> str:
    """`text` with ANSI escapes removed and every other control character (Unicode category
    Cc: C0, DEL, C1 incl. U+0085; and U+2028/U+2029) replaced by a space."""
    text = _ANSI.sub("", text)
    return "".join(
        " " if unicodedata.category(ch) == "Cc" or unicodedata.category(ch) in _SEPARATORS else ch
        for ch in text
    )


def input_form(text: str, *, book: bool, plain: Mapping[str, str] | None = None) -> str:
    """Raw input (a source, or a target prefix) -> the form the data stores.

    `clean_text`, stripped; then a source's typography the tokenizer cannot read made plain
    (`plain`: `typography.plain_forms` of the source tokenizer; None for a prefix); then,
    for book-style data, NFKC and the book's preprocessing. NFKC first because SentencePiece
    reads text in NFKC anyway, after the preprocessing has spaced the punctuation: without it
    "wait…" and "keys．" kept their "..." and "." unspaced, tokens the model never saw
    there. Already prepared text is unchanged.
    """
    text = with_plain_forms(clean_text(text).strip(), plain or {})
    if not book or not text:
        return text
    return preprocess_nmt(unicodedata.normalize("NFKC", text))


def book_style(config: Any) -> bool:
    """Whether a run config's text went through the book's preprocessing (spaced punctuation)."""
    return is_book_style(config.data)


def detokenize_book(text: str) -> str:
    """Undo the book's punctuation spacing: `"je suis chez moi ."` -> `"je suis chez moi."`."""
    return _SPACED_PUNCTUATION.sub(r"\1", text)
