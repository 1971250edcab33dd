"""Typographic punctuation a source tokenizer never saw -> the plain forms it learnt.

A reader types or pastes smart quotes and the one-character ellipsis (“yes”, ‘no’, wait…);
a corpus may be written in ASCII punctuation only (the book's fra-eng English side has 0 “ ”
and 0 … against 1,360 '"' and hundreds of "..."). The tokenizer reads such a character as
`<unk>`, and the README model then made up words: 'He said “yes”.' -> "Il a dit que les
évolissser." against 'He said "yes".' -> "Il a dit oui.". So a source's character that the
tokenizer reads as `<unk>` becomes its plain form when the tokenizer knows that one
(`plain_forms`, from the tokenizer, so a corpus that does use « » or … keeps them). Only
sources: a target-side prefix is in the target's own typography.

Pure Python (no JAX): the JAX and CTranslate2 engines both use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformer_jax.data.vocab import UNK_ID

# Typographic characters and the plain (ASCII) forms a corpus may write instead.
PLAIN = {
    "“": '"', "”": '"', "„": '"', "‟": '"', "«": '"', "»": '"', "″": '"',
    "‘": "'", "’": "'", "‚": "'", "‛": "'", "′": "'",
    "…": "...", "–": "-", "—": "-", "‐": "-", "‑": "-", "−": "-",
}  # fmt: skip


def plain_forms(tokenizer: Any) -> dict[str, str]:
    """{character: plain form} for the `PLAIN` characters `tokenizer` reads as `<unk>` whose
    plain form it reads without one."""
    unknown = lambda text: UNK_ID in tokenizer.encode(text)
    return {ch: plain for ch, plain in PLAIN.items() if unknown(ch) and not unknown(plain)}


def with_plain_forms(text: str, forms: Mapping[str, str]) -> str:
    """`text` with each character in `forms` replaced by its plain form."""
    return text.translate(str.maketrans(dict(forms))) if forms else text
